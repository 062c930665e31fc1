"""``graphormer-urpe ensemble``: the runs of one SMILES table saved as an ensemble, one directory that
``graphormer-urpe predict --model DIR`` reads from anywhere, without the training table (docs/small-data.md).

    graphormer-urpe ensemble --runs runs/small_molecules-seed0 runs/small_molecules-seed1 --trees --kernel --out ens/
    graphormer-urpe ensemble --runs runs/a/checkpoints/best-40.ckpt runs/b/checkpoints/best-60.ckpt --out ens/

A run is its directory (its best checkpoint, the file ``metrics.json`` names, read from the directory's own
``checkpoints/`` wherever the run was moved) or a checkpoint file; one run given twice is refused. The members
predict the table's validation and test rows; their mean is the ensemble's prediction, as chemprop's ensembles. With
``--trees`` (runs with ``--data.source.descriptors rdkit2d`` and/or ``--data.source.fingerprints ecfp``; regression
targets or binary labels), gradient-boosted trees on those features, and with ``--kernel`` a Gaussian process on Morgan
count fingerprints, both fitted on the training rows, are blended in with weights per target chosen on the validation
rows by inverse errors (:mod:`graphormer_urpe.evaluation.blend`). Run it where the runs were trained: it
reads their table. The directory is written whole or not at all; of two commands writing one ``--out`` at once, the
second is refused. The directory's files: :mod:`graphormer_urpe.evaluation.ensemble`. Exit codes:
:mod:`graphormer_urpe.commands.exits`.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path

from graphormer_urpe.commands.command import Command
from graphormer_urpe.evaluation.ensemble import (
    EnsemblePlan,
    EnsembleRecord,
    build_ensemble,
    member_checkpoints,
    plan_ensemble,
)


@dataclass(frozen=True)
class EnsembleCommandPlan:
    """The ensemble to make, every input checked, and the command line its record keeps."""

    ensemble: EnsemblePlan  # the members, the output, the table (:func:`plan_ensemble`)
    command: str  # the command as typed (for ensemble.json's "made")


class Ensemble(Command[EnsembleCommandPlan, EnsembleRecord]):
    NAME = "ensemble"
    HELP = __doc__

    def add_args(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--runs",
            type=Path,
            nargs="+",
            required=True,
            metavar="RUN",
            help="run directories (their best checkpoint) or checkpoint files of one table's runs",
        )
        parser.add_argument("--out", type=Path, required=True, help="the ensemble's directory to write (a new one)")
        parser.add_argument(
            "--trees",
            action="store_true",
            help="blend gradient-boosted trees on the runs' RDKit "
            "descriptors and/or fingerprints in (the blend's weights: docs/small-data.md)",
        )
        parser.add_argument(
            "--kernel",
            action="store_true",
            help="blend a Gaussian process on Morgan count fingerprints (Tanimoto's kernel) in",
        )

    def plan(self, args: argparse.Namespace) -> EnsembleCommandPlan:
        parts = [option for option, wanted in (("--trees", args.trees), ("--kernel", args.kernel)) if wanted]
        command = ["graphormer-urpe", self.NAME, "--runs", *map(str, args.runs), *parts, "--out", str(args.out)]
        return EnsembleCommandPlan(
            plan_ensemble(member_checkpoints(args.runs), args.out, args.trees, args.kernel), shlex.join(command)
        )

    def run(self, plan: EnsembleCommandPlan) -> EnsembleRecord:
        return build_ensemble(plan.ensemble, plan.command)


main = Ensemble().main
