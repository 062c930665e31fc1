"""A pretraining in one call on a GPU machine: the shipped encoder (``configs/pretrain_moses.yaml``) trained on as many
MOSES molecules as its cores can featurise in the budget, its best checkpoint brought back in the shipped form.

    python bench/gpu/gpu_pretrain.py --bundle .gpu_bundle --out $OUT                  # on a GPU, 540 s
    bash bench/gpu/gpu_rehearsal.sh pretrain                                          # rehearsed on a CPU, small

Its phases, each a process of its own under a cap (bench/gpu/gpu_check.py's ``Check``), within ``--budget`` wall
seconds counted from this script's start:

1. ``probe featurisation``: the cache of ``--probe-per-core`` molecules per core, built with every core
   (``data.preprocess_workers`` = cores, one chunk each): molecules per second, and the process's other seconds
   (Python, imports, reading the corpus).
2. ``probe steps``: ``graphormer-urpe train --config pretrain_moses`` on those molecules at the run's batch size,
   precision and loader workers, ``--probe-steps`` warm-up then timed steps (``bench/speed/step_clock.py``): steps
   per second, and the process's other seconds.
3. ``featurise``: the cache of N molecules. N (:func:`plan_molecules`) shares what is left of the budget, less every
   process's other seconds and :data:`RESERVE_SECONDS`, between featurising N and training on them ``--passes``
   times over (validations included), at most all 1,584,663; the chunks are sized so that every core ends at about
   the same time.
4. ``train``: S steps (:func:`plan_steps`, from the time actually left once the cache is built, so that an overrun of
   the featurisation shortens the training and the LR schedule still ends where the run ends), validated
   ``--validations`` times. While it trains, every new best checkpoint is reduced to ``OUT/pretrained`` (what
   ``graphormer-urpe convert pretrained --out`` writes), so a run cut at its cap, or a call killed, still brings
   back the best checkpoint validated so far.
5. ``convert``: the run's final best checkpoint, and its validation and test metrics.

The run is the shipped checkpoint's (architecture, loss, targets, seed, split shares): only the number of molecules,
the steps, the batch (``--batch-size``; 512 by default: the step of this 594K-parameter model on a GPU is bound by
kernel launches, not arithmetic, so a batch 8 times the config's costs about what its batch of 64 costs, and at the
rates of the plan it still leaves thousands of optimiser steps), the learning rate (the config's, scaled by the square
root of the batch's ratio, as for Adam: Malladi et al. 2022), the warm-up (the config's share of the steps), the
precision (``bf16-mixed`` on CUDA) and the loader workers change.

Under ``--out``, seven files at most: ``summary.json`` and ``summary.md`` (rewritten after every phase and every kept
checkpoint), ``pretrain.log`` (every command's output), ``pretrained/moses_rdkit2d.ckpt`` and
``pretrained/moses_rdkit2d.json``; the command line adds ``console.log`` and ``install.log``. Data and the run go
under ``--work`` (default ``runs/gpu_pretrain``), which must be new or empty. Exit code 1 if a phase failed, was cut
or was not reached, or no checkpoint was kept.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import REPO, TRAIN
from bench.gpu.gpu_check import Check, Outcome, machine, say

#: The config of the shipped checkpoint's pretraining, whose architecture, targets and split this run keeps.
CONFIG = "pretrain_moses"
#: Wall seconds a call may take by default: ten minutes, less the wheels' install and a margin.
DEFAULT_BUDGET = 540
#: Seconds kept back from the plan: the final conversion, the summaries, and a margin for the fixed costs of a
#: process on more data than the probes' (its cache opened, its targets read).
RESERVE_SECONDS = 25
#: Planned seconds are the probes' rates times this: the featurisation of a larger draw and a longer run vary.
SLACK = 1.1
#: Evaluation graphs per second, as a multiple of training graphs per second (a forward pass without the backward
#: pass and the optimiser step).
EVAL_SPEEDUP = 3.0
#: Chunks per core of the featurisation: each core ends within a fraction of a chunk of the others.
CHUNKS_PER_CORE = 8
#: The largest cache chunk (``data.chunk_size``'s default).
MAX_CHUNK = 10_000
#: The fewest molecules ``MosesDescriptors`` draws (``data.source.molecules``).
MIN_MOLECULES = 100
#: Caps of the probes (seconds on a GPU machine; ``--time-scale`` multiplies them).
PROBE_CAPS = {"probe featurisation": 60, "probe steps": 90}
#: The featurisation may overrun its plan by this share, but never into more than half the training's time.
FEATURISE_OVERRUN = 0.5
#: The training's loader workers: half the cores (the other half for the main process), at most this many (each
#: collates batches far faster than one step trains on them).
MAX_LOADER_WORKERS = 8
#: Seconds between two looks for a new best checkpoint while the training runs.
POLL_SECONDS = 10.0


@dataclass(frozen=True)
class Rates:
    """What the probes measured on this machine."""

    featurise_per_second: float  # molecules per second, every core featurising
    featurise_fixed: float  # seconds of a featurisation process besides its molecules
    steps_per_second: float  # optimiser steps per second at the run's batch size
    train_fixed: float  # seconds of a training process besides its steps and evaluations


@dataclass(frozen=True)
class Schedule:
    """The shape of the run that the plan sizes: its batch, how often it sees each molecule, how often it validates,
    and the share of molecules held out to validate (the same share to test)."""

    batch_size: int
    passes: float
    validations: int
    valid_fraction: float

    def train_share(self) -> float:
        """The share of the molecules in the training split."""
        return 1.0 - 2.0 * self.valid_fraction

    def eval_seconds(self, molecules: int, rates: Rates) -> float:
        """Seconds of ``validations`` validations and the final validation and test, at :data:`EVAL_SPEEDUP` times
        the training's graphs per second."""
        graphs = (self.validations + 2) * self.valid_fraction * molecules
        return graphs / (EVAL_SPEEDUP * self.batch_size * rates.steps_per_second)


