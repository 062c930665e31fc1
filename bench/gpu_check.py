"""The one command to run on a GPU machine: is the project correct, how fast, and how much memory?

    python bench/gpu_check.py --bundle .gpu_bundle --out $OUT      # on a GPU: 8 minutes at most
    python bench/gpu_check.py --device cpu --quick --time-scale 6  # the same parts on the CPU, small

Sized to a lent GPU machine (15 minutes in all, one command of at most 10): every command runs
under its own time cap (:data:`CAPS`, seconds on an H100-class GPU, 434 in all, measured on an H200;
``--time-scale`` multiplies them), so one slow command cannot eat the rest. A command over its cap is
killed and recorded as ``cut``; the check goes on with the next. Parts, in order of value (``--parts`` picks
some), each printed as it starts with the commands it runs:

1. ``tests``: the exactness tests that follow the device (``pytest -m device`` on the test files
   that hold such tests: URPE with C = 1 equals RPE, padding and batch composition, fp16/bf16
   finiteness, exact resume with the CUDA RNG state, first edges and the padded MAG240M batch
   against their CPU reference), on the GPU.
2. ``memory``: the peak memory of one training step per GPU at the papers' settings (ZINC,
   PCQM4Mv2, MAG240M; ``bench/paper_memory.py``) in ``16-mixed``, against a 32 GB V100:
   measured on a GPU (and compared with the CPU estimate of docs/gpu.md), estimated on fake
   tensors on the CPU.
3. ``throughput``: ``bench/train_throughput.py`` (graphs/s of URPE and RPE, size-aware and uniform
   batching, on ZINC-sized molecules) in each precision. ``--compile`` is not in the check: on the
   image's torch 2.11 Inductor stops with an AssertionError after about 130 s (docs/gpu.md).
4. ``qm9``: the default QM9 run (``configs/qm9_gap.yaml``) on the first ``--qm9-molecules``
   molecules for ``--steps`` steps in ``32``, ``16-mixed`` and ``bf16-mixed``, losses side by side.
   Mixed precision passes when its loss on the first step (same weights, same batch) is within
   :data:`FIRST_STEP_RTOL` of float32's and its mean training loss over the last fifth of the
   steps, and its final validation MAE, are within :data:`TRAINING_RTOL` (runs in different
   precisions drift apart step by step, so their losses are compared as levels, not step by step).

``--bundle`` names the folder ``bench/gpu_bundle.py`` prepares (the prebuilt QM9 cache and the
throughput's molecules, so that nothing is featurised from ``qm9pack`` there). Under ``--out``:
``summary.md`` (to paste into docs/gpu.md), ``summary.json`` and ``check.log`` (every command's
output), rewritten after every command, so a run killed at any moment leaves everything finished
before; runs and the synthetic MAG240M go under ``--work``. Exits with 1 if a part failed or was
cut (a test, a tolerance, a setting that does not fit, a command, a cap).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
PRECISIONS = ("32", "16-mixed", "bf16-mixed")
#: Mixed precision against float32: relative difference allowed on the first step's loss ...
FIRST_STEP_RTOL = 0.05
#: ... and on the mean training loss of the last fifth of the steps and on the final validation MAE.
TRAINING_RTOL = 0.10
PARTS = ("tests", "memory", "throughput", "qm9")
#: Seconds each command may run on one H100-class GPU, part by part (startup of Python, torch and
#: CUDA included): about 1.35 times what each took on the freshly started H200 of the second GPU check
#: (2026-11-27, 20:46 UTC; docs/gpu.md, "Measured on a GPU"), and no less than the caps before it, with
#: which that call cut its float32 QM9 run as it was ending. 434 s in all: with the check's own work
#: between commands and the bundle's install, one call of at most 8 minutes; with the machine's start
#: (40 s to 2 minutes), about 5 minutes of the 15-minute lease left to rerun a part.
CAPS: dict[str, dict[str, float]] = {
    "tests": {"device tests": 56},
    "memory": {"zinc": 27, "pcqm4mv2": 27, "mag240m": 44},
    "throughput": {"32": 54, "16-mixed": 58, "bf16-mixed": 57},
    "qm9": {"32": 37, "16-mixed": 40, "bf16-mixed": 34},
}
#: Peak tensor memory (GiB) of one 16-mixed step estimated on the CPU (docs/gpu.md, "Estimated on the CPU",
#: rerun 2026-11-27): what a GPU's measured peak is compared with.
CPU_ESTIMATE_GIB = {"ZINC": 0.17, "PCQM4Mv2": 0.74, "MAG240M": 12.80}
#: Papers of the synthetic MAG240M: its release and derived arrays are written in seconds, not the minutes of
#: bench/paper_memory.py's 100,000; the batch is padded to the fanouts' bound (401 nodes) either way.
MAG_PAPERS = 20_000
#: Molecules of the QM9 runs: those of the bundle's cache (``bench/gpu_bundle.py``).
QM9_MOLECULES = 5000
#: Steps of each QM9 run.
QM9_STEPS = 100


def say(message: str) -> None:
    print(f"[gpu_check {datetime.datetime.now():%H:%M:%S}] {message}", flush=True)


@dataclass
class Outcome:
    """How a command ended: ``ok``, ``failed`` (non-zero exit) or ``cut`` (killed at its cap)."""

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
    """Runs commands under their caps and keeps the summary on disk up to date."""

    out: Path
    work: Path
    time_scale: float
    report: dict = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return self.out / "check.log"

    def run(self, command: list[str], cap: float, env: dict[str, str] | None = None) -> Outcome:
        """Run ``command`` in the repository for at most ``cap`` seconds (times ``--time-scale``); its
        output is appended to ``check.log``, and its tail printed when it fails."""
        limit = cap * self.time_scale
        say(f"$ {' '.join(command)}   (cap {limit:.0f} s)")
        environment = {**os.environ, "PYTHONUNBUFFERED": "1",
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                       **(env or {})}
        started = time.monotonic()
        # a session of its own, so that a cut kills the command's workers (DataLoader, compile) with it
        process = subprocess.Popen(command, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=limit)
            status = "ok" if process.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            status = "cut"
        outcome = Outcome(status, time.monotonic() - started, stdout, stderr, process.returncode)
        with self.log.open("a") as log:
            log.write(f"\n===== $ {' '.join(command)}\n===== {status} after {outcome.seconds:.1f} s "
                      f"(cap {limit:.0f} s, exit code {process.returncode})\n{stdout}{stderr}")
        if not outcome.ok:
            tail = "\n".join((stdout + stderr).splitlines()[-25:])
            say(f"{status} after {outcome.seconds:.0f} s (exit code {process.returncode}); last lines:\n{tail}")
        return outcome

    def record(self, part: str, started: float, entry: dict) -> None:
        """Put ``entry`` (with the seconds since ``started``) as ``part``'s result, and write the summaries."""
        self.report["parts"][part] = {**entry, "seconds": time.monotonic() - started}
        self.write()

    def write(self) -> None:
        """Write ``summary.json`` and ``summary.md`` (each replaced whole, never left half-written)."""
        for name, text in (("summary.json", json.dumps(self.report, indent=2)), ("summary.md", markdown(self.report))):
            partial = self.out / f".{name}.partial"
            partial.write_text(text + "\n")
            partial.replace(self.out / name)


