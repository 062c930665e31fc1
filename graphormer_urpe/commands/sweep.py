"""``graphormer-urpe sweep``: one experiment over several seeds; mean and standard deviation of every metric, and
for a SMILES table the recipe's ensemble (docs/small-data.md).

    graphormer-urpe sweep --config zinc_subset --seeds 0 1 2 3
    graphormer-urpe sweep --config qm9_gap --seeds 0 1 2 3 --name gap_rpe --model.encoder.attention rpe
    graphormer-urpe sweep --collect --name gap_rpe --seeds 0 1 2 3      # only aggregate finished runs
    graphormer-urpe sweep --config small_molecules --seeds 0 1 2 3 4 --ensemble --trees --predict new.csv \
        --data.source.path my.csv --data.source.targets '[logS]'

Seed S is the ``train`` run ``<run_root>/<name>-seed<S>`` with ``--seed_everything S`` (model
initialisation, dropout and data order; the dataset split stays fixed), one after the other, each
in its own process (so ``--trainer.devices 4`` works as in ``train``). Any other argument goes
to ``train`` unchanged; with ``--logger wandb`` the runs share the W&B group ``<name>``.

A seed's run is identified by its resolved config, all but the seed and the run's name and place
(:func:`~graphormer_urpe.run.checkpoints.config_identity`). Before anything runs, every seed directory
that exists is compared with this command's config as its run records it (``train --print_config``, with
``--init_from``'s architecture: :func:`~graphormer_urpe.run.finetune.config_as_recorded`); any difference
stops the sweep (exit code 2) naming the keys: an experiment name stands for one config, so a
changed one (``--model.encoder.attention rpe``) needs another ``--name``. Seeds that finished
(``metrics.json``) are reused, one line each; the others run with ``--ckpt_path auto``, so an
interrupted seed resumes from its ``last.ckpt``. ``--collect`` checks that the seeds it aggregates
share one config. On a SLURM cluster run the seeds as an array job and aggregate them with ``--collect``.

A seed whose run directory another process works in (another sweep of the same seeds, a ``train`` of
that run: its ``.lock`` is held) is waited for, with one line saying so, then reused if it finished, else
run (resuming its ``last.ckpt``); two sweeps of the same seeds at once thus both end with every seed.

Stopping a sweep: SIGTERM (or SIGUSR1) sent to the sweep is passed on to the seed's ``train``, and
Ctrl-C in the terminal reaches it directly; the seed finishes its optimiser step, writes ``last.ckpt``,
and the sweep stops with the seed's exit code (128 + the signal); the same command resumes it.

Writes ``<run_root>/<name>-seeds.json`` and ``<run_root>/<name>-seeds.md``: per metric the mean,
the sample standard deviation (n - 1 in the denominator; 0 for one seed), n and every seed's value.
With ``--ensemble`` (a SMILES table's config) the seeds' best checkpoints are saved as an ensemble,
``<run_root>/<name>-ensemble/`` (``graphormer-urpe ensemble``, :mod:`graphormer_urpe.commands.ensemble`); with
``--trees`` as well (runs with RDKit descriptors, as ``configs/small_molecules.yaml``; regression or binary labels),
blended with gradient-boosted trees on the descriptors, ``<run_root>/<name>-ensemble-trees/``. ``--predict TABLE``
then predicts a table of new molecules with it (``graphormer-urpe predict``), into
``<run_root>/<name>-ensemble[-trees]-predict-<TABLE's stem>.csv``. An ensemble of the same seeds' runs that exists
is reused; one of other runs, or an existing prediction, is refused. Every refusal (options, ``train``'s included:
the command is parsed here first; the table to predict, the outputs, trees without descriptors) comes before the
first seed starts.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import yaml

from graphormer_urpe.commands.ensemble import make_ensemble, summary
from graphormer_urpe.commands.exits import exit_codes
from graphormer_urpe.data.sources.tables import SmilesTable
from graphormer_urpe.errors import DataError, InputError, refuse
from graphormer_urpe.evaluation.ensemble import RECORD_FILE, EnsembleRecord, SavedEnsemble, sha256_file
from graphormer_urpe.evaluation.new_molecules import prediction_frame, table_to_predict, write_new
from graphormer_urpe.run.checkpoints import config_identity, differences, run_config
from graphormer_urpe.run.cli import TrainingCLI, configure_logging
from graphormer_urpe.run.finetune import config_as_recorded
from graphormer_urpe.run.ledger import CONFIG_FILE, LOCK_FILE, is_locked

#: How a seed's run is started: the ``train`` command of the installed package, in a process of its own.
TRAIN = [sys.executable, "-m", "graphormer_urpe.commands", "train"]
#: Seconds between two looks at a seed that another process runs.
POLL_SECONDS = 10.0


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="graphormer-urpe sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="experiment config (as for train)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3], help="seeds (default: 0 1 2 3)")
    parser.add_argument("--name", help="experiment name (default: the config name)")
    parser.add_argument("--run_root", default="runs", help="directory of the runs and of the summary")
    parser.add_argument("--collect", action="store_true", help="only aggregate the seeds' finished runs")
    parser.add_argument(
        "--ensemble",
        action="store_true",
        help="also save the seeds' best checkpoints as an ensemble, scored on the test split (a SMILES "
             "table's config; docs/small-data.md)",
    )
    parser.add_argument("--trees", action="store_true",
                        help="with --ensemble: blend gradient-boosted trees on the RDKit descriptors with the "
                             "ensemble, their weight chosen on the validation rows (docs/small-data.md)")
    parser.add_argument("--predict", type=Path, metavar="TABLE",
                        help="with --ensemble: also predict the molecules of TABLE (CSV or Parquet, the training "
                             "table's SMILES column) with the ensemble")
    options, train_args = parser.parse_known_args(argv)
    if options.trees and not options.ensemble:
        parser.error("--trees blends trees with the ensemble: add --ensemble")
    if options.predict is not None and not options.ensemble:
        parser.error("--predict predicts with the ensemble: add --ensemble")
    if options.name is None:
        if options.config is None:
            parser.error("--name or --config is required")
        options.name = Path(options.config).stem
    if not options.collect and options.config is None:
        parser.error("--config is required to run seeds")
    return options, train_args


def run_name(name: str, seed: int) -> str:
    """Run directory name of one seed."""
    return f"{name}-seed{seed}"


def seed_command(options: argparse.Namespace, seed: int, train_args: Sequence[str]) -> list[str]:
    """The ``train`` command line of one seed (resuming it if it has a checkpoint)."""
    command = [*TRAIN, "--config", options.config, *train_args,
               "--seed_everything", str(seed), "--run_root", options.run_root,
               "--run_name", run_name(options.name, seed), "--ckpt_path", "auto"]
    if not any(a == "--wandb.group" or a.startswith("--wandb.group=") for a in train_args):
        command += ["--wandb.group", options.name]
    return command


def seed_identity(config: Mapping) -> dict:
    """What a seed's run is, from its resolved config: all but the seed, run name, run root and checkpoint."""
    return config_identity(config, ignore=("seed_everything",))