def plan_molecules(seconds: float, rates: Rates, schedule: Schedule, corpus: int, reserve: float) -> int:
    """The molecules to featurise: those whose featurisation and training (``schedule.passes`` times over each
    training molecule, and the evaluations), each at the probes' rates times :data:`SLACK`, fill ``seconds`` less a
    featurisation's and a training's fixed seconds and ``reserve``; at most ``corpus``. :class:`ValueError` if that
    is fewer than :data:`MIN_MOLECULES`."""
    left = seconds - rates.featurise_fixed - rates.train_fixed - reserve
    per_molecule = 1.0 / rates.featurise_per_second + (
        schedule.passes * schedule.train_share() / schedule.batch_size / rates.steps_per_second
        + schedule.eval_seconds(1, rates)
    )
    molecules = min(corpus, math.floor(left / (SLACK * per_molecule))) if left > 0 else 0
    if molecules < MIN_MOLECULES:
        raise ValueError(
            f"{seconds:.0f} s left leave time for {max(molecules, 0)} molecules, fewer than {MIN_MOLECULES}: "
            "raise --budget"
        )
    return molecules


def featurise_seconds(molecules: int, rates: Rates) -> float:
    """The planned seconds of the featurisation process (its rate times :data:`SLACK`, and its fixed seconds)."""
    return rates.featurise_fixed + SLACK * molecules / rates.featurise_per_second


def plan_steps(seconds: float, molecules: int, rates: Rates, schedule: Schedule, reserve: float) -> int:
    """The optimiser steps that fit ``seconds`` less a training's fixed seconds, its evaluations and ``reserve``, at
    the probed rate times :data:`SLACK` (0 when none fits), rounded down to a multiple of ``schedule.validations``
    when there are that many, so that the last step is validated too. When every molecule fitted the plan, this is
    more than ``schedule.passes`` passes."""
    left = seconds - rates.train_fixed - reserve - SLACK * schedule.eval_seconds(molecules, rates)
    steps = max(0, math.floor(left * rates.steps_per_second / SLACK))
    return steps - steps % schedule.validations if steps >= schedule.validations else steps


def chunk_size(molecules: int, cores: int) -> int:
    """Molecules per cache chunk: :data:`CHUNKS_PER_CORE` chunks per core, at most :data:`MAX_CHUNK`."""
    return max(1, min(MAX_CHUNK, math.ceil(molecules / (cores * CHUNKS_PER_CORE))))


