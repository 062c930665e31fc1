"""The one command to run on a GPU machine: is the project correct there, and how fast is its training step?

    python bench/gpu/gpu_check.py --bundle .gpu_bundle --out $OUT --budget 480     # on a GPU, 8 minutes at most
    python bench/gpu/gpu_check.py --device cpu --quick --time-scale 6              # the same parts on the CPU, small

Every command runs under its own time cap (:data:`CAPS`, seconds on one H100-class GPU, Python's, torch's and
CUDA's start included; ``--time-scale`` multiplies them) and within what is left of ``--budget`` (the wall time the
check may take); a command over its cap is killed and recorded as ``cut``, one that the budget no longer allows is
``not reached``, and the check goes on. Parts, in order of value (``--parts`` picks some; a second call can run what
the first did not reach), each printed as it starts with the commands it runs:

1. ``tests``: the exactness tests that follow the device (``pytest -m device`` on the test files that hold such
   tests: URPE with C = 1 equals RPE, padding and batch composition, fp16/bf16 finiteness, exact resume with the
   CUDA RNG state, the compiled step and its CUDA graph replays against the eager step, first edges and the padded
   MAG240M batch against their CPU reference), on the GPU.
2. ``step``: the training step of the ZINC config at steady state, ``bf16-mixed``: eager against compiled with
   CUDA graphs, URPE (``bench/speed/train_throughput.py``; every batch padded to one shape for the compiled mode).
3. ``loop``: ``train.py --config zinc_subset`` end to end on ZINC-sized data, the same two modes
   (``bench/speed/train_loop.py``): graphs/s over steps 51-250 and the time between steps, against the step alone.
4. ``profile``: a ``torch.profiler`` summary of one warm step in both modes (``bench/speed/step_profile.py``): top
   kernels by device time, the host's time, kernels launched, synchronisations.
5. ``matrix``: the rest of the grid of the step: RPE, compiled without CUDA graphs, ``32``, and the PCQM4Mv2
   config.
6. ``flex`` (CUDA only; on a CPU not run unless named, and refused there): FlexAttention
   (:mod:`graphormer_urpe.model.flex`): its exactness tests (``pytest -m "device and flex"``: against the eager
   kernel and the formula, and in the compiled step), then the PCQM4Mv2 config's step with the eager attention
   kernel against it, eager and with CUDA graphs, URPE: time and peak memory.
7. ``memory`` and 8. ``qm9`` (not run unless named): the peak memory of a training step at the papers' settings
   against a 32 GB V100 (``bench/memory/paper_memory.py``), and the default QM9 run in ``32``, ``16-mixed`` and
   ``bf16-mixed``, mixed precision passing when its first-step loss is within :data:`FIRST_STEP_RTOL` of float32's and
   its late training loss and final validation MAE within :data:`TRAINING_RTOL`.

``--bundle`` names the folder ``bench/gpu/gpu_bundle.py`` prepares (wheels the machine lacks, the prebuilt QM9 caches).
Under ``--out``: ``summary.md`` (to paste into docs/gpu.md), ``summary.json``, ``check.log`` (every command's
output) and the benchmarks' JSON files, rewritten after every command, so a run killed at any moment leaves
everything finished before; runs and data go under ``--work``. Exits with 1 if a part failed, was cut or was not
reached.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import REPO, TRAIN

PRECISIONS = ("32", "16-mixed", "bf16-mixed")
#: Mixed precision against float32: relative difference allowed on the first step's loss ...
FIRST_STEP_RTOL = 0.05
#: ... and on the mean training loss of the last fifth of the steps and on the final validation MAE.
TRAINING_RTOL = 0.10
PARTS = ("tests", "step", "loop", "profile", "matrix", "flex", "memory", "qm9")
#: The parts a call runs unless ``--parts`` names others: memory and QM9 were measured on an H200 (docs/gpu.md);
#: FlexAttention trains on CUDA only.
DEFAULT_PARTS = {
    "cuda": ("tests", "step", "loop", "profile", "matrix", "flex"),
    "cpu": ("tests", "step", "loop", "profile", "matrix"),
}
#: Seconds each command may run on one H100-class GPU, part by part (startup of Python, torch and CUDA included).
#: Memory and QM9: about 1.35 times what each took on the H200 of the second GPU check (docs/gpu.md). The rest:
#: estimates until a GPU has run them (the compilation of each variant takes most of it), the first four parts within
#: the default budget; a cut command says so, and its benchmark's JSON keeps what it measured.
CAPS: dict[str, dict[str, float]] = {
    "tests": {"device tests": 180},
    "step": {"zinc bf16-mixed urpe": 120},
    "loop": {"zinc bf16-mixed": 120},
    "profile": {"zinc eager": 25, "zinc cuda_graphs": 35},
    "matrix": {
        "zinc bf16-mixed rpe": 150,
        "zinc bf16-mixed compiled": 120,
        "zinc 32": 150,
        "pcqm bf16-mixed": 180,
        "pcqm loop bf16-mixed": 180,
    },
    "flex": {"flex device tests": 150, "pcqm bf16-mixed flex": 180},
    "memory": {"zinc": 27, "pcqm4mv2": 27, "mag240m": 44},
    "qm9": {"32": 37, "16-mixed": 40, "bf16-mixed": 34},
}
#: Wall seconds a call may take by default: the per-command limit of the machines this check was sized for.
DEFAULT_BUDGET = 480
#: A command is not started with less budget left than this.
LEAST_COMMAND_SECONDS = 20
#: Batches of ZINC's sizes are padded to this node count for the compiled modes: one shape, one compilation.
ZINC_PAD = 40
#: PCQM4Mv2's largest molecule has 51 heavy atoms: one shape.
PCQM_PAD = 56
#: The goal for the ZINC config's step on one H100 or H200 (docs/gpu.md), and the loop's least share of the step's.
GOAL_GRAPHS_PER_SECOND = 10_000
GOAL_LOOP_SHARE = 0.8
#: Peak tensor memory (GiB) of one 16-mixed step estimated on the CPU (docs/gpu.md, "Estimated on the CPU",
#: rerun 2026-11-27): what a GPU's measured peak is compared with.
CPU_ESTIMATE_GIB = {"ZINC": 0.17, "PCQM4Mv2": 0.74, "MAG240M": 12.80}
#: Papers of the synthetic MAG240M: its release and derived arrays are written in seconds, not the minutes of
#: bench/memory/paper_memory.py's 100,000; the batch is padded to the fanouts' bound (401 nodes) either way.
MAG_PAPERS = 20_000
#: Molecules of the QM9 runs: those of the bundle's cache (``bench/gpu/gpu_bundle.py``).
QM9_MOLECULES = 5000
#: Steps of each QM9 run.
QM9_STEPS = 100


def say(message: str) -> None:
    """Print ``message`` with the script's name (gpu_check, gpu_pretrain) and the time."""
    print(f"[{Path(sys.argv[0]).stem} {datetime.datetime.now():%H:%M:%S}] {message}", flush=True)