def part_status(entries: list[dict]) -> str:
    """``cut`` if a command was cut, else ``failed`` if one failed (or a verdict is no), else ``ok``."""
    statuses = [entry["status"] for entry in entries]
    return "cut" if "cut" in statuses else ("ok" if all(s == "ok" for s in statuses) else "failed")


def device_test_files() -> list[str]:
    """The test files that hold ``device`` tests (collecting only these keeps other tests' imports,
    such as wandb's, off the GPU machine)."""
    return sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
                  if "pytest.mark.device" in path.read_text())


def check_tests(check: Check, quick: bool, bundle: Path | None) -> dict:
    """``pytest -m device`` (``--quick``: the attention module's only); deterministic cuBLAS for exact resume;
    the tests' 50-molecule QM9 cache from the bundle (tests/conftest.py's ``qm9_root``: no qm9pack there)."""
    paths = ["tests/model/test_attention.py"] if quick else device_test_files()
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    if bundle is not None:
        env["GRAPHORMER_TEST_QM9_ROOT"] = str((bundle / "data").resolve())
    outcome = check.run([sys.executable, "-m", "pytest", "-q", "-m", "device", "-p", "no:cacheprovider", *paths],
                        CAPS["tests"]["device tests"], env=env)
    summary = next((line for line in reversed(outcome.stdout.splitlines()) if " passed" in line or " failed" in line),
                   "no pytest summary")
    return {"status": outcome.status, "seconds": outcome.seconds, "summary": summary.strip("= "), "files": paths}