@dataclass(frozen=True)
class Optimisation:
    """The learning rate, warm-up and validation interval of a run of ``steps`` steps of ``batch_size`` (the interval
    rounded up: ``validations`` validations at most, the last at the last step when they divide ``steps``)."""

    lr: float
    warmup_steps: int
    val_check_interval: int

    @classmethod
    def of(cls, config: dict, steps: int, batch_size: int, validations: int) -> Optimisation:
        """From the config's: its learning rate times the square root of ``batch_size`` over its batch size, its
        warm-up's share of its steps, ``validations`` validations."""
        optim = config["model"]["init_args"]["optim"]
        configured = config["data"]["init_args"]["batch_size"]
        share = optim["warmup_steps"] / config["trainer"]["max_steps"]
        return cls(
            lr=optim["lr"] * math.sqrt(batch_size / configured),
            warmup_steps=max(1, round(share * steps)),
            val_check_interval=max(1, math.ceil(steps / validations)),
        )


def shipped_run_config() -> dict:
    """``configs/pretrain_moses.yaml`` as data."""
    from graphormer_urpe.configs import shipped_config

    return yaml.safe_load(shipped_config(CONFIG).read_text())


def data_overrides(root: Path, molecules: int, chunk: int, cores: int) -> list[str]:
    """The data options every phase shares (the same cache key for the probe's featurisation and training, and for
    the run's)."""
    return [
        "--config",
        CONFIG,
        "--data.root",
        str(root),
        "--data.source.molecules",
        str(molecules),
        "--data.chunk_size",
        str(chunk),
        "--data.preprocess_workers",
        str(cores),
    ]


def build_cache(result: Path, overrides: Sequence[str]) -> None:
    """Build the cache of the config and ``overrides`` (``graphormer-urpe train``'s options) and write what the build
    did (rows, graphs, seconds) to ``result`` as JSON: the featurisation phases, in a process of their own."""
    from graphormer_urpe.run.cli import GraphormerCLI

    data = GraphormerCLI([*overrides, "--logger", "none"]).datamodule
    data.prepare_data()
    built = data.build_summary
    if built is None:
        raise SystemExit(f"{data.cache_dir} was built already: the featurisation measures a new cache")
    result.write_text(json.dumps({"rows": built.rows, "graphs": built.graphs, "seconds": built.seconds}) + "\n")


def featurise(check: Pretraining, result: Path, overrides: list[str], seconds: float) -> dict:
    """A featurisation phase: :func:`build_cache` in a process of its own for at most ``seconds``; its molecules per
    second and fixed seconds."""
    command = [sys.executable, str(Path(__file__).resolve()), "--build-cache", str(result), "--", *overrides]
    outcome = check.run_for(command, seconds)
    entry: dict = {"status": outcome.status, "seconds": outcome.seconds}
    if outcome.ok:
        built = json.loads(result.read_text())
        entry |= {
            "molecules": built["rows"],
            "graphs": built["graphs"],
            "build_seconds": built["seconds"],
            "per_second": built["rows"] / built["seconds"],
            "fixed_seconds": max(0.0, outcome.seconds - built["seconds"]),
        }
    return entry


def probe_command(args: argparse.Namespace, overrides: list[str], clock: Path) -> list[str]:
    """The step probe's ``graphormer-urpe train``: ``overrides`` (the probe's data and the run's training options),
    ``--probe-steps`` warm-up and timed steps clocked into ``clock``, no validation, test, logger or checkpoint."""
    warm, timed = args.probe_steps
    step_clock = {
        "class_path": "bench.speed.step_clock.StepClock",
        "init_args": {"out": str(clock), "first": warm, "last": warm + timed},
    }
    return [
        *TRAIN,
        *overrides,
        "--run_root",
        str(args.work / "probe_runs"),
        "--logger",
        "none",
        "--checkpoint.every_n_steps",
        "0",
        "--trainer.max_steps",
        str(warm + timed),
        "--trainer.limit_val_batches",
        "0",
        "--trainer.limit_test_batches",
        "0",
        "--trainer.callbacks+",
        json.dumps(step_clock),
    ]