@dataclass
class Outcome:
    """How a command ended: ``ok``, ``failed`` (non-zero exit), ``cut`` (killed at its cap or at the end of the
    budget) or ``not reached`` (too little budget left to start it)."""

    status: str
    seconds: float
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Check:
    """Runs commands under their caps and the budget, and keeps the summary on disk up to date."""

    out: Path
    work: Path
    time_scale: float
    deadline: float = math.inf  # time.monotonic() at the end of the budget
    report: dict = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return self.out / "check.log"

    def run(
        self,
        command: list[str],
        cap: float,
        env: dict[str, str] | None = None,
        while_running: Callable[[], None] | None = None,
        every: float = 10.0,
    ) -> Outcome:
        """Run ``command`` in the repository for at most ``cap`` seconds (times ``--time-scale``) and what is left of
        the budget, calling ``while_running`` every ``every`` seconds until it ends; its output is appended to
        ``check.log``, and its tail printed when it fails."""
        left = self.deadline - time.monotonic()
        if left < LEAST_COMMAND_SECONDS:
            say(f"not reached (budget: {max(left, 0):.0f} s left): {' '.join(command)}")
            return Outcome("not reached", 0.0)
        limit = min(cap * self.time_scale, left)
        say(f"$ {' '.join(command)}   (cap {limit:.0f} s)")
        environment = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            **(env or {}),
        }
        started = time.monotonic()
        # a session of its own, so that a cut kills the command's workers (DataLoader, compile) with it
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        while True:
            left = started + limit - time.monotonic()
            try:  # a communicate that times out loses no output: the next one returns all of it
                stdout, stderr = process.communicate(timeout=max(0.0, min(left, every if while_running else left)))
                status = "ok" if process.returncode == 0 else "failed"
                break
            except subprocess.TimeoutExpired:
                if left <= every or while_running is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    stdout, stderr = process.communicate()
                    status = "cut"
                    break
                while_running()
        outcome = Outcome(status, time.monotonic() - started, stdout, stderr, process.returncode)
        with self.log.open("a") as log:
            log.write(
                f"\n===== $ {' '.join(command)}\n===== {status} after {outcome.seconds:.1f} s "
                f"(cap {limit:.0f} s, exit code {process.returncode})\n{stdout}{stderr}"
            )
        if not outcome.ok:
            tail = "\n".join((stdout + stderr).splitlines()[-25:])
            say(f"{status} after {outcome.seconds:.0f} s (exit code {process.returncode}); last lines:\n{tail}")
        return outcome

    def record(self, part: str, started: float, entry: dict) -> None:
        """Put ``entry`` (with the seconds since ``started``) as ``part``'s result, and write the summaries."""
        self.report["parts"][part] = {**entry, "seconds": time.monotonic() - started}
        self.write()

    def markdown(self) -> str:
        """``summary.md``: the report as docs/gpu.md shows it."""
        return markdown(self.report)

    def write(self) -> None:
        """Write ``summary.json`` and ``summary.md`` (each replaced whole, never left half-written)."""
        for name, text in (("summary.json", json.dumps(self.report, indent=2)), ("summary.md", self.markdown())):
            partial = self.out / f".{name}.partial"
            partial.write_text(text + "\n")
            partial.replace(self.out / name)


