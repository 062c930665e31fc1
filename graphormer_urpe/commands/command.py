"""The one shape of every ``graphormer-urpe`` subcommand: its options, a plan, a run.

    class Predict(Command[PredictPlan, Prediction]):
        NAME = "predict"
        HELP = __doc__                       # what ``graphormer-urpe predict --help`` prints above the options

        def add_args(self, parser): ...      # the options, with argparse
        def plan(self, args): ...            # every check of the input; raises InputError, writes nothing
        def run(self, plan): ...             # the work; returns a typed result

    main = Predict().main                    # the module's entry: graphormer-urpe predict, the root shims

:meth:`Command.main` parses the command line (``--help`` and argparse's own refusals exit there), then makes the
plan and runs it inside :func:`~graphormer_urpe.commands.exits.exit_codes`, the only exit: a refusal is an
:class:`~graphormer_urpe.errors.InputError` raised by ``plan`` (one line naming the option, file, row or key; exit
code 2) before any work. The plan is a frozen record, so what ``run`` does is decided by what ``plan`` checked.
"""

from __future__ import annotations

import argparse
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import partial
from typing import ClassVar, Generic, TypeVar

from graphormer_urpe.commands.exits import exit_codes

PlanT = TypeVar("PlanT")
ResultT = TypeVar("ResultT")


class Command(ABC, Generic[PlanT, ResultT]):
    """A subcommand: ``NAME``, ``HELP``, :meth:`add_args`, :meth:`plan` and :meth:`run` (see the module)."""

    #: The subcommand's name: ``graphormer-urpe NAME``.
    NAME: ClassVar[str]
    #: Its description, printed by ``graphormer-urpe NAME --help`` above the options (the module's docstring).
    HELP: ClassVar[str]
    #: Printed below the options by ``--help``.
    EPILOG: ClassVar[str | None] = None
    #: Whether options that :meth:`add_args` does not declare reach :meth:`plan` as ``args.overrides`` (the dotted
    #: options of a run's config: ``--data.root DIR``), rather than being refused by argparse.
    OVERRIDES: ClassVar[bool] = False

    @abstractmethod
    def add_args(self, parser: argparse.ArgumentParser) -> None:
        """Declare the options on ``parser`` (underscored names, as every command spells them)."""

    @abstractmethod
    def plan(self, args: argparse.Namespace) -> PlanT:
        """Check everything the input decides and return the frozen plan; raise an
        :class:`~graphormer_urpe.errors.InputError` naming the first problem. Writes nothing."""

    @abstractmethod
    def run(self, plan: PlanT) -> ResultT:
        """Do the planned work; return its typed result."""

    def finish(self, plan: PlanT, exit_code: int, interrupted: bool) -> None:
        """What ends every run of a plan, whatever stopped it (:func:`~graphormer_urpe.commands.exits.exit_codes`'s
        ``finish``); nothing by default."""

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog=f"graphormer-urpe {self.NAME}",
            description=self.HELP,
            epilog=self.EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.add_args(parser)
        return parser

    def parse(self, argv: Sequence[str]) -> argparse.Namespace:
        """The options of ``argv``; ``--help`` prints and exits here, as does argparse on an option it refuses."""
        if not self.OVERRIDES:
            return self.parser().parse_args(argv)
        args, overrides = self.parser().parse_known_args(argv)
        args.overrides = overrides
        return args

    def main(self, argv: Sequence[str] | None = None) -> ResultT:
        """``graphormer-urpe NAME ARGV...`` (``argv``: default the process's): parse, plan, run; exits with the
        table's code on anything that stops it, returns the result when it is done."""
        from graphormer_urpe.run.cli import configure_logging  # Lightning's import: not for --help

        args = self.parse(list(sys.argv[1:] if argv is None else argv))
        configure_logging()
        with exit_codes():
            plan = self.plan(args)
        with exit_codes(partial(self.finish, plan)):
            return self.run(plan)