def probe_steps(check: Pretraining, args: argparse.Namespace, overrides: list[str], clock: Path) -> dict:
    """The step probe (:func:`probe_command`) under its cap; steps per second and the process's fixed seconds."""
    warm, timed = args.probe_steps
    outcome = check.run(probe_command(args, overrides, clock), PROBE_CAPS["probe steps"])
    entry: dict = {"status": outcome.status, "seconds": outcome.seconds}
    if outcome.ok:
        timing = json.loads(clock.read_text())
        entry |= {
            "steps_per_second": timing["steps_per_second"],
            "graphs_per_second": timing["graphs_per_second"],
            "between_steps_share": timing["between_steps_share"],
            "fixed_seconds": max(0.0, outcome.seconds - (warm + timed) / timing["steps_per_second"]),
        }
    return entry


def checkpoint_step(path: Path) -> int:
    """The optimiser step of a run's ``best-<step>.ckpt``."""
    return int(path.stem.split("-")[1])


def best_checkpoint(run_dir: Path) -> Path | None:
    """The run's best checkpoint (``best-<step>.ckpt``, the latest step if two are there), or None."""
    return max(run_dir.glob("checkpoints/best-*.ckpt"), key=checkpoint_step, default=None)


def keep_checkpoint(source: Path, out: Path, scratch: Path) -> dict:
    """Reduce ``source`` to ``out/pretrained`` as ``graphormer-urpe convert pretrained`` does (written in ``scratch``
    first, then each file replaced whole, so that a call killed meanwhile leaves no half-written file); return the
    provenance record."""
    from graphormer_urpe.convert.pretrained import export
    from graphormer_urpe.pretrained import CHECKPOINT, PROVENANCE

    shutil.rmtree(scratch, ignore_errors=True)
    record = export(source, scratch / CHECKPOINT.name, scratch / PROVENANCE.name)
    kept = out / "pretrained"
    kept.mkdir(parents=True, exist_ok=True)
    for name in (CHECKPOINT.name, PROVENANCE.name):
        partial = kept / f".{name}.partial"
        shutil.copyfile(scratch / name, partial)
        partial.replace(kept / name)
    return record


def validation_curve(run_dir: Path, steps: int) -> list[dict]:
    """``{"step", "val/mae"}`` of every validation of a run of ``steps`` steps logged so far, by the optimiser steps
    before it (the run logs a validation under the step before; the final validation of the best checkpoint, logged
    under ``steps``, is left out: it is in ``metrics.json``)."""
    from graphormer_urpe.run.ledger import read_metrics

    if not (run_dir / "metrics.csv").is_file():
        return []
    return [
        {"step": row["step"] + 1, "val/mae": row["val/mae"]}
        for row in read_metrics(run_dir)
        if "val/mae" in row and row["step"] < steps
    ]


@dataclass
class Pretraining(Check):
    """The phases' commands under their caps, and the summary: :class:`Check` with its own ``summary.md`` and log,
    and the step of the checkpoint kept under ``OUT/pretrained``."""

    kept_step: int | None = None

    @property
    def log(self) -> Path:
        return self.out / "pretrain.log"

    def markdown(self) -> str:
        return markdown(self.report)

    def run_for(self, command: list[str], seconds: float, **options: Any) -> Outcome:
        """:meth:`Check.run` for ``seconds`` of wall time, not scaled by ``--time-scale``: a planned phase's cap."""
        return self.run(command, seconds / self.time_scale, **options)

    def phase(self, name: str, entry: dict) -> None:
        """Record ``entry`` as phase ``name``'s result, and write the summaries."""
        self.report["phases"][name] = entry
        self.write()

    def keep(self, run_dir: Path, steps: int) -> None:
        """Reduce the best checkpoint of the run of ``steps`` steps to ``OUT/pretrained`` if it is not the one kept
        already, and record it with the validations so far. A failed reduction is said, and the training goes on
        (the next look tries again)."""
        best = best_checkpoint(run_dir)
        if best is None or checkpoint_step(best) == self.kept_step:
            return
        try:
            record = keep_checkpoint(best, self.out, self.work / "kept")
        except Exception as error:  # noqa: BLE001 -- e.g. a checkpoint replaced while read: looked at again later
            say(f"could not keep {best}: {error!r}")
            return
        self.kept_step = checkpoint_step(best)
        curve = validation_curve(run_dir, steps)
        self.report["kept"] = {
            "checkpoint": record["source_checkpoint"],
            "step": self.kept_step,
            "sha256": record["sha256"],
            "bytes": record["bytes"],
            "val/mae": next((row["val/mae"] for row in curve if row["step"] == self.kept_step), None),
        }
        self.report["validations"] = curve
        self.write()
        say(f"kept {best.name} in {self.out / 'pretrained'}")