def part_status(entries: list[dict]) -> str:
    """``cut`` if a command was cut, else ``not reached`` if one was not started, else ``failed`` if one failed (or a
    verdict is no), else ``ok``."""
    statuses = [entry["status"] for entry in entries]
    for status in ("cut", "not reached"):
        if status in statuses:
            return status
    return "ok" if all(s == "ok" for s in statuses) else "failed"


def device_test_files() -> list[str]:
    """The test files that hold ``device`` tests (collecting only these keeps other tests' imports,
    such as wandb's, off the GPU machine)."""
    return sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if "pytest.mark.device" in path.read_text()
    )


def check_tests(check: Check, quick: bool, bundle: Path | None, flex: bool = False) -> dict:
    """``pytest -m device`` (``--quick``: the attention module's only), those of FlexAttention (marker ``flex``)
    apart, in the flex part (``flex``); deterministic cuBLAS for exact resume; the tests' 50-molecule QM9 cache from
    the bundle (tests/conftest.py's ``qm9_root``: no qm9pack there)."""
    if flex:
        paths = ["tests/model/test_flex.py", "tests/tasks/test_compiled.py"]
        marker, cap = "device and flex", CAPS["flex"]["flex device tests"]
    else:
        paths = ["tests/model/test_attention.py"] if quick else device_test_files()
        marker, cap = "device and not flex", CAPS["tests"]["device tests"]
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    if bundle is not None:
        env["GRAPHORMER_TEST_QM9_ROOT"] = str((bundle / "data").resolve())
    outcome = check.run(
        [sys.executable, "-m", "pytest", "-q", "-m", marker, "-p", "no:cacheprovider", *paths], cap, env=env
    )
    summary = next(
        (line for line in reversed(outcome.stdout.splitlines()) if " passed" in line or " failed" in line),
        "no pytest summary",
    )
    return {"status": outcome.status, "seconds": outcome.seconds, "summary": summary.strip("= "), "files": paths}


def check_memory(check: Check, device: str, quick: bool, update: Callable[[dict], None]) -> dict:
    """Every paper setting in 16-mixed, one process each (``--quick``: one MAG240M batch sampled, not two)."""
    results: list[dict] = []
    for key, cap in CAPS["memory"].items():
        result_file = check.work / f"memory_{key}.json"
        command = [
            sys.executable,
            "bench/memory/paper_memory.py",
            "--device",
            device,
            "--precision",
            "16-mixed",
            "--settings",
            key,
            "--work",
            str(check.work / "memory"),
            "--json",
            str(result_file),
        ]
        command += ["--mag-batches", "1" if quick else "2", "--mag-papers", str(MAG_PAPERS)]
        outcome = check.run(command, cap)
        entry = {"key": key, "status": outcome.status, "seconds": outcome.seconds}
        if outcome.ok:
            entry.update(json.loads(result_file.read_text())[0])
            entry["status"] = "ok" if entry["fits_v100"] else "failed"
            if entry["reserved_gib"] is not None:
                entry["cpu_estimate_gib"] = CPU_ESTIMATE_GIB[entry["setting"]]
        results.append(entry)
        update({"status": "running", "results": results})
    return {"status": part_status(results), "results": results}