def check_memory(check: Check, device: str, quick: bool, update: Callable[[dict], None]) -> dict:
    """Every paper setting in 16-mixed, one process each (``--quick``: one MAG240M batch sampled, not two)."""
    results: list[dict] = []
    for key, cap in CAPS["memory"].items():
        result_file = check.work / f"memory_{key}.json"
        command = [sys.executable, "bench/paper_memory.py", "--device", device, "--precision", "16-mixed",
                   "--settings", key, "--work", str(check.work / "memory"), "--json", str(result_file)]
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


def throughput_commands(device: str, quick: bool, pool: Path | None) -> dict[str, list[str]]:
    """``bench/train_throughput.py`` on ZINC-sized molecules in each precision, by the names of :data:`CAPS`."""
    base = [sys.executable, "bench/train_throughput.py", "--device", device, "--distributions", "zinc"]
    base += ["--batch-size", "16", "--rounds", "1", "--epoch-batches", "2"] if quick else \
        ["--batch-size", "256", "--rounds", "1", "--epoch-batches", "4"]
    if pool is not None:
        base += ["--pool", str(pool)]
    return {precision: [*base, "--precision", precision] for precision in PRECISIONS}


#: A row of train_throughput.py's table: batching, attention, then its numbers.
THROUGHPUT_ROW = re.compile(r"^(today|bucketed)\s+(rpe|urpe)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)%")


def graphs_per_second(output: str) -> dict[str, float]:
    """``{"today rpe": graphs/s, ...}`` from train_throughput.py's output."""
    return {f"{m[1]} {m[2]}": float(m[5]) for line in output.splitlines() if (m := THROUGHPUT_ROW.match(line))}


def check_throughput(check: Check, device: str, quick: bool, pool: Path | None,
                     update: Callable[[dict], None]) -> dict:
    """Each command of :func:`throughput_commands`; the part is ok when every run is."""
    runs: list[dict] = []
    for name, command in throughput_commands(device, quick, pool).items():
        outcome = check.run(command, CAPS["throughput"][name])
        runs.append({"name": name, "command": " ".join(command[1:]), "status": outcome.status,
                     "seconds": outcome.seconds, "graphs_per_s": graphs_per_second(outcome.stdout),
                     "output": outcome.stdout.strip() if outcome.ok else (outcome.stdout + outcome.stderr)[-2000:]})
        update({"status": "running", "runs": runs})
    return {"status": part_status(runs), "runs": runs}


def qm9_losses(run_dir: Path) -> tuple[list[float], dict]:
    """Training losses step by step (``metrics.csv``) and the final metrics (``metrics.json``) of a run."""
    from graphormer_urpe.run.ledger import read_metrics

    losses = [row["train/loss"] for row in read_metrics(run_dir) if "train/loss" in row]
    return losses, json.loads((run_dir / "metrics.json").read_text())