def host(cores: int) -> str:
    """This machine's processor and the cores the run uses."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    name = names[0] if names else platform.processor() or platform.machine()
    return f"{name}, {os.cpu_count()} cores ({cores} used)"


#: The phases in order, each with what its summary line says of it once it ended well.
PHASES: dict[str, Callable[[dict], str]] = {
    "probe featurisation": lambda e: f"{e['molecules']:,} molecules, {e['per_second']:,.1f} molecules/s",
    "probe steps": lambda e: f"{e['steps_per_second']:.2f} steps/s, {e['graphs_per_second']:,.0f} graphs/s",
    "featurise": lambda e: f"{e['molecules']:,} molecules, {e['per_second']:,.1f} molecules/s",
    "train": lambda e: f"{e['steps']:,} steps of {e['batch_size']}, {e['samples']:,} graphs seen",
    "convert": lambda e: f"the best checkpoint, step {e['step']:,}",
}


def markdown(report: dict) -> str:
    """``summary.md``: the phases, the rates, the plan, the validations and the checkpoint kept."""
    lines = [
        f"Machine: {report['machine']}; host: {report['host']}; {report['date']}; `{report['command']}`",
        "",
        "| phase | status | s | what |",
        "|---|---|---|---|",
    ]
    for name, what in PHASES.items():
        entry = report["phases"].get(name)
        if entry is None:
            lines.append(f"| {name} | not reached | | |")
            continue
        detail = what(entry) if entry["status"] == "ok" else entry.get("error", "")
        lines.append(f"| {name} | {entry['status']} | {entry['seconds']:.0f} | {detail} |")
    lines.append("")
    if rates := report.get("rates"):
        lines += [
            f"**Rates**: featurisation {rates['featurise_per_second']:,.1f} molecules/s (and "
            f"{rates['featurise_fixed']:.0f} s per process), training {rates['steps_per_second']:.2f} steps/s (and "
            f"{rates['train_fixed']:.0f} s per process)",
            "",
        ]
    if plan := report.get("plan"):
        lines += [
            f"**Plan**: with {plan['budget_left']:.0f} s left, {plan['molecules']:,} of {plan['corpus']:,} MOSES "
            f"molecules, in chunks of {plan['chunk_size']:,} on {plan['cores']} cores (planned "
            f"{plan['featurise_seconds']:.0f} s)",
            "",
        ]
        if "steps" in plan:
            lines += [
                f"**Then**: with {plan['budget_left_to_train']:.0f} s left, {plan['steps']:,} steps of "
                f"{plan['batch_size']} ({plan['passes']:.2f} passes over the training molecules), learning rate "
                f"{plan['lr']:.3g}, warm-up {plan['warmup_steps']:,} steps, validation every "
                f"{plan['val_check_interval']:,} steps, precision {plan['precision']}, {plan['loader_workers']} "
                "loader workers",
                "",
            ]
    if curve := report.get("validations"):
        lines += ["| after step | val/mae |", "|---|---|"]
        lines += [f"| {row['step']:,} | {row['val/mae']:.4f} |" for row in curve]
        lines.append("")
    if kept := report.get("kept"):
        mae = "not logged" if kept["val/mae"] is None else f"{kept['val/mae']:.4f}"
        lines += [
            f"**Kept** in `pretrained/`: step {kept['step']:,} ({kept['checkpoint']}), validation MAE {mae}, "
            f"{kept['bytes']:,} bytes, SHA-256 {kept['sha256'][:12]}",
            "",
        ]
    if final := report.get("metrics"):
        lines += [f"**Final** (the best checkpoint): {', '.join(f'{k} {v:.4f}' for k, v in final.items())}", ""]
    return "\n".join(lines)


def link_corpus(corpus: Path, roots: Sequence[Path]) -> None:
    """Link the MOSES corpus ``corpus`` into each data root, where ``MosesDescriptors`` finds it without molsets."""
    from graphormer_urpe.data.sources.pretraining import placed_moses_file

    for root in roots:
        placed_moses_file(root).parent.mkdir(parents=True, exist_ok=True)
        placed_moses_file(root).symlink_to(corpus.resolve())


@dataclass(frozen=True)
class Setting:
    """What every phase of one call shares: the options, the run's shape, and the overrides of the training."""

    args: argparse.Namespace
    schedule: Schedule
    config: dict  # configs/pretrain_moses.yaml
    loader_workers: int
    reserve: float  # seconds (RESERVE_SECONDS times --time-scale)
    started: float  # time.monotonic() at the script's start

    def left(self) -> float:
        """Seconds of the budget left now."""
        return self.args.budget - (time.monotonic() - self.started)

    def train_overrides(self) -> list[str]:
        """The training options every training phase shares: batch, loader, device and precision."""
        return [
            "--data.batch_size",
            str(self.args.batch_size),
            "--data.num_workers",
            str(self.loader_workers),
            "--trainer.accelerator",
            "gpu" if self.args.device == "cuda" else "cpu",
            "--trainer.precision",
            self.args.precision,
            "--trainer.enable_progress_bar",
            "false",
        ]


