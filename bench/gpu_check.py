"""The one command to run on a GPU machine: is the project correct, how fast, and does it fit a V100?

    python bench/gpu_check.py                          # on a GPU: everything
    python bench/gpu_check.py --device cpu --steps 3 --quick   # the same parts on the CPU, small

Parts (``--parts`` picks some), each printed as it starts with the command it runs:

1. ``tests``: the exactness tests that follow the device (``pytest -m device``: URPE with C = 1
   equals RPE, padding and batch composition, fp16/bf16 finiteness, exact resume with the CUDA RNG
   state, first edges and the padded MAG240M batch against their CPU reference), on the GPU.
2. ``qm9``: the default QM9 run (``configs/qm9_gap.yaml``) for ``--steps`` steps (300) in ``32``,
   ``16-mixed`` and ``bf16-mixed``, losses side by side. Mixed precision passes when its loss on the
   first step (same weights, same batch) is within :data:`FIRST_STEP_RTOL` of float32's and its
   mean training loss over the last fifth of the steps, and its final validation MAE, are within
   :data:`TRAINING_RTOL` (runs in different precisions drift apart step by step, so their losses
   are compared as levels, not step by step).
3. ``throughput``: ``bench/train_throughput.py`` on the device in each precision, and compiled in
   ``16-mixed``.
4. ``memory``: the peak memory of one training step per GPU at the papers' settings (ZINC,
   PCQM4Mv2, MAG240M; see ``bench/paper_memory.py``) in ``16-mixed``, against a 32 GB V100:
   measured on a GPU, estimated on fake tensors on the CPU.

Writes ``summary.md`` (to paste into ``docs/gpu.md``) and ``summary.json`` under ``--out``, and
exits with 1 if a part failed (a test, a tolerance, a setting that does not fit, a command).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from graphormer_urpe.run.ledger import read_metrics

REPO = Path(__file__).resolve().parent.parent
PRECISIONS = ("32", "16-mixed", "bf16-mixed")
#: Mixed precision against float32: relative difference allowed on the first step's loss ...
FIRST_STEP_RTOL = 0.05
#: ... and on the mean training loss of the last fifth of the steps and on the final validation MAE.
TRAINING_RTOL = 0.10
#: Molecules of the QM9 runs with ``--quick`` (the default run uses all 130,831; the tests' cache holds 50).
QUICK_MOLECULES = 50
PARTS = ("tests", "qm9", "throughput", "memory")


def say(message: str) -> None:
    print(f"[gpu_check {datetime.datetime.now():%H:%M:%S}] {message}", flush=True)


def run(command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` in the repository, output to ``log`` (and its tail on failure to the screen)."""
    say("$ " + " ".join(command))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                   **(env or {})}
    result = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, check=False)
    log.write_text(result.stdout + result.stderr)
    if result.returncode:
        say(f"exit code {result.returncode}; last lines of {log}:\n" + "\n".join(log.read_text().splitlines()[-25:]))
    return result


