"""Train Graphormer(+URPE) from a YAML config.

    python train.py --config qm9_gap.yaml
    python train.py --config zinc_subset.yaml --model.encoder.attention rpe --trainer.max_steps 200
    python train.py --config qm9_gap.yaml --run_name gap1 --ckpt_path last      # resume or extend run "gap1"
    python train.py --config qm9_gap.yaml --run_name gap1 --ckpt_path auto      # resume if possible, else start
    python train.py --config qm9_gap.yaml --init_from runs/qm9_rpe/checkpoints/last.ckpt  # RPE -> URPE (C = 1)
    python train.py --config smiles_csv_example --init_from runs/qm9_pretrain-.../checkpoints/best-8000.ckpt

Fits, then validates and tests the best checkpoint and writes ``metrics.json`` in the run directory.
A new run gets a new directory; every start in a run directory (resume, extension) appends a segment
to its record and its metrics log (:mod:`graphormer_urpe.run.ledger`). A start is planned before any
file is written (:func:`~graphormer_urpe.run.start.plan_start`): a resume's checkpoint must fit the
model, come from the same data and the same batch size; then it runs
(:func:`~graphormer_urpe.run.start.run_start`). A start that fails before its first checkpoint leaves
no run directory of its own behind, so its ``--run_name`` starts a run again.
Exit codes (:func:`~graphormer_urpe.run.start.exit_codes`): 0 done, 2 bad input (missing dataset,
unusable checkpoint, a run directory that cannot be used so), 3 non-finite loss, 128 + signal number
after a signal stopped the run (``last.ckpt`` written): 143 SIGTERM, 138 SIGUSR1, 130 Ctrl-C (the
first press finishes the optimiser step and writes ``last.ckpt``; a second press stops at once).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from graphormer_urpe.run.cli import TrainingCLI, log
from graphormer_urpe.run.start import EXIT_INTERRUPTED, exit_codes, plan_start, run_start


def main(args: Sequence[str] | None = None) -> dict:
    """Run one experiment; returns the final metrics."""
    try:
        cli = TrainingCLI(args)
    except KeyboardInterrupt:
        log.warning("interrupted (Ctrl-C) while setting up; nothing was trained")
        sys.exit(EXIT_INTERRUPTED)
    with exit_codes(cli):
        return run_start(cli, plan_start(cli))


if __name__ == "__main__":
    main()