def probe(check: Pretraining, setting: Setting) -> Rates | None:
    """The two probes; their rates, or None if one did not end well."""
    args = setting.args
    data = data_overrides(args.work / "probe", args.probe_per_core * args.cores, args.probe_per_core, args.cores)
    cap = PROBE_CAPS["probe featurisation"] * args.time_scale
    features = featurise(check, args.work / "probe.json", data, cap)
    check.phase("probe featurisation", features)
    if features["status"] != "ok":
        return None
    steps = probe_steps(check, args, [*data, *setting.train_overrides()], args.work / "clock.json")
    check.phase("probe steps", steps)
    if steps["status"] != "ok":
        return None
    rates = Rates(features["per_second"], features["fixed_seconds"], steps["steps_per_second"], steps["fixed_seconds"])
    check.report["rates"] = asdict(rates)
    return rates


def featurise_corpus(check: Pretraining, setting: Setting, rates: Rates) -> list[str] | None:
    """Plan the molecules and featurise them; the data options of their cache, or None if it was not built."""
    from graphormer_urpe.data.sources.pretraining import MOSES_TRAIN_SIZE

    args, left = setting.args, setting.left()
    try:
        planned = plan_molecules(left, rates, setting.schedule, MOSES_TRAIN_SIZE, setting.reserve)
    except ValueError as error:
        check.phase("featurise", {"status": "not reached", "seconds": 0.0, "error": str(error)})
        return None
    molecules = min(args.molecules or MOSES_TRAIN_SIZE, planned)
    chunk = chunk_size(molecules, args.cores)
    seconds = featurise_seconds(molecules, rates)
    check.report["plan"] = {
        "corpus": MOSES_TRAIN_SIZE,
        "molecules": molecules,
        "chunk_size": chunk,
        "cores": args.cores,
        "featurise_seconds": seconds,
        "batch_size": args.batch_size,
        "precision": args.precision,
        "loader_workers": setting.loader_workers,
        "budget_left": left,
    }
    say(f"plan: {molecules:,} molecules, featurised in {seconds:.0f} s of the {left:.0f} s left")
    data = data_overrides(args.work / "data", molecules, chunk, args.cores)
    training = left - seconds - setting.reserve
    cap = max(seconds, min(seconds * (1 + FEATURISE_OVERRUN), left - setting.reserve - training / 2))
    entry = featurise(check, args.work / "featurise.json", data, cap)
    check.phase("featurise", entry)
    return data if entry["status"] == "ok" else None