def run_seed(command: Sequence[str]) -> int:
    """Run one seed's ``train.py``; returns its exit code. SIGTERM and SIGUSR1 sent to this process are passed
    on to it (it saves ``last.ckpt`` and stops); Ctrl-C in the terminal reaches it directly, so this process
    only waits for it (``subprocess.run`` would kill it a quarter of a second after Ctrl-C).

    A seed stopped by a forwarded signal returns 128 + that signal, so that the sweep stops, even when the signal
    came as its run was ending: after ``metrics.json`` the run no longer catches it (and dies of it), or it
    finished anyway (exit 0)."""
    child = subprocess.Popen(command)
    forwarded: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        forwarded.append(signum)
        child.send_signal(signum)

    def wait_for_the_seed(signum: int, frame: FrameType | None) -> None:
        print(
            "[seeds] Ctrl-C: the seed's run finishes its step and writes last.ckpt", file=sys.stderr, flush=True
        )

    handlers = {signal.SIGTERM: forward, signal.SIGUSR1: forward, signal.SIGINT: wait_for_the_seed}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if code < 0:  # killed by a signal (Popen's -signum)
        return 128 - code
    if forwarded and code == 0:
        return 128 + forwarded[0]
    return code


def wait_for_other_process(run_dir: Path, label: str) -> bool:
    """Wait while another process holds ``run_dir``'s lock (it runs that seed); returns whether it did."""
    lock = run_dir / LOCK_FILE
    if not (lock.is_file() and is_locked(lock)):
        return False
    print(f"[seeds] {label}: another process runs it ({lock} is held): waiting for it to finish", flush=True)
    while lock.is_file() and is_locked(lock):
        time.sleep(POLL_SECONDS)
    print(f"[seeds] {label}: the other process is done with {run_dir}", flush=True)
    return True


