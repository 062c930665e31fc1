"""The default run on a machine it shares: steps per second of ``train.py`` alone and beside one busy process, for
several settings of torch threads x data-loader workers, side by side.

    python bench/speed/shared_cores.py                                   # qm9_gap, 20,000 molecules, 2 rounds
    python bench/speed/shared_cores.py --settings 2x1 1x1 2x0 1x0 --rounds 3 --steps 100

Each setting ``TxW`` runs ``train.py --config CONFIG --threads T --data.num_workers W`` for ``--warmup`` + ``--steps``
optimiser steps and times the last ``--steps`` (:class:`bench.speed.step_clock.StepClock`), once alone and once while a
single-threaded busy loop (``python -c "while True: pass"``) runs beside it; the settings and the two conditions
alternate within each round, so all see the same machine. Printed: steps per second alone and shared (median over
rounds) and how many times slower the shared run is. A fair share of 2 cores with one more process costs about
1.5x; the same run ``--threads`` null (the default) picks ``cores - workers`` threads (docs/throughput.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import REPO, TRAIN


def parse_setting(text: str) -> tuple[int, int]:
    """``"2x1"`` -> (2 threads, 1 worker)."""
    threads, _, workers = text.partition("x")
    return int(threads), int(workers)


def run(
    config: str,
    molecules: int,
    data_root: Path,
    run_root: Path,
    threads: int,
    workers: int,
    warmup: int,
    steps: int,
    out: Path,
) -> dict:
    """One timed ``train.py`` run; returns its :class:`StepClock` figures."""
    clock = {
        "class_path": "bench.speed.step_clock.StepClock",
        "init_args": {"out": str(out), "first": warmup, "last": warmup + steps},
    }
    command = [
        *TRAIN,
        "--config",
        config,
        "--data.source.max_molecules",
        str(molecules),
        "--data.root",
        str(data_root),
        "--run_root",
        str(run_root),
        "--logger",
        "none",
        "--threads",
        str(threads),
        "--data.num_workers",
        str(workers),
        "--trainer.max_steps",
        str(warmup + steps),
        "--trainer.limit_val_batches",
        "0",
        "--trainer.limit_test_batches",
        "0",
        "--trainer.callbacks+",
        json.dumps(clock),
    ]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"train.py failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="qm9_gap")
    parser.add_argument("--molecules", type=int, default=20_000, help="QM9 molecules (data.source.max_molecules)")
    parser.add_argument("--data-root", type=Path, default=REPO / "data")
    parser.add_argument(
        "--settings", nargs="+", default=["2x1", "1x1", "2x0", "1x0"], help="torch threads x loader workers"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=20, help="optimiser steps before the timed ones")
    parser.add_argument("--steps", type=int, default=100, help="timed optimiser steps")
    args = parser.parse_args()
    settings = [parse_setting(s) for s in args.settings]
    print(
        f"{os.cpu_count()} cores; {args.config}, {args.molecules} molecules; {args.warmup} steps of warm-up, "
        f"{args.steps} timed; {args.rounds} rounds",
        flush=True,
    )
    rates: dict[tuple[int, int, bool], list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        # the cache is built once, by an untimed run, so that no timed run includes it
        run(args.config, args.molecules, args.data_root, scratch / "runs", 1, 0, 1, 1, scratch / "build.json")
        for round_index in range(args.rounds):
            order = settings if round_index % 2 == 0 else settings[::-1]
            for threads, workers in order:
                for shared in (False, True) if round_index % 2 == 0 else (True, False):
                    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if shared else None
                    try:
                        out = scratch / f"clock-{round_index}-{threads}x{workers}-{shared}.json"
                        figures = run(
                            args.config,
                            args.molecules,
                            args.data_root,
                            scratch / "runs",
                            threads,
                            workers,
                            args.warmup,
                            args.steps,
                            out,
                        )
                    finally:
                        if busy is not None:
                            busy.kill()
                            busy.wait()
                    rates.setdefault((threads, workers, shared), []).append(figures["steps_per_second"])
                    print(
                        f"round {round_index + 1}: {threads} threads x {workers} workers, "
                        f"{'beside a busy process' if shared else 'alone'}: "
                        f"{figures['steps_per_second']:.2f} steps/s",
                        flush=True,
                    )
    print("\n| torch threads x loader workers | steps/s alone | steps/s beside one busy process | slower by |")
    print("|---|---|---|---|")
    for threads, workers in settings:
        alone = statistics.median(rates[threads, workers, False])
        shared = statistics.median(rates[threads, workers, True])
        print(f"| {threads} x {workers} | {alone:.2f} | {shared:.2f} | {alone / shared:.1f}x |")


if __name__ == "__main__":
    main()