def train_command(
    setting: Setting, data: list[str], run_dir: Path, steps: int, optimisation: Optimisation
) -> list[str]:
    """The run's ``graphormer-urpe train``: the cache's ``data`` options, the training options, ``steps`` steps with
    ``optimisation``'s schedule and validations, in ``run_dir``."""
    return [
        *TRAIN,
        *data,
        *setting.train_overrides(),
        "--run_root",
        str(run_dir.parent),
        "--run_name",
        run_dir.name,
        "--trainer.max_steps",
        str(steps),
        "--trainer.val_check_interval",
        str(optimisation.val_check_interval),
        "--checkpoint.every_n_steps",
        str(optimisation.val_check_interval),
        "--model.optim.lr",
        f"{optimisation.lr:.4g}",
        "--model.optim.warmup_steps",
        str(optimisation.warmup_steps),
    ]


def train(check: Pretraining, setting: Setting, rates: Rates, data: list[str], run_dir: Path) -> int | None:
    """Plan the steps from the time left and train, keeping every new best checkpoint as it comes; the steps
    planned, or None if none fits."""
    args, left = setting.args, setting.left()
    molecules = check.report["plan"]["molecules"]
    steps = plan_steps(left, molecules, rates, setting.schedule, setting.reserve)
    if steps < 1:
        check.phase("train", {"status": "not reached", "seconds": 0.0, "error": f"{left:.0f} s left: no step fits"})
        return None
    optimisation = Optimisation.of(setting.config, steps, args.batch_size, args.validations)
    samples = steps * args.batch_size
    check.report["plan"] |= {
        "steps": steps,
        "passes": samples / (molecules * setting.schedule.train_share()),
        **asdict(optimisation),
        "budget_left_to_train": left,
    }
    say(f"plan: {steps:,} steps of {args.batch_size} in the {left:.0f} s left")
    command = train_command(setting, data, run_dir, steps, optimisation)
    keep = functools.partial(check.keep, run_dir, steps)
    every = POLL_SECONDS * args.time_scale
    outcome = check.run_for(command, left - setting.reserve / 2, while_running=keep, every=every)
    check.phase(
        "train",
        {
            "status": outcome.status,
            "seconds": outcome.seconds,
            "steps": steps,
            "batch_size": args.batch_size,
            "samples": samples,
        },
    )
    return steps


def convert(check: Pretraining, run_dir: Path, steps: int) -> None:
    """Keep the final best checkpoint of the run of ``steps`` steps, and record its validation and test metrics."""
    started = time.monotonic()
    check.keep(run_dir, steps)
    if check.kept_step is None:
        check.phase("convert", {"status": "failed", "seconds": 0.0, "error": "the run wrote no best checkpoint"})
        return
    if (run_dir / "metrics.json").is_file():
        final = json.loads((run_dir / "metrics.json").read_text())
        check.report["metrics"] = {
            key: value
            for part in ("validation", "test")
            for key, value in final.get(part, {}).items()
            if key.count("/") == 1  # the means over the targets, not each descriptor's
        }
    check.phase("convert", {"status": "ok", "seconds": time.monotonic() - started, "step": check.kept_step})