def run_or_reuse(options: argparse.Namespace, seed: int, train_args: Sequence[str]) -> int:
    """Run one seed unless its run finished (reused); a seed another process runs is waited for first. Returns the
    exit code of its ``train.py`` (0 when reused)."""
    run_dir = Path(options.run_root) / run_name(options.name, seed)
    label = f"{options.name}: seed {seed}"
    while True:
        wait_for_other_process(run_dir, label)
        if (run_dir / "metrics.json").is_file():
            print(f"[seeds] {label} reused: {run_dir} finished with the same config", flush=True)
            return 0
        print(f"[seeds] {label} ({options.seeds.index(seed) + 1}/{len(options.seeds)})", flush=True)
        code = run_seed(seed_command(options, seed, train_args))
        if not code or not (run_dir / LOCK_FILE).is_file() or not is_locked(run_dir / LOCK_FILE):
            return code  # a failure of its own; else another process took the run first: wait for it


def resolved_config(command: Sequence[str]) -> dict:
    """The config ``train`` would record for ``command`` (a :func:`seed_command`: ``--print_config``, with
    ``--init_from``'s architecture: :func:`~graphormer_urpe.run.finetune.config_as_recorded`), without running it.
    Parsed in this process: a ``train`` process started only to print it cost every sweep start some 10 s."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            TrainingCLI([*command[len(TRAIN):], "--print_config"])
    except SystemExit as stop:  # --print_config's exit (0), or a bad option's, its message already on stderr
        if stop.code:
            raise
    try:
        return config_as_recorded(yaml.safe_load(printed.getvalue()))
    except InputError as error:
        refuse(str(error))


def check_seed_runs(options: argparse.Namespace, train_args: Sequence[str]) -> None:
    """Stop (exit code 2) on an option ``train`` would refuse, before any seed runs (the command is parsed here),
    and unless every existing seed directory holds a run of this command's config."""
    wanted = seed_identity(resolved_config(seed_command(options, options.seeds[0], train_args)))
    recorded = {
        seed: Path(options.run_root) / run_name(options.name, seed) / CONFIG_FILE for seed in options.seeds
    }
    recorded = {seed: path for seed, path in recorded.items() if path.is_file()}
    for seed, path in recorded.items():
        if differing := differences(seed_identity(yaml.safe_load(path.read_text())), wanted, str(path), "now"):
            refuse(
                f"seed {seed} of '{options.name}' ({path.parent}) is a run of another configuration: {differing}; "
                "run this one under another --name"
            )


def check_same_config(run_root: Path, name: str, seeds: Sequence[int]) -> None:
    """Stop (exit code 2) unless the finished seeds to aggregate share one config."""
    configs = {seed: run_root / run_name(name, seed) / CONFIG_FILE for seed in seeds}
    identities = {seed: seed_identity(yaml.safe_load(path.read_text())) for seed, path in configs.items()}
    first = seeds[0]
    for seed in seeds[1:]:
        if differing := differences(identities[first], identities[seed], f"seed {first}", f"seed {seed}"):
            refuse(f"the seeds of '{name}' under {run_root} are runs of different configurations: {differing}")


def final_metrics(metrics: Mapping) -> dict[str, float]:
    """The numbers of one run's ``metrics.json``: its validation and test metrics, and its steps."""
    values = {**(metrics.get("validation") or {}), **(metrics.get("test") or {})}  # test: None if hidden
    values["global_step"] = metrics.get("global_step")
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float))}


