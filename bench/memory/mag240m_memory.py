"""Peak memory of MAG240M training at two graph sizes: it must stay flat (memory maps, not copies).

    nice -n 10 python bench/memory/mag240m_memory.py --roots /tmp/synthetic_mag_100k /tmp/synthetic_mag_1m

Runs ``train.py --config mag240m`` (a small model, the paper's fanouts [25, 15], DataLoader workers)
for a few dozen steps on each synthetic MAG240M-layout graph (generate them with
``python -m graphormer_urpe.testing.mag240m_release ROOT --papers N``; derived files are built
by the first run and not counted), sampling ``/proc`` of the training process and its workers
every 50 ms. Printed side by side:

* peak anonymous memory (heap: what copies of arrays would cost), summed over the processes;
* peak file-backed resident memory: pages of the memory-mapped files that sampling touched. They
  live in the page cache, are shared by all workers and are reclaimable; they grow with the part
  of the graph visited, not with copies.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import REPO, TRAIN
from graphormer_urpe.data.mag240m.derived import prepare_derived
from graphormer_urpe.data.mag240m.release import MAG240MRaw


def _tree(pid: int) -> list[int]:
    """pid and all its descendants."""
    found, frontier = [pid], [pid]
    while frontier:
        children = []
        for parent in frontier:
            try:
                children += [int(c) for c in Path(f"/proc/{parent}/task/{parent}/children").read_text().split()]
            except OSError:
                pass
        found += children
        frontier = children
    return found


def _memory_kib(pid: int) -> tuple[int, int]:
    """(RssAnon, RssFile + RssShmem) of one process in KiB; zeros if it is gone."""
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile", "RssShmem"):
                fields[key] = int(value.split()[0])
    except OSError:
        return 0, 0
    return fields.get("RssAnon", 0), fields.get("RssFile", 0) + fields.get("RssShmem", 0)


def measure(root: Path, steps: int, workers: int, batch: int) -> dict:
    """Peak memory of one short training run on ``root``."""
    with tempfile.TemporaryDirectory() as runs:
        command = [
            *TRAIN,
            "--config",
            "mag240m",
            "--data.root",
            str(root),
            "--data.num_classes",
            str(MAG240MRaw(root).meta["num_classes"]),
            "--data.batch_size",
            str(batch),
            "--data.num_workers",
            str(workers),
            "--trainer.max_steps",
            str(steps),
            "--trainer.val_check_interval",
            str(steps),
            "--trainer.limit_val_batches",
            "2",
            "--trainer.limit_test_batches",
            "2",
            "--model.init_args.encoder.num_layers",
            "2",
            "--model.init_args.encoder.hidden_dim",
            "64",
            "--model.init_args.encoder.ffn_dim",
            "64",
            "--model.init_args.encoder.num_heads",
            "8",
            "--run_root",
            runs,
            "--logger",
            "none",
        ]
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak_anon = peak_file = 0
        while process.poll() is None:
            usage = [_memory_kib(pid) for pid in _tree(process.pid)]
            peak_anon = max(peak_anon, sum(a for a, _ in usage))
            peak_file = max(peak_file, sum(f for _, f in usage))
            time.sleep(0.05)
        if process.returncode:
            raise SystemExit(f"training on {root} failed:\n{process.stderr.read()[-3000:]}")
    return {
        "papers": MAG240MRaw(root).meta["paper"],
        "anon_mib": peak_anon / 1024,
        "file_mib": peak_file / 1024,
        "seconds": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roots", type=Path, nargs=2, required=True, help="small graph, large graph")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    for root in args.roots:  # derived files first, so the runs measure training only
        raw = MAG240MRaw(root)
        raw.check()
        prepare_derived(raw, raw.directory / "graphormer")
    small, large = (measure(root, args.steps, args.workers, args.batch) for root in args.roots)
    print(
        f"training {args.steps} steps, batch {args.batch}, fanouts [25, 15], {args.workers} workers; "
        f"peaks summed over the main process and its workers"
    )
    print(f"{'':<36}{small['papers']:>14,} papers{large['papers']:>14,} papers{'ratio':>9}")
    for key, name in (
        ("anon_mib", "peak anonymous memory (MiB)"),
        ("file_mib", "peak file-backed resident (MiB)"),
        ("seconds", "wall time (s)"),
    ):
        print(f"{name:<36}{small[key]:>21.0f}{large[key]:>21.0f}{large[key] / small[key]:>9.2f}")


if __name__ == "__main__":
    main()