def check_qm9(check: Check, accelerator: str, steps: int, molecules: int, data_root: Path,
              update: Callable[[dict], None]) -> dict:
    """The default QM9 run in each precision, its losses compared with float32's."""
    runs: dict[str, dict] = {}
    for precision in PRECISIONS:
        name = f"qm9_{precision}"
        command = [sys.executable, "train.py", "--config", "qm9_gap", "--trainer.precision", precision,
                   "--trainer.accelerator", accelerator, "--trainer.devices", "1",
                   "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
                   "--trainer.log_every_n_steps", "1", "--trainer.enable_progress_bar", "false",
                   "--data.root", str(data_root), "--data.source.max_molecules", str(molecules),
                   "--run_root", str(check.work / "runs"), "--run_name", name, "--logger", "csv"]
        outcome = check.run(command, CAPS["qm9"][precision])
        if not outcome.ok:
            runs[precision] = {"ok": False, "status": outcome.status, "seconds": outcome.seconds,
                               "error": f"train.py {outcome.status} (exit code {outcome.returncode})"}
        else:
            losses, metrics = qm9_losses(check.work / "runs" / name)
            tail = losses[-max(1, len(losses) // 5):]
            runs[precision] = {"ok": True, "status": "ok", "seconds": outcome.seconds, "first_loss": losses[0],
                               "tail_loss": sum(tail) / len(tail), "valid_mae": metrics["validation"]["val/mae"],
                               "losses": losses}
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
        entry["ok"] = (entry["first_rdiff"] <= FIRST_STEP_RTOL and entry["tail_rdiff"] <= TRAINING_RTOL
                       and entry["valid_rdiff"] <= TRAINING_RTOL)


def machine(device: torch.device) -> str:
    """The device in words, with the software versions."""
    if device.type == "cuda":
        gib = torch.cuda.get_device_properties(device).total_memory / 1024**3
        name = f"{torch.cuda.get_device_name(device)} ({gib:.0f} GiB)"
        return f"{name}, CUDA {torch.version.cuda}, torch {torch.__version__}"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__}"


def markdown_memory(memory: dict) -> list[str]:
    lines = ["**Peak memory of one 16-mixed training step per GPU** (`bench/paper_memory.py`; "
             "CPU estimate: docs/gpu.md)", "",
             "| setting | graphs/GPU | nodes (padded to) | peak tensors (GiB) | CPU estimate (GiB) | reserved (GiB) | "
             "needs of a V100 (GiB) | fits 32 GB | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in memory.get("results", []):
        if "setting" not in r:
            lines.append(f"| {r['key']} | {r['status']} after {r['seconds']:.0f} s | | | | | | no | |")
            continue
        nodes = f"{r['padded_nodes']}" if r["largest_graph"] == r["padded_nodes"] else \
            f"{r['largest_graph']} ({r['padded_nodes']})"
        reserved = "-" if r["reserved_gib"] is None else f"{r['reserved_gib']:.2f}"
        estimate = f"{r['cpu_estimate_gib']:.2f}" if "cpu_estimate_gib" in r else "(this is it)"
        lines.append(f"| {r['setting']} | {r['graphs_per_gpu']} | {nodes} | {r['peak_gib']:.2f} | {estimate} | "
                     f"{reserved} | {r['needed_gib']:.2f} | {'yes' if r['fits_v100'] else 'NO'} | "
                     f"{r['seconds']:.0f} |")
    return [*lines, ""]


def markdown_throughput(throughput: dict) -> list[str]:
    keys = ["today rpe", "today urpe", "bucketed rpe", "bucketed urpe"]
    lines = ["**Throughput, graphs/s** (`bench/train_throughput.py`, ZINC-sized molecules; today = uniform "
             "batching, bucketed = size-aware)", "",
             "| run | " + " | ".join(keys) + " | status | s |", "|---|" + "---|" * (len(keys) + 2)]
    for run in throughput.get("runs", []):
        figures = " | ".join(f"{run['graphs_per_s'][k]:.0f}" if k in run["graphs_per_s"] else "" for k in keys)
        lines.append(f"| {run['name']} | {figures} | {run['status']} | {run['seconds']:.0f} |")
    lines.append("")
    for run in throughput.get("runs", []):
        lines += [f"`{run['command']}`: {run['status']}", "", "```", run["output"], "```", ""]
    return lines


def markdown_qm9(qm9: dict) -> list[str]:
    lines = [f"**QM9, {qm9.get('molecules')} molecules, {qm9.get('steps')} steps** (tolerances: first-step loss "
             f"{FIRST_STEP_RTOL:.0%}, late training loss and validation MAE {TRAINING_RTOL:.0%} of float32's)", "",
             "| precision | first-step loss | mean loss, last fifth | valid MAE (eV) | s | within tolerance |",
             "|---|---|---|---|---|---|"]
    for precision, entry in qm9.get("runs", {}).items():
        if "first_loss" not in entry:
            lines.append(f"| {precision} | {entry.get('error', 'failed')} | | | {entry['seconds']:.0f} | no |")
            continue
        verdict = "reference" if precision == "32" else ("yes" if entry["ok"] else "NO")
        lines.append(f"| {precision} | {entry['first_loss']:.4f} | {entry['tail_loss']:.4f} | "
                     f"{entry['valid_mae']:.4f} | {entry['seconds']:.0f} | {verdict} |")
    return [*lines, ""]


def markdown(report: dict) -> str:
    """The summary to paste into docs/gpu.md: one line per part, then each part's figures."""
    lines = [f"Machine: {report['machine']}; {report['date']}; `{report['command']}`", "",
             "| part | status | s | cap (s) |", "|---|---|---|---|"]
    for part in report["order"]:
        entry = report["parts"].get(part)
        status = "not reached" if entry is None else entry["status"]
        seconds = "" if entry is None or "seconds" not in entry else f"{entry['seconds']:.0f}"
        lines.append(f"| {part} | {status} | {seconds} | {report['caps'][part]:.0f} |")
    lines.append("")
    parts = report["parts"]
    if "tests" in parts:
        tests = parts["tests"]
        lines += [f"**Device tests**: {tests.get('summary', tests.get('error'))} ({tests['status']})", ""]
    if "memory" in parts:
        lines += markdown_memory(parts["memory"])
    if "throughput" in parts:
        lines += markdown_throughput(parts["throughput"])
    if "qm9" in parts:
        lines += markdown_qm9(parts["qm9"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=QM9_STEPS, help="steps of each QM9 run")
    parser.add_argument("--qm9-molecules", type=int, default=QM9_MOLECULES,
                        help="QM9 molecules of the runs (the bundle's cache holds the first 5000)")
    parser.add_argument("--quick", action="store_true",
                        help="small everything: attention tests only, small throughput batches, one MAG240M batch")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="multiply every cap (slower machines: the CPU rehearsal uses 6)")
    parser.add_argument("--bundle", type=Path, default=None,
                        help="bench/gpu_bundle.py's folder: QM9 cache and throughput molecules from there")
    parser.add_argument("--data-root", type=Path, default=None,
                        help="dataset root of the QM9 runs (default: the bundle's data/, else data/)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "gpu_check", help="summaries and check.log")
    parser.add_argument("--work", type=Path, default=None, help="runs and the synthetic MAG240M (default: OUT/work)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no GPU (torch.cuda.is_available() is False)")
    if args.bundle is not None and not (args.bundle / "manifest.json").is_file():
        parser.error(f"--bundle {args.bundle} holds no manifest.json: prepare it with python bench/gpu_bundle.py")
    data_root = args.data_root or (args.bundle / "data" if args.bundle is not None else REPO / "data")
    pool = args.bundle / "data" / "qm9_pool.csv" if args.bundle is not None else None
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, args.work or args.out / "work", args.time_scale)
    check.work.mkdir(parents=True, exist_ok=True)
    order = [part for part in PARTS if part in args.parts]
    check.report = {"machine": machine(device), "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
                    "command": " ".join(["python bench/gpu_check.py", *(argv if argv is not None else sys.argv[1:])]),
                    "order": order, "caps": {part: sum(CAPS[part].values()) * args.time_scale for part in order},
                    "parts": {}}
    say(f"on {check.report['machine']}; parts {', '.join(order)} within {sum(check.report['caps'].values()):.0f} s "
        f"of caps; writing to {args.out}")
    check.write()
    accelerator = "gpu" if device.type == "cuda" else "cpu"
    for part in order:
        say(f"part {part} (cap {check.report['caps'][part]:.0f} s)")
        update = functools.partial(check.record, part, time.monotonic())
        try:
            if part == "tests":
                result = check_tests(check, args.quick, args.bundle)
            elif part == "memory":
                result = check_memory(check, args.device, args.quick, update)
            elif part == "throughput":
                result = check_throughput(check, args.device, args.quick, pool, update)
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
    say(f"summary in {args.out / 'summary.md'}; " + (f"NOT OK: {', '.join(failed)}" if failed else "all parts ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
