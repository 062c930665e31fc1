"""``graphormer-urpe train``: train Graphormer(+URPE) from a YAML config (a checkout's root script is the same command).

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

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from graphormer_urpe.commands.command import Command
from graphormer_urpe.commands.exits import exit_codes
from graphormer_urpe.run.cli import TrainingCLI, log
from graphormer_urpe.run.start import RunMetrics, Start, finish_start, plan_start, run_start


@dataclass(frozen=True)
class TrainPlan:
    """A start of a run: its parsed config, data, model and trainer, and how it uses its run directory."""

    cli: TrainingCLI  # the config resolved, its objects built
    start: Start  # new, resume or restart; the directory held (plan_start)


class Train(Command[TrainPlan, RunMetrics]):
    NAME = "train"
    HELP = __doc__
    OVERRIDES = True

    def add_args(self, parser: argparse.ArgumentParser) -> None:
        """None here: train's options are its config's, declared and parsed by
        :class:`~graphormer_urpe.run.cli.TrainingCLI` (``graphormer-urpe train --help`` lists them)."""

    def parse(self, argv: Sequence[str]) -> argparse.Namespace:
        return argparse.Namespace(overrides=list(argv))  # all of it for TrainingCLI, --help included

    def plan(self, args: argparse.Namespace) -> TrainPlan:
        try:
            cli = TrainingCLI(args.overrides)
        except KeyboardInterrupt:
            log.warning("interrupted (Ctrl-C) while setting up; nothing was trained")
            raise
        try:
            return TrainPlan(cli, plan_start(cli))
        except BaseException:
            with exit_codes(finish=partial(finish_start, cli)):  # a refused start lets its run directory go
                raise

    def run(self, plan: TrainPlan) -> RunMetrics:
        """Fit, then validate and test the best checkpoint; returns the final metrics (``metrics.json``)."""
        return run_start(plan.cli, plan.start)

    def finish(self, plan: TrainPlan, exit_code: int, interrupted: bool) -> None:
        finish_start(plan.cli, exit_code, interrupted)


main = Train().main