def aggregate(per_seed: Mapping[int, Mapping[str, float]]) -> dict[str, dict]:
    """Mean, sample standard deviation, n and values of every metric over the seeds that have it."""
    names = sorted({name for metrics in per_seed.values() for name in metrics})
    summary = {}
    for name in names:
        values = {seed: metrics[name] for seed, metrics in per_seed.items() if name in metrics}
        n = len(values)
        mean = sum(values.values()) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values.values()) / (n - 1)) if n > 1 else 0.0
        summary[name] = {"mean": mean, "std": std, "n": n, "values": values}
    return summary


def markdown_table(name: str, summary: Mapping[str, Mapping], seeds: Sequence[int]) -> str:
    """A Markdown table: metric, mean ± std, n, one column per seed."""
    lines = [f"### {name}: {len(seeds)} seeds", "",
             "| metric | mean ± std | n | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|---|---|" + "---|" * len(seeds)]
    for metric, stats in summary.items():
        cells = [f"{stats['values'][s]:.6g}" if s in stats["values"] else "-" for s in seeds]
        lines.append(
            f"| {metric} | {stats['mean']:.6g} ± {stats['std']:.2g} | {stats['n']} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class EnsembleOutputs:
    """What ``--ensemble`` writes, planned before the first seed starts (:func:`plan_ensemble_outputs`)."""

    directory: Path  # <run_root>/<name>-ensemble[-trees]
    predictions: Path | None  # <directory>-predict-<TABLE's stem>.csv for --predict TABLE
    reused: EnsembleRecord | None  # the existing ensemble of exactly these seeds' runs, else None: made anew


def plan_ensemble_outputs(options: argparse.Namespace, train_args: Sequence[str]) -> EnsembleOutputs:
    """Every refusal of ``--ensemble`` before any seed runs: a config that is not a SMILES table's, ``--trees``
    without descriptors or for a multi-class label, a ``--predict`` table that is missing, empty or lacks the SMILES
    column, an existing prediction, an existing ensemble of other runs (one of these very runs is reused)."""
    suffix = "-ensemble-trees" if options.trees else "-ensemble"
    directory = Path(options.run_root) / f"{options.name}{suffix}"
    predictions = None
    if options.predict is not None:
        predictions = directory.with_name(f"{directory.name}-predict-{options.predict.stem}.csv")
        if predictions.exists():
            raise DataError(
                f"--predict: {predictions} exists (an earlier prediction is never overwritten): move it "
                "away first"
            )
    config = run_config(yaml.safe_dump(resolved_config(seed_command(options, options.seeds[0], train_args))))
    if not issubclass(config.source_class(), SmilesTable):
        raise DataError(f"--ensemble saves the runs of a SMILES table (data.source SmilesTable), not of "
                        f"{config.data_name}")
    source = config.source()
    if options.trees and not source.features.descriptors:
        raise DataError("--trees reads the RDKit descriptors and this config has none (data.source.descriptors "
                        f"{source.features.descriptors}): add --data.source.descriptors rdkit2d")
    if options.trees and source.task == "multiclass":
        raise DataError(
            "--trees predicts regression targets or binary labels; this table has a multi-class label"
        )
    if options.predict is not None:
        table_to_predict(options.predict, config).smiles()  # read now: a missing column or no rows stops here
    return EnsembleOutputs(directory, predictions, existing_ensemble(options, directory))


def existing_ensemble(options: argparse.Namespace, directory: Path) -> EnsembleRecord | None:
    """The ensemble already at ``directory`` if it is one of exactly these seeds' finished runs (reused), None if
    there is none; refuse an ensemble of other runs (never overwritten)."""
    if not directory.exists():
        return None
    other = (
        f"{directory} holds an ensemble of other runs (an ensemble is never overwritten): move it away or use "
        "another --name"
    )
    if not (directory / RECORD_FILE).is_file():
        raise DataError(other)
    record = SavedEnsemble(directory).record
    metrics = [Path(options.run_root) / run_name(options.name, seed) / "metrics.json" for seed in options.seeds]
    if not all(path.is_file() for path in metrics):
        raise DataError(other.replace("of other runs", "of the runs before seeds that still have to run"))
    best = [Path(json.loads(path.read_text())["best_checkpoint"]) for path in metrics]
    if [sha256_file(path) if path.is_file() else None for path in best] != [s.sha256 for s in record.sources]:
        raise DataError(other)
    return record


def write_ensemble(options: argparse.Namespace, seeds: Sequence[int], outputs: EnsembleOutputs,
                   command: str) -> EnsembleRecord:
    """Save (or reuse) the seeds' ensemble (``command``: this sweep's, for its record), and with ``--predict``
    predict the table with it; the last line names what the ensemble scores on the test split, a blend's as the
    blend's."""
    runs = [Path(options.run_root) / run_name(options.name, seed) for seed in seeds]
    record = outputs.reused
    if record is None:
        record = make_ensemble(runs, outputs.directory, options.trees, command)
    else:
        print(f"[seeds] ensemble reused: {outputs.directory} holds these seeds' runs", flush=True)
    if outputs.predictions is not None:
        predicted, columns = SavedEnsemble(outputs.directory).predict(options.predict)
        write_new(prediction_frame(predicted, columns), outputs.predictions)
        failed = sum(bool(reason) for reason in predicted.errors)
        print(
            f"[seeds] ensemble predictions of the {len(predicted.errors)} rows of {options.predict} ({failed} could "
            f"not be featurised: their reason in 'error'): {outputs.predictions}",
            flush=True,
        )
    print(f"[seeds] ensemble of seeds {list(seeds)}: {summary(record)}; written {outputs.directory}", flush=True)
    return record


def main(argv: Sequence[str] | None = None) -> dict:
    """Run (unless ``--collect``) and aggregate; returns the summary."""
    argv = list(sys.argv[1:] if argv is None else argv)
    options, train_args = parse_args(argv)
    configure_logging()  # the package's messages (the ensemble's, the trees') on stderr, one line each
    run_root = Path(options.run_root)
    outputs = None
    if options.ensemble:  # before any run: every refusal of the ensemble, its table and its outputs stops here
        with exit_codes():
            outputs = plan_ensemble_outputs(options, train_args)
    if not options.collect:
        check_seed_runs(options, train_args)
    failed = []
    for seed in [] if options.collect else options.seeds:
        code = run_or_reuse(options, seed, train_args)
        if code > 128:  # stopped by a signal, its last.ckpt written: the sweep stops here
            print(
                f"[seeds] seed {seed} stopped by a signal (exit code {code}) after writing its last.ckpt; the same "
                "command resumes the sweep",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(code)
        if code:
            print(f"[seeds] seed {seed} failed with exit code {code}", file=sys.stderr, flush=True)
            failed.append(seed)
    per_seed = {}
    for seed in options.seeds:
        metrics_file = run_root / run_name(options.name, seed) / "metrics.json"
        if metrics_file.is_file():
            per_seed[seed] = final_metrics(json.loads(metrics_file.read_text()))
        elif seed not in failed:
            failed.append(seed)
    if not per_seed:
        refuse(f"no finished run of {options.name} under {run_root} for seeds {options.seeds}")
    check_same_config(run_root, options.name, sorted(per_seed))
    summary = aggregate(per_seed)
    result = {
        "experiment": options.name,
        "seeds": sorted(per_seed),
        "missing_seeds": failed,
        "runs": {seed: str(run_root / run_name(options.name, seed)) for seed in per_seed},
        "metrics": summary,
    }
    json_path, md_path = run_root / f"{options.name}-seeds.json", run_root / f"{options.name}-seeds.md"
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    md_path.write_text(markdown_table(options.name, summary, sorted(per_seed)))
    print(md_path.read_text() + f"\n[seeds] written {json_path} and {md_path}", flush=True)
    if outputs is not None:
        with exit_codes():
            record = write_ensemble(options, sorted(per_seed), outputs, shlex.join(["graphormer-urpe", "sweep", *argv]))
            result["ensemble"] = dataclasses.asdict(record)
    if failed:
        raise SystemExit(f"error: seeds {failed} did not finish; the summary covers seeds {sorted(per_seed)}")
    return result


if __name__ == "__main__":
    main()
