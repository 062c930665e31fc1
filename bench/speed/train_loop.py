"""The whole training loop: ``train.py`` end to end (data loading, Lightning, logging), graphs per second over a
window of steps, beside the step alone (``bench/speed/train_throughput.py``).

    python bench/speed/train_loop.py --data-root data/zinc_like                         # CPU, the ZINC config
    python bench/speed/train_loop.py --data-root /tmp/zinc_like --device cuda --precision bf16-mixed \\
        --variants eager cuda_graphs --pad-nodes-to 40
    python bench/speed/train_loop.py --setting pcqm --data-root /tmp/pcqm_like --device cuda --pad-nodes-to 56

The data is written once under ``--data-root`` in the dataset's release layout, and read by the real source and
cache:

* ``zinc`` (``configs/zinc_subset.yaml``, global batch 256): ZINC-sized molecules in ZINC's layout (``ZINC/raw``:
  the subset's 10,000 / 1,000 / 1,000 molecules, 9-38 atoms, a tree of bonds and two ring closures each;
  :func:`~graphormer_urpe.testing.zinc_raw.write_zinc_raw`);
* ``pcqm`` (``configs/pcqm4mv2.yaml``, global batch 512): PCQM4Mv2-sized molecules
  (``bench/speed/train_throughput.py``'s sizes) as SMILES in PCQM4Mv2's layout (``pcqm4m-v2/raw/data.csv.gz``,
  ``split_dict.pt``; carbon, nitrogen and oxygen, :func:`bench.common.random_smiles`), featurised as PCQM4Mv2 is;
  10,000 training molecules, 1,000 in each other split.

``--molecules`` writes fewer. Each variant (``eager``, ``compiled``, ``cuda_graphs``: ``--model.compile``) is one
``train.py`` process of the config, its ``--data.num_workers`` loader workers, no validation, no logger, for
``--last`` optimiser steps; steps ``--first + 1`` .. ``--last`` are timed by
:class:`bench.speed.step_clock.StepClock` (graphs per second; the share of the time between two steps: waiting for the
loader, and Lightning's bookkeeping). Variants run one after the other, in alternating order when ``--rounds`` > 1;
the median round counts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import REPO, TRAIN, random_smiles
from bench.speed.train_throughput import SETTINGS
from graphormer_urpe.testing.ogb_layouts import write_pcqm4mv2
from graphormer_urpe.testing.zinc_raw import write_zinc_raw, zinc_like_atoms

MODES = {"eager": "false", "compiled": "true", "cuda_graphs": "cuda_graphs"}
#: Training molecules of the ZINC subset (validation and test: a tenth each), as the ZINC source expects them.
SUBSET_TRAIN = 10_000


def zinc_like_release(data_root: Path, train: int) -> None:
    """``train`` ZINC-sized training molecules (a tenth as many for validation and test) in ZINC's raw layout under
    ``data_root``, written unless already there."""
    raw = data_root / "ZINC" / "raw"
    if not raw.exists():
        sizes = {"train": train, "val": train // 10, "test": train // 10}
        print(f"writing {sum(sizes.values())} ZINC-sized molecules into {raw}", flush=True)
        write_zinc_raw(raw, sizes, sizes, atoms=zinc_like_atoms, rings=2)


def pcqm_like_release(data_root: Path, train: int) -> None:
    """``train`` PCQM4Mv2-sized training molecules (a tenth as many in each other split) as SMILES in PCQM4Mv2's
    layout under ``data_root``, with random gaps, written unless already there."""
    if (data_root / "pcqm4m-v2").exists():
        return
    counts = {"train": train, "valid": train // 10, "test-dev": train // 10, "test-challenge": train // 10}
    rng = np.random.default_rng(0)
    total = sum(counts.values())
    print(f"writing {total} PCQM4Mv2-sized molecules into {data_root / 'pcqm4m-v2'}", flush=True)
    smiles = [random_smiles(SETTINGS["pcqm"].atoms(rng), rng) for _ in range(total)]
    starts = np.cumsum([0, *counts.values()])
    splits = {name: np.arange(starts[k], starts[k + 1]) for k, name in enumerate(counts)}
    write_pcqm4mv2(data_root, smiles, rng.normal(5.0, 1.0, total), splits)


#: Per setting: the config, and what writes its data.
RELEASES = {"zinc": ("zinc_subset", zinc_like_release), "pcqm": ("pcqm4mv2", pcqm_like_release)}


def timed_run(args: argparse.Namespace, mode: str, run_root: Path, out: Path) -> dict:
    """One ``train.py`` process; returns :class:`bench.speed.step_clock.StepClock`'s figures (exit on failure)."""
    clock = {
        "class_path": "bench.speed.step_clock.StepClock",
        "init_args": {"out": str(out), "first": args.first, "last": args.last},
    }
    config, _ = RELEASES[args.setting]
    command = [
        *TRAIN,
        "--config",
        config,
        "--data.root",
        str(args.data_root),
        "--run_root",
        str(run_root),
        "--logger",
        "none",
        "--checkpoint.every_n_steps",
        "0",
        "--trainer.max_steps",
        str(args.last),
        "--trainer.limit_val_batches",
        "0",
        "--trainer.limit_test_batches",
        "0",
        "--trainer.accelerator",
        "gpu" if args.device == "cuda" else "cpu",
        "--trainer.precision",
        args.precision,
        "--model.compile",
        MODES[mode],
        "--data.num_workers",
        str(args.workers),
        "--trainer.callbacks+",
        json.dumps(clock),
    ]
    if mode != "eager":
        command += ["--data.pad_nodes_to", str(args.pad_nodes_to)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if done.returncode or not out.is_file():
        raise SystemExit(f"train.py ({mode}) ended with exit code {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(out.read_text())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", default="zinc", choices=list(RELEASES))
    parser.add_argument("--data-root", type=Path, required=True, help="where the setting's release is (written)")
    parser.add_argument(
        "--molecules", type=int, default=SUBSET_TRAIN, help="training molecules of a release written now (10,000)"
    )
    parser.add_argument("--variants", nargs="+", default=["eager"], choices=list(MODES))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precision", default="32", choices=["32", "16-mixed", "bf16-mixed"])
    parser.add_argument("--workers", type=int, default=4, help="data loader workers (the ZINC config's 4)")
    parser.add_argument("--pad-nodes-to", type=int, default=8, help="--data.pad_nodes_to of the compiled variants")
    parser.add_argument("--first", type=int, default=50, help="optimiser steps before the timed window")
    parser.add_argument("--last", type=int, default=250, help="the last timed optimiser step")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="also write every variant's figures to this file")
    args = parser.parse_args(argv)
    config, write_release = RELEASES[args.setting]
    write_release(args.data_root, args.molecules)
    print(
        f"train.py --config {config} on {args.device}, precision {args.precision}, {args.workers} loader "
        f"workers; steps {args.first + 1}-{args.last} timed, {args.rounds} round(s)",
        flush=True,
    )
    figures: dict[str, list[dict]] = {mode: [] for mode in args.variants}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            for mode in args.variants if round_index % 2 == 0 else args.variants[::-1]:
                out = Path(scratch) / f"clock-{mode}-{round_index}.json"
                result = timed_run(args, mode, Path(scratch) / "runs", out)
                figures[mode].append(result)
                if args.json is not None:  # after every run: a check cut later keeps what was measured
                    args.json.write_text(
                        json.dumps(
                            {
                                "setting": args.setting,
                                "config": config,
                                "device": args.device,
                                "precision": args.precision,
                                "runs": figures,
                            },
                            indent=2,
                        )
                        + "\n"
                    )
                print(
                    f"round {round_index + 1}, {mode}: {result['graphs_per_second']:.0f} graphs/s, "
                    f"{result['between_steps_share']:.0%} of the time between steps",
                    flush=True,
                )
    print("\n| variant | graphs/s (median round) | steps/s | time between steps (loader, Lightning) |")
    print("|---|---|---|---|")
    for mode, results in figures.items():
        median = sorted(results, key=lambda r: r["graphs_per_second"])[len(results) // 2]  # the upper for even
        print(
            f"| {mode} | {median['graphs_per_second']:.0f} | {median['steps_per_second']:.2f} | "
            f"{median['between_steps_share']:.0%} |"
        )


if __name__ == "__main__":
    main()
