"""``graphormer-urpe``: one command, one subcommand per job, each with its own ``--help`` (docs/running.md).

    graphormer-urpe train --config qm9_gap                          # one run (a shipped config, or your YAML)
    graphormer-urpe evaluate --model CKPT --split test              # a split's metrics, or OGB-LSC submissions
    graphormer-urpe predict --model MODEL new.csv --out preds.csv   # new molecules: a checkpoint or an ensemble
    graphormer-urpe sweep --config small_molecules --seeds 0 1 2 --ensemble --trees ...   # seeds, mean +- std
    graphormer-urpe ensemble --runs RUN... --trees --out ens/       # an ensemble saved as one directory
    graphormer-urpe convert official|huggingface|upgrade|pretrained ...   # checkpoints of other layouts

This package run as a module is the same command, and so are a checkout's root scripts of train and evaluate. Every
subcommand has one shape (:mod:`graphormer_urpe.commands.command`); exit codes: :mod:`graphormer_urpe.commands.exits`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from graphormer_urpe.commands.exits import BAD_INPUT, OK, exit_codes
from graphormer_urpe.errors import InputError

#: Each subcommand: its module (imported when it runs, so
#: ``convert`` does not load Lightning's CLI) and what it does.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "graphormer_urpe.commands.train",
        "train from a YAML config (a run directory under runs/)",
    ),
    "evaluate": (
        "graphormer_urpe.commands.evaluate",
        "a checkpoint's metrics on a split, or OGB-LSC submissions",
    ),
    "predict": (
        "graphormer_urpe.commands.predict",
        "predict new molecules with a checkpoint or a saved ensemble",
    ),
    "sweep": (
        "graphormer_urpe.commands.sweep",
        "one config over several seeds: mean and std, and the recipe's ensemble",
    ),
    "ensemble": (
        "graphormer_urpe.commands.ensemble",
        "save the runs of one table as an ensemble, with descriptor trees",
    ),
    "convert": (
        "graphormer_urpe.commands.convert",
        "convert official, transformers' or earlier checkpoints; export the shipped one",
    ),
}


def usage() -> str:
    lines = ["\n\n".join(__doc__.split("\n\n")[:2]), "", "subcommands:"]
    lines += [f"  {name:<9} {about}" for name, (_, about) in SUBCOMMANDS.items()]
    lines += ["", "graphormer-urpe SUBCOMMAND --help shows a subcommand's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand with the rest of the command line; returns its exit code (0 when it returns)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return OK if args else BAD_INPUT
    if args[0] == "--version":
        try:
            print(f"graphormer-urpe {version('graphormer-urpe')}")
        except PackageNotFoundError:
            print("graphormer-urpe (not installed: run from a source tree)")
        return OK
    if args[0] not in SUBCOMMANDS:
        from graphormer_urpe.run.cli import configure_logging  # as a subcommand's refusal: Lightning's import

        configure_logging()
        with exit_codes():
            raise InputError(
                f"'{args[0]}' is not a subcommand; one of {', '.join(SUBCOMMANDS)} (graphormer-urpe --help)"
            )
    module = importlib.import_module(SUBCOMMANDS[args[0]][0])
    returned = module.main(args[1:])
    return returned if isinstance(returned, int) else OK  # a subcommand returns its result, or a code


if __name__ == "__main__":
    sys.exit(main())