def check_tests(out: Path, quick: bool) -> dict:
    """``pytest -m device`` (``--quick``: the attention module's only); deterministic cuBLAS for exact resume."""
    paths = ["tests/model/test_attention.py"] if quick else ["tests"]
    result = run([sys.executable, "-m", "pytest", "-q", "-m", "device", "-p", "no:cacheprovider", *paths],
                 out / "tests.log", env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    summary = next((line for line in reversed(result.stdout.splitlines()) if " passed" in line or " failed" in line),
                   "no pytest summary")
    return {"ok": result.returncode == 0, "summary": summary.strip("= "), "log": str(out / "tests.log")}


def qm9_losses(run_dir: Path) -> tuple[list[float], dict]:
    """Training losses step by step (``metrics.csv``) and the final metrics (``metrics.json``) of a run."""
    losses = [row["train/loss"] for row in read_metrics(run_dir) if "train/loss" in row]
    return losses, json.loads((run_dir / "metrics.json").read_text())


def check_qm9(out: Path, accelerator: str, steps: int, quick: bool, data_root: Path) -> dict:
    """The default QM9 run in each precision, its losses compared with float32's."""
    runs: dict[str, dict] = {}
    for precision in PRECISIONS:
        name = f"qm9_{precision}"
        command = [sys.executable, "train.py", "--config", "qm9_gap", "--trainer.precision", precision,
                   "--trainer.accelerator", accelerator, "--trainer.devices", "1",
                   "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
                   "--trainer.log_every_n_steps", "1", "--trainer.enable_progress_bar", "false",
                   "--data.root", str(data_root), "--run_root", str(out / "runs"), "--run_name", name,
                   "--logger", "csv"]
        if quick:
            command += ["--data.source.max_molecules", str(QUICK_MOLECULES)]
        started = time.perf_counter()
        result = run(command, out / f"{name}.log")
        if result.returncode:
            runs[precision] = {"ok": False, "error": f"train.py exited with {result.returncode}"}
            continue
        losses, metrics = qm9_losses(out / "runs" / name)
        tail = losses[-max(1, len(losses) // 5):]
        runs[precision] = {"ok": True, "seconds": time.perf_counter() - started, "first_loss": losses[0],
                           "tail_loss": sum(tail) / len(tail), "valid_mae": metrics["validation"]["val/mae"],
                           "losses": losses}
    compare_precisions(runs)
    return {"ok": all(entry["ok"] for entry in runs.values()), "steps": steps, "runs": runs}


def compare_precisions(runs: dict[str, dict]) -> None:
    """Mark each mixed-precision run ``ok`` if its losses are within the tolerances of the ``32`` run's,
    adding the relative differences (``first_rdiff``, ``tail_rdiff``, ``valid_rdiff``)."""
    reference = runs["32"]
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


def throughput_commands(device: str, quick: bool) -> list[list[str]]:
    """``bench/train_throughput.py`` in each precision, and compiled in ``16-mixed`` (not with ``--quick``)."""
    base = [sys.executable, "bench/train_throughput.py", "--device", device]
    if quick:
        base += ["--batch-size", "16", "--rounds", "1", "--epoch-batches", "2"]
    commands = [[*base, "--precision", precision] for precision in PRECISIONS]
    return commands if quick else [*commands, [*base, "--precision", "16-mixed", "--compile"]]


def check_throughput(out: Path, device: str, quick: bool) -> dict:
    results = []
    for index, command in enumerate(throughput_commands(device, quick)):
        result = run(command, out / f"throughput_{index}.log")
        results.append({"command": " ".join(command[1:]), "ok": result.returncode == 0,
                        "output": result.stdout.strip() if result.returncode == 0 else result.stderr[-2000:]})
    return {"ok": all(r["ok"] for r in results), "runs": results}


def check_memory(out: Path, device: torch.device, quick: bool) -> dict:
    """Every paper setting in 16-mixed (``--quick``: a smaller synthetic MAG240M, fewer batches)."""
    sys.path.insert(0, str(REPO / "bench"))
    import paper_memory

    results = []
    for key in paper_memory.SETTINGS:
        say(f"memory of one 16-mixed training step: {paper_memory.SETTINGS[key].name}")
        results.append(paper_memory.run_setting(key, device, "16-mixed", out, mag_batches=1 if quick else 6,
                                                mag_papers=20_000 if quick else 100_000, log=say))
    return {"ok": all(r.fits_v100 for r in results), "results": [asdict(r) for r in results],
            "table": paper_memory.markdown(results)}


def machine(device: torch.device) -> str:
    """The device in words, with the software versions."""
    if device.type == "cuda":
        gib = torch.cuda.get_device_properties(device).total_memory / 1024**3
        name = f"{torch.cuda.get_device_name(device)} ({gib:.0f} GiB)"
        return f"{name}, CUDA {torch.version.cuda}, torch {torch.__version__}"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__}"


def markdown(report: dict) -> str:
    """The summary to paste into docs/gpu.md."""
    lines = [f"Machine: {report['machine']}; {report['date']}; `{report['command']}`", ""]
    parts = report["parts"]
    if "tests" in parts:
        lines += [f"**Device tests**: {parts['tests']['summary']} ({'ok' if parts['tests']['ok'] else 'FAILED'})", ""]
    if "qm9" in parts:
        qm9 = parts["qm9"]
        lines += [f"**QM9, {qm9['steps']} steps** (tolerances: first-step loss {FIRST_STEP_RTOL:.0%}, "
                  f"late training loss and validation MAE {TRAINING_RTOL:.0%} of float32's)", "",
                  "| precision | first-step loss | mean loss, last fifth | valid MAE (eV) | s | within tolerance |",
                  "|---|---|---|---|---|---|"]
        for precision, entry in qm9["runs"].items():
            if "first_loss" not in entry:
                lines.append(f"| {precision} | {entry.get('error', 'failed')} | | | | no |")
                continue
            if precision == "32":
                verdict = "reference"
            else:
                verdict = "yes" if entry["ok"] else "NO"
            lines.append(f"| {precision} | {entry['first_loss']:.4f} | {entry['tail_loss']:.4f} | "
                         f"{entry['valid_mae']:.4f} | {entry['seconds']:.0f} | {verdict} |")
        lines.append("")
    if "throughput" in parts:
        lines += ["**Throughput** (`bench/train_throughput.py`)", ""]
        for entry in parts["throughput"]["runs"]:
            title = f"`{entry['command']}`" + ("" if entry["ok"] else " FAILED")
            lines += [title, "", "```", entry["output"], "```", ""]
    if "memory" in parts:
        lines += ["**Peak memory of one 16-mixed training step per GPU** (`bench/paper_memory.py`)", "",
                  parts["memory"]["table"], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=300, help="steps of each QM9 run")
    parser.add_argument("--quick", action="store_true",
                        help=f"small everything: attention tests only, {QUICK_MOLECULES} QM9 molecules, "
                             "small throughput batches, a small synthetic MAG240M")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--data-root", type=Path, default=REPO / "data", help="dataset root of the QM9 runs")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "gpu_check", help="logs, runs and summaries")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no GPU (torch.cuda.is_available() is False)")
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine(device), "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
              "command": " ".join(["python bench/gpu_check.py", *(argv if argv is not None else sys.argv[1:])]),
              "parts": {}}
    say(f"on {report['machine']}; writing to {args.out}")
    accelerator = "gpu" if device.type == "cuda" else "cpu"
    for part in args.parts:
        say(f"part {part}")
        if part == "tests":
            report["parts"]["tests"] = check_tests(args.out, args.quick)
        elif part == "qm9":
            report["parts"]["qm9"] = check_qm9(args.out, accelerator, args.steps, args.quick, args.data_root)
        elif part == "throughput":
            report["parts"]["throughput"] = check_throughput(args.out, args.device, args.quick)
        else:
            report["parts"]["memory"] = check_memory(args.out, device, args.quick)
        say(f"part {part}: {'ok' if report['parts'][part]['ok'] else 'FAILED'}")
    summary = markdown(report)
    (args.out / "summary.md").write_text(summary + "\n")
    (args.out / "summary.json").write_text(json.dumps(report, indent=2))
    print("\n" + summary)
    failed = [part for part, result in report["parts"].items() if not result["ok"]]
    say(f"summary in {args.out / 'summary.md'}; " + (f"FAILED: {', '.join(failed)}" if failed else "all parts ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
