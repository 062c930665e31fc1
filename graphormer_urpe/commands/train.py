"""``graphormer-urpe train``: train Graphormer(+URPE) from a YAML config (``python train.py`` is the same command).

    graphormer-urpe train --config qm9_gap
    graphormer-urpe train --config zinc_subset --model.encoder.attention rpe --trainer.max_steps 200
    graphormer-urpe train --config qm9_gap --run_name gap1 --ckpt_path last      # resume or extend run "gap1"
    graphormer-urpe train --config qm9_gap --run_name gap1 --ckpt_path auto      # resume if possible, else start
    graphormer-urpe train --config qm9_gap --init_from runs/qm9_rpe/checkpoints/last.ckpt  # RPE -> URPE (C = 1)
    graphormer-urpe train --config small_molecules --data.source.path my.csv --data.source.targets '[logS]'

``--config NAME`` names a shipped config (``graphormer_urpe/configs``) or a YAML file of one's own. Fits, then
validates and tests the best checkpoint and writes ``metrics.json`` in the run directory. A new run gets a new
directory; every start in a run directory (resume, extension) appends a segment to its record and its metrics log
(:mod:`graphormer_urpe.run.ledger`). A start is planned before any file is written
(:func:`~graphormer_urpe.run.start.plan_start`): a resume's checkpoint must fit the model, come from the same data and
the same batch size; then it runs (:func:`~graphormer_urpe.run.start.run_start`). A start that fails before its
first checkpoint leaves no run directory of its own behind, so its ``--run_name`` starts a run again.

Exit codes (:mod:`graphormer_urpe.commands.exits`): 0 done, 2 bad input (missing dataset, unusable checkpoint, a run
directory that cannot be used so), 3 non-finite loss, 128 + signal number after a signal stopped the run
(``last.ckpt`` written): 143 SIGTERM, 138 SIGUSR1, 130 Ctrl-C (the first press finishes the optimiser step and writes
``last.ckpt``; a second press stops at once).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial

from graphormer_urpe.commands.exits import INTERRUPTED, exit_codes
from graphormer_urpe.run.cli import TrainingCLI, log
from graphormer_urpe.run.start import finish_start, plan_start, run_start


def main(args: Sequence[str] | None = None) -> dict:
    """Run one experiment; returns the final metrics."""
    try:
        cli = TrainingCLI(args)
    except KeyboardInterrupt:
        log.warning("interrupted (Ctrl-C) while setting up; nothing was trained")
        sys.exit(INTERRUPTED)
    with exit_codes(finish=partial(finish_start, cli)):
        return run_start(cli, plan_start(cli))