def step_command(
    setting: str,
    precision: str,
    modes: list[str],
    attention: list[str],
    device: str,
    quick: bool,
    out: Path,
    kernels: tuple[str, ...] = ("eager",),
) -> list[str]:
    """``bench/speed/train_throughput.py`` for one setting and precision (``--quick``: small batches, the least
    rounds)."""
    command = [
        sys.executable,
        "bench/speed/train_throughput.py",
        "--device",
        device,
        "--settings",
        setting,
        "--precision",
        precision,
        "--modes",
        *modes,
        "--attention",
        *attention,
        "--kernels",
        *kernels,
        "--batchings",
        "bucketed",
        "--pad-nodes-to",
        str(ZINC_PAD if setting == "zinc" else PCQM_PAD),
        "--json",
        str(out),
    ]
    return command + (["--batch-size", "8", "--epoch-batches", "16", "--rounds", "3", "--warm", "1"] if quick else [])


def step_commands(device: str, quick: bool, out: Path) -> dict[str, dict[str, list[str]]]:
    """The step, matrix and flex parts' commands, by part and by the names of :data:`CAPS`."""
    fast = ["eager", "cuda_graphs"]

    def command(name: str, setting: str, precision: str, modes: list[str], attention: list[str]) -> list[str]:
        return step_command(setting, precision, modes, attention, device, quick, out / f"step {name}.json")

    return {
        "step": {"zinc bf16-mixed urpe": command("zinc bf16-mixed urpe", "zinc", "bf16-mixed", fast, ["urpe"])},
        "matrix": {
            "zinc bf16-mixed rpe": command("zinc bf16-mixed rpe", "zinc", "bf16-mixed", fast, ["rpe"]),
            "zinc bf16-mixed compiled": command(
                "zinc bf16-mixed compiled", "zinc", "bf16-mixed", ["compiled"], ["urpe"]
            ),
            "zinc 32": command("zinc 32", "zinc", "32", fast, ["urpe"]),
            "pcqm bf16-mixed": command("pcqm bf16-mixed", "pcqm", "bf16-mixed", fast, ["urpe", "rpe"]),
        },
        "flex": {
            "pcqm bf16-mixed flex": step_command(
                "pcqm",
                "bf16-mixed",
                fast,
                ["urpe"],
                device,
                quick,
                out / "step pcqm bf16-mixed flex.json",
                ("eager", "flex"),
            )
        },
    }


def check_steps(
    check: Check, commands: dict[str, list[str]], caps: dict[str, float], update: Callable[[dict], None]
) -> dict:
    """Each step command; its figures are read from the JSON file it writes (also what a cut one measured)."""
    runs: list[dict] = []
    for name, command in commands.items():
        outcome = check.run(command, caps[name])
        result_file = Path(command[command.index("--json") + 1])
        results = json.loads(result_file.read_text())["results"] if result_file.is_file() else []
        runs.append(
            {
                "name": name,
                "command": " ".join(command[1:]),
                "status": outcome.status,
                "seconds": outcome.seconds,
                "results": results,
                "output": outcome.stdout.strip() if outcome.ok else (outcome.stdout + outcome.stderr)[-3000:],
            }
        )
        update({"status": "running", "runs": runs})
    return {"status": part_status(runs), "runs": runs}


def check_loop(check: Check, device: str, quick: bool, setting: str, cap: float) -> dict:
    """``train.py`` end to end on data of the setting's sizes, eager and with CUDA graphs, within ``cap`` seconds
    (``--quick``: steps 2-4 of 4 on a release of 200 molecules)."""
    result_file = check.out / f"loop {setting} bf16-mixed.json"
    command = [
        sys.executable,
        "bench/speed/train_loop.py",
        "--setting",
        setting,
        "--data-root",
        str(check.work / f"{setting}_like"),
        "--device",
        device,
        "--precision",
        "bf16-mixed",
        "--variants",
        "eager",
        "cuda_graphs",
        "--pad-nodes-to",
        str(ZINC_PAD if setting == "zinc" else PCQM_PAD),
        "--workers",
        "2" if quick else "6",
        "--json",
        str(result_file),
    ]
    command += ["--first", "1", "--last", "4", "--molecules", "200"] if quick else []
    outcome = check.run(command, cap)
    runs = json.loads(result_file.read_text())["runs"] if result_file.is_file() else {}
    return {
        "status": outcome.status,
        "seconds": outcome.seconds,
        "command": " ".join(command[1:]),
        "runs": runs,
        "output": outcome.stdout.strip() if outcome.ok else (outcome.stdout + outcome.stderr)[-3000:],
    }