def run_phases(check: Pretraining, setting: Setting) -> None:
    """The phases in order; each records its entry as it ends, and one that did not end well stops the call."""
    from graphormer_urpe.data.sources.pretraining import placed_moses_file

    args = setting.args
    if args.bundle is not None:
        link_corpus(placed_moses_file(args.bundle / "data"), [args.work / "probe", args.work / "data"])
    if (rates := probe(check, setting)) is None:
        return
    if (data := featurise_corpus(check, setting, rates)) is None:
        return
    run_dir = args.work / "runs" / "pretrain"
    if (steps := train(check, setting, rates, data, run_dir)) is not None:
        convert(check, run_dir, steps)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--build-cache"]:
        if len(argv) < 3 or argv[2] != "--":
            raise SystemExit("usage: gpu_pretrain.py --build-cache RESULT.json -- OPTIONS OF graphormer-urpe train")
        build_cache(Path(argv[1]), argv[3:])
        return 0
    from graphormer_urpe.data.datamodule import available_cores
    from graphormer_urpe.data.sources.pretraining import placed_moses_file

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    parser.add_argument("--precision", default=None, help="default: bf16-mixed on CUDA, 32 on the CPU")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="wall seconds from this script's start")
    parser.add_argument("--batch-size", type=int, default=512, help="graphs per step (the config's: 64)")
    parser.add_argument("--passes", type=float, default=2.0, help="passes over the training molecules the plan sizes")
    parser.add_argument("--validations", type=int, default=10, help="validations over the run")
    parser.add_argument("--cores", type=int, default=available_cores(), help="featurisation processes (all cores)")
    parser.add_argument("--molecules", type=int, default=None, help="at most this many molecules (default: the plan's)")
    parser.add_argument("--probe-per-core", type=int, default=400, help="molecules per core of the probes")
    parser.add_argument(
        "--probe-steps", type=int, nargs=2, default=(10, 30), metavar=("WARM", "TIMED"), help="the step probe's steps"
    )
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiply the probes' caps and the reserve")
    parser.add_argument("--bundle", type=Path, default=None, help="bench/gpu/gpu_bundle.py's folder: the corpus")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "gpu_pretrain_out", help="what comes back")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "gpu_pretrain", help="data and run (new or empty)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no GPU (torch.cuda.is_available() is False)")
    if args.work.exists() and any(args.work.iterdir()):
        parser.error(f"--work {args.work} is not empty: the probes measure new caches")
    if args.bundle is not None and not placed_moses_file(args.bundle / "data").is_file():
        parser.error(
            f"--bundle {args.bundle} holds no {placed_moses_file(args.bundle / 'data')}: prepare it with "
            "python bench/gpu/gpu_bundle.py"
        )
    for option, value, least in (
        ("--batch-size", args.batch_size, 1),
        ("--validations", args.validations, 1),
        ("--cores", args.cores, 1),
        ("--probe-steps TIMED", args.probe_steps[1], 1),
    ):
        if value < least:
            parser.error(f"{option} {value}: at least {least}")
    if args.passes <= 0:
        parser.error(f"--passes {args.passes}: must be positive")
    if args.probe_per_core * args.cores < MIN_MOLECULES:
        parser.error(
            f"--probe-per-core {args.probe_per_core} on {args.cores} cores probes {args.probe_per_core * args.cores} "
            f"molecules; MosesDescriptors draws at least {MIN_MOLECULES}"
        )
    args.precision = args.precision or ("bf16-mixed" if args.device == "cuda" else "32")
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    check = Pretraining(args.out, args.work, args.time_scale, deadline=started + args.budget)
    check.report = {
        "machine": machine(torch.device(args.device)),
        "host": host(args.cores),
        "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
        "command": " ".join(["python bench/gpu/gpu_pretrain.py", *argv]),
        "budget": args.budget,
        "phases": {},
    }
    check.write()
    say(f"on {check.report['machine']}, {check.report['host']}; budget {args.budget:.0f} s; writing to {args.out}")
    config = shipped_run_config()
    valid_fraction = config["data"]["init_args"]["source"]["init_args"]["valid_fraction"]
    setting = Setting(
        args,
        Schedule(args.batch_size, args.passes, args.validations, valid_fraction),
        config,
        loader_workers=max(1, min(MAX_LOADER_WORKERS, args.cores // 2)),
        reserve=RESERVE_SECONDS * args.time_scale,
        started=started,
    )
    try:
        run_phases(check, setting)
    except Exception as error:  # a bug of a phase: recorded, and what was kept stays
        say(f"stopped by {error!r}")
        check.report["error"] = repr(error)
        check.write()
    failed = [name for name in PHASES if check.report["phases"].get(name, {}).get("status") != "ok"]
    print("\n" + check.markdown())
    say(
        f"summary in {args.out / 'summary.md'} after {time.monotonic() - started:.0f} s; "
        + (f"NOT OK: {', '.join(failed)}" if failed else "all phases ok")
    )
    return 1 if failed or "kept" not in check.report else 0


if __name__ == "__main__":
    sys.exit(main())