def check_profile(check: Check, device: str, quick: bool, update: Callable[[dict], None]) -> dict:
    """One warm step of the ZINC config profiled, eager and with CUDA graphs."""
    runs: list[dict] = []
    for name, cap in CAPS["profile"].items():
        mode = name.split()[1]
        command = [
            sys.executable,
            "bench/speed/step_profile.py",
            "--device",
            device,
            "--setting",
            "zinc",
            "--mode",
            mode,
            "--precision",
            "bf16-mixed",
            "--pad-nodes-to",
            str(ZINC_PAD),
        ]
        command += ["--batch-size", "8"] if quick else []
        outcome = check.run(command, cap)
        runs.append(
            {
                "name": name,
                "command": " ".join(command[1:]),
                "status": outcome.status,
                "seconds": outcome.seconds,
                "output": outcome.stdout.strip() if outcome.ok else (outcome.stdout + outcome.stderr)[-3000:],
            }
        )
        update({"status": "running", "runs": runs})
    return {"status": part_status(runs), "runs": runs}


def qm9_losses(run_dir: Path) -> tuple[list[float], dict]:
    """Training losses step by step (``metrics.csv``) and the final metrics (``metrics.json``) of a run."""
    from graphormer_urpe.run.ledger import read_metrics

    losses = [row["train/loss"] for row in read_metrics(run_dir) if "train/loss" in row]
    return losses, json.loads((run_dir / "metrics.json").read_text())


def check_qm9(
    check: Check, accelerator: str, steps: int, molecules: int, data_root: Path, update: Callable[[dict], None]
) -> dict:
    """The default QM9 run in each precision, its losses compared with float32's."""
    runs: dict[str, dict] = {}
    for precision in PRECISIONS:
        name = f"qm9_{precision}"
        command = [
            *TRAIN,
            "--config",
            "qm9_gap",
            "--trainer.precision",
            precision,
            "--trainer.accelerator",
            accelerator,
            "--trainer.devices",
            "1",
            "--trainer.max_steps",
            str(steps),
            "--trainer.val_check_interval",
            str(steps),
            "--trainer.log_every_n_steps",
            "1",
            "--trainer.enable_progress_bar",
            "false",
            "--data.root",
            str(data_root),
            "--data.source.max_molecules",
            str(molecules),
            "--run_root",
            str(check.work / "runs"),
            "--run_name",
            name,
            "--logger",
            "csv",
        ]
        outcome = check.run(command, CAPS["qm9"][precision])
        if not outcome.ok:
            runs[precision] = {
                "ok": False,
                "status": outcome.status,
                "seconds": outcome.seconds,
                "error": f"train.py {outcome.status} (exit code {outcome.returncode})",
            }
        else:
            losses, metrics = qm9_losses(check.work / "runs" / name)
            tail = losses[-max(1, len(losses) // 5) :]
            runs[precision] = {
                "ok": True,
                "status": "ok",
                "seconds": outcome.seconds,
                "first_loss": losses[0],
                "tail_loss": sum(tail) / len(tail),
                "valid_mae": metrics["validation"]["val/mae"],
                "losses": losses,
            }
        update({"status": "running", "steps": steps, "molecules": molecules, "runs": runs})
    compare_precisions(runs)
    for entry in runs.values():
        if entry["status"] == "ok" and not entry["ok"]:
            entry["status"] = "failed"
    return {"status": part_status(list(runs.values())), "steps": steps, "molecules": molecules, "runs": runs}


def compare_precisions(runs: dict[str, dict]) -> None:
    """Mark each mixed-precision run ``ok`` if its losses are within the tolerances of the ``32`` run's,
    adding the relative differences (``first_rdiff``, ``tail_rdiff``, ``valid_rdiff``)."""
    reference = runs.get("32", {"ok": False})
    for precision, entry in runs.items():
        if precision == "32":
            continue
        if not (entry["ok"] and reference["ok"]):
            entry["ok"] = False
            continue
        for key in ("first", "tail", "valid"):
            value = "valid_mae" if key == "valid" else f"{key}_loss"
            entry[f"{key}_rdiff"] = abs(entry[value] - reference[value]) / abs(reference[value])
        entry["ok"] = (
            entry["first_rdiff"] <= FIRST_STEP_RTOL
            and entry["tail_rdiff"] <= TRAINING_RTOL
            and entry["valid_rdiff"] <= TRAINING_RTOL
        )


def machine(device: torch.device) -> str:
    """The device in words, with the software versions."""
    if device.type == "cuda":
        gib = torch.cuda.get_device_properties(device).total_memory / 1024**3
        name = f"{torch.cuda.get_device_name(device)} ({gib:.0f} GiB)"
        return f"{name}, CUDA {torch.version.cuda}, torch {torch.__version__}"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__}"


def markdown_memory(memory: dict) -> list[str]:
    lines = [
        "**Peak memory of one 16-mixed training step per GPU** (`bench/memory/paper_memory.py`; "
        "CPU estimate: docs/gpu.md)",
        "",
        "| setting | graphs/GPU | nodes (padded to) | peak tensors (GiB) | CPU estimate (GiB) | reserved (GiB) | "
        "needs of a V100 (GiB) | fits 32 GB | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in memory.get("results", []):
        if "setting" not in r:
            lines.append(f"| {r['key']} | {r['status']} after {r['seconds']:.0f} s | | | | | | no | |")
            continue
        nodes = (
            f"{r['padded_nodes']}"
            if r["largest_graph"] == r["padded_nodes"]
            else f"{r['largest_graph']} ({r['padded_nodes']})"
        )
        reserved = "-" if r["reserved_gib"] is None else f"{r['reserved_gib']:.2f}"
        estimate = f"{r['cpu_estimate_gib']:.2f}" if "cpu_estimate_gib" in r else "(this is it)"
        lines.append(
            f"| {r['setting']} | {r['graphs_per_gpu']} | {nodes} | {r['peak_gib']:.2f} | {estimate} | "
            f"{reserved} | {r['needed_gib']:.2f} | {'yes' if r['fits_v100'] else 'NO'} | "
            f"{r['seconds']:.0f} |"
        )
    return [*lines, ""]


def markdown_steps(title: str, part: dict) -> list[str]:
    """A table of every step variant measured (graphs/s of the median epoch, its slowest and fastest), then each
    command's output."""
    lines = [
        f"**{title}** (`bench/speed/train_throughput.py`: the warm step, the median epoch)",
        "",
        "| setting | precision | mode | attention | kernel | graphs/s | [slowest, fastest] | ms/step | "
        "warm-up s | shapes | peak GiB | epochs x batches x graphs |",
        "|---" * 12 + "|",
    ]
    for run in part.get("runs", []):
        for r in run["results"]:
            peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
            lines.append(
                f"| {r['setting']} | {r['precision']} | {r['mode']} | {r['attention']} | {r['kernel']} | "
                f"{r['graphs_per_second']:,.0f} | [{min(r['graphs_per_second_rounds']):,.0f}, "
                f"{max(r['graphs_per_second_rounds']):,.0f}] | {r['ms_per_step']:.1f} | "
                f"{r['warm_seconds']:.0f} | {r['shapes']} | {peak} | "
                f"{r['rounds']} x {r['epoch_batches']} x {r['batch_size']} |"
            )
        if not run["results"]:
            lines.append(f"| {run['name']} | | | | | {run['status']} after {run['seconds']:.0f} s | | | | | | |")
    lines.append("")
    for run in part.get("runs", []):
        lines += [f"`{run['command']}`: {run['status']}", "", "```", run["output"], "```", ""]
    return lines


def headline(parts: dict) -> list[str]:
    """The goals: graphs/s of the ZINC config's step with CUDA graphs in bf16-mixed, and the loop's share of it."""
    step = {
        (r["mode"], r["attention"]): r["graphs_per_second"]
        for run in parts.get("step", {}).get("runs", [])
        for r in run["results"]
    }
    loop = parts.get("loop", {}).get("runs", {})
    lines = []
    if ("cuda_graphs", "urpe") in step:
        best = step["cuda_graphs", "urpe"]
        verdict = "met" if best >= GOAL_GRAPHS_PER_SECOND else "NOT met"
        lines.append(
            f"**Goal**: ZINC config, bf16-mixed, URPE, CUDA graphs: {best:,.0f} graphs/s "
            f"(goal {GOAL_GRAPHS_PER_SECOND:,}: {verdict}; eager {step.get(('eager', 'urpe'), 0):,.0f})"
        )
        for mode, runs in loop.items():
            if runs and (mode, "urpe") in step:
                share = runs[-1]["graphs_per_second"] / step[mode, "urpe"]
                verdict = "met" if share >= GOAL_LOOP_SHARE else "NOT met"
                lines.append(
                    f"**Goal**: train.py end to end, {mode}: {runs[-1]['graphs_per_second']:,.0f} graphs/s, "
                    f"{share:.0%} of the step alone (goal {GOAL_LOOP_SHARE:.0%}: {verdict})"
                )
    return [*lines, ""] if lines else []


def markdown_loop(loop: dict) -> list[str]:
    lines = [
        "**train.py end to end** (`bench/speed/train_loop.py`: the config on data of its dataset's sizes in its "
        "release layout, steps 51-250 timed)",
        "",
        "| variant | graphs/s | steps/s | time between steps (loader, Lightning) |",
        "|---|---|---|---|",
    ]
    for mode, runs in loop.get("runs", {}).items():
        for run in runs:
            lines.append(
                f"| {mode} | {run['graphs_per_second']:,.0f} | {run['steps_per_second']:.2f} | "
                f"{run['between_steps_share']:.0%} |"
            )
    return [
        *lines,
        "",
        f"`{loop.get('command', '')}`: {loop.get('status')}",
        "",
        "```",
        loop.get("output", ""),
        "```",
        "",
    ]


def markdown_profile(profile: dict) -> list[str]:
    lines = ["**One warm step profiled** (`bench/speed/step_profile.py`)", ""]
    for run in profile.get("runs", []):
        lines += [f"`{run['command']}`: {run['status']}", "", "```", run["output"], "```", ""]
    return lines


def markdown_qm9(qm9: dict) -> list[str]:
    lines = [
        f"**QM9, {qm9.get('molecules')} molecules, {qm9.get('steps')} steps** (tolerances: first-step loss "
        f"{FIRST_STEP_RTOL:.0%}, late training loss and validation MAE {TRAINING_RTOL:.0%} of float32's)",
        "",
        "| precision | first-step loss | mean loss, last fifth | valid MAE (eV) | s | within tolerance |",
        "|---|---|---|---|---|---|",
    ]
    for precision, entry in qm9.get("runs", {}).items():
        if "first_loss" not in entry:
            lines.append(f"| {precision} | {entry.get('error', 'failed')} | | | {entry['seconds']:.0f} | no |")
            continue
        verdict = "reference" if precision == "32" else ("yes" if entry["ok"] else "NO")
        lines.append(
            f"| {precision} | {entry['first_loss']:.4f} | {entry['tail_loss']:.4f} | "
            f"{entry['valid_mae']:.4f} | {entry['seconds']:.0f} | {verdict} |"
        )
    return [*lines, ""]


def markdown(report: dict) -> str:
    """The summary to paste into docs/gpu.md: one line per part, then each part's figures."""
    lines = [
        f"Machine: {report['machine']}; {report['date']}; `{report['command']}`",
        "",
        "| part | status | s | cap (s) |",
        "|---|---|---|---|",
    ]
    for part in report["order"]:
        entry = report["parts"].get(part)
        status = "not reached" if entry is None else entry["status"]
        seconds = "" if entry is None or "seconds" not in entry else f"{entry['seconds']:.0f}"
        lines.append(f"| {part} | {status} | {seconds} | {report['caps'][part]:.0f} |")
    lines.append("")
    parts = report["parts"]
    lines += headline(parts)
    if "tests" in parts:
        tests = parts["tests"]
        lines += [f"**Device tests**: {tests.get('summary', tests.get('error'))} ({tests['status']})", ""]
    if "step" in parts:
        lines += markdown_steps("The step, ZINC config", parts["step"])
    if "loop" in parts:
        lines += markdown_loop(parts["loop"])
    if "profile" in parts:
        lines += markdown_profile(parts["profile"])
    if "matrix" in parts:
        lines += markdown_steps("The rest of the grid", parts["matrix"])
        if "loop" in parts["matrix"]:
            lines += markdown_loop(parts["matrix"]["loop"])
    if "flex" in parts:
        flex_tests = parts["flex"].get("tests", {})
        lines += [f"**FlexAttention's device tests**: {flex_tests.get('summary', flex_tests.get('status'))}", ""]
        lines += markdown_steps("FlexAttention against the eager attention kernel, PCQM4Mv2 config", parts["flex"])
    if "memory" in parts:
        lines += markdown_memory(parts["memory"])
    if "qm9" in parts:
        lines += markdown_qm9(parts["qm9"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=QM9_STEPS, help="steps of each QM9 run")
    parser.add_argument(
        "--qm9-molecules",
        type=int,
        default=QM9_MOLECULES,
        help="QM9 molecules of the runs (the bundle's cache holds the first 5000)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small everything: attention tests only, small batches and few steps, one MAG240M batch",
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        default=None,
        choices=PARTS,
        help="default: every part but memory and qm9 (and flex on a CPU)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET,
        help="wall seconds the whole check may take; commands it leaves no time for are not run",
    )
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="multiply every cap (slower machines: the CPU rehearsal uses 6)"
    )
    parser.add_argument(
        "--bundle",
        type=Path,
        default=None,
        help="bench/gpu/gpu_bundle.py's folder: the wheels' install and the QM9 caches",
    )
    parser.add_argument(
        "--data-root",
        type=Path,
        default=None,
        help="dataset root of the QM9 runs (default: the bundle's data/, else data/)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "gpu_check", help="summaries and check.log")
    parser.add_argument("--work", type=Path, default=None, help="runs and data (default: OUT/work)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no GPU (torch.cuda.is_available() is False)")
    if args.bundle is not None and not (args.bundle / "manifest.json").is_file():
        parser.error(f"--bundle {args.bundle} holds no manifest.json: prepare it with python bench/gpu/gpu_bundle.py")
    data_root = args.data_root or (args.bundle / "data" if args.bundle is not None else REPO / "data")
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, args.work or args.out / "work", args.time_scale, deadline=started + args.budget)
    check.work.mkdir(parents=True, exist_ok=True)
    order = [part for part in PARTS if part in (args.parts or DEFAULT_PARTS[device.type])]
    check.report = {
        "machine": machine(device),
        "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
        "command": " ".join(["python bench/gpu/gpu_check.py", *(argv if argv is not None else sys.argv[1:])]),
        "budget": args.budget,
        "order": order,
        "caps": {part: sum(CAPS[part].values()) * args.time_scale for part in order},
        "parts": {},
    }
    say(
        f"on {check.report['machine']}; parts {', '.join(order)} within {sum(check.report['caps'].values()):.0f} s "
        f"of caps and a budget of {args.budget:.0f} s; writing to {args.out}"
    )
    check.write()
    accelerator = "gpu" if device.type == "cuda" else "cpu"
    steps = step_commands(args.device, args.quick, args.out)
    for part in order:
        say(f"part {part} (cap {check.report['caps'][part]:.0f} s)")
        update = functools.partial(check.record, part, time.monotonic())
        try:
            if part == "tests":
                result = check_tests(check, args.quick, args.bundle)
            elif part == "step":
                result = check_steps(check, steps[part], CAPS[part], update)
            elif part == "flex":
                tests = check_tests(check, args.quick, args.bundle, flex=True)
                update({"status": "running", "tests": tests})
                result = {**check_steps(check, steps[part], CAPS[part], update), "tests": tests}
                result["status"] = part_status([tests, result])
            elif part == "matrix":
                result = check_steps(check, steps[part], CAPS[part], update)
                update(result)
                result["loop"] = check_loop(check, args.device, args.quick, "pcqm", CAPS[part]["pcqm loop bf16-mixed"])
                result["status"] = part_status([result, result["loop"]])
            elif part == "loop":
                result = check_loop(check, args.device, args.quick, "zinc", CAPS[part]["zinc bf16-mixed"])
            elif part == "profile":
                result = check_profile(check, args.device, args.quick, update)
            elif part == "memory":
                result = check_memory(check, args.device, args.quick, update)
            else:
                result = check_qm9(check, accelerator, args.steps, args.qm9_molecules, data_root, update)
        except Exception as error:  # a part's own bug must not cost the parts after it
            say(f"part {part} raised {error!r}")
            result = {**check.report["parts"].get(part, {}), "status": "failed", "error": repr(error)}
        update(result)
        say(f"part {part}: {result['status']} after {check.report['parts'][part]['seconds']:.0f} s")
    summary = markdown(check.report)
    print("\n" + summary)
    failed = [part for part, result in check.report["parts"].items() if result["status"] != "ok"]
    say(
        f"summary in {args.out / 'summary.md'} after {time.monotonic() - started:.0f} s; "
        + (f"NOT OK: {', '.join(failed)}" if failed else "all parts ok")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
