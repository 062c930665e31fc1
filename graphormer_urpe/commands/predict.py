"""``graphormer-urpe predict``: new molecules, predicted by a saved ensemble or by one run's checkpoint.

    graphormer-urpe predict --model runs/small_molecules-ensemble-trees new.csv --out preds.csv
    graphormer-urpe predict --model runs/x/checkpoints/best-600.ckpt new.parquet --out preds.csv --smiles_column SMILES

TABLE is a CSV or Parquet table with a SMILES column (default: the training table's). Every row comes back in file
order, with the table's own columns (an ``id``, say) kept beside the predictions and an ``error`` column saying why
a row could not be predicted (its predictions empty). A checkpoint writes the task's columns (a regression's value
per target; a classification's label and probability). An ensemble (``graphormer-urpe ensemble``) writes its
prediction under the same names, and per score (``<target>``, ``<label>_probability``) each member's
(``_member<k>``), their standard deviation as an uncertainty (``_std``) and, blended with cheap parts, the members'
mean (``_ensemble``), the trees' (``_trees``) and the kernel's (``_kernel``): exactly what it recorded for its own
test rows. Nothing is overwritten:
an existing ``--out`` is refused before any work, as are a table that is a directory, without rows or without its
SMILES column, and an ensemble whose ``ensemble.json`` was edited. Exit codes: :mod:`graphormer_urpe.commands.exits`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from graphormer_urpe.commands.command import Command
from graphormer_urpe.data.files import unwritable
from graphormer_urpe.errors import DataError
from graphormer_urpe.evaluation.ensemble import SavedEnsemble
from graphormer_urpe.evaluation.new_molecules import Prediction, check_table_to_predict, predict_checkpoint
from graphormer_urpe.run.cli import resolve_config_paths


@dataclass(frozen=True)
class PredictPlan:
    """A table to predict into a new file, every path checked."""

    model: Path  # a checkpoint file, or an ensemble's directory
    ensemble: SavedEnsemble | None  # the ensemble read from ``model`` (its record checked); None: a checkpoint
    table: Path  # the molecules, a CSV or Parquet file
    out: Path  # the CSV file to write (it does not exist)
    smiles_column: str | None  # TABLE's SMILES column (None: the training table's)
    config: Path | None  # with a checkpoint: the config to predict with instead of its own


def check_output(out: Path, table: Path) -> None:
    """Refuse (:class:`DataError`) an output that exists, cannot be written, or is the table itself."""
    if out.is_dir():
        raise DataError(f"--out {out} is a directory; name the CSV file to write")
    if out.exists():
        raise DataError(f"--out {out} exists; choose another output path (nothing is overwritten)")
    if (read_only := unwritable(out.parent)) is not None:
        raise DataError(f"--out {out}: {read_only} is not writable")
    if out.resolve() == table.resolve():
        raise DataError(f"--out {out} is the table to predict; write the predictions to another file")


class Predict(Command[PredictPlan, Prediction]):
    NAME = "predict"
    HELP = __doc__

    def add_args(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "table", type=Path, metavar="TABLE", help="CSV or Parquet table of the molecules to predict"
        )
        parser.add_argument(
            "--model",
            type=Path,
            required=True,
            help="an ensemble's directory (graphormer-urpe ensemble) or one run's checkpoint (.ckpt)",
        )
        parser.add_argument("--out", type=Path, required=True, help="the predictions' CSV file to write (a new file)")
        parser.add_argument(
            "--smiles_column",
            default=None,
            help="the SMILES column of TABLE (default: the training table's, or 'smiles')",
        )
        parser.add_argument(
            "--config",
            default=None,
            help="with a checkpoint: predict with this config instead of the one the checkpoint holds",
        )

    def plan(self, args: argparse.Namespace) -> PredictPlan:
        check_output(args.out, args.table)
        check_table_to_predict(args.table)
        if not args.model.exists():
            raise DataError(f"--model {args.model} does not exist: name an ensemble's directory or a checkpoint file")
        if args.config is not None and args.model.is_dir():
            raise DataError("--config changes a checkpoint's config; an ensemble's members keep their own")
        config = None if args.config is None else Path(resolve_config_paths(["--config", args.config])[1])
        return PredictPlan(
            model=args.model,
            ensemble=SavedEnsemble(args.model) if args.model.is_dir() else None,
            table=args.table,
            out=args.out,
            smiles_column=args.smiles_column,
            config=config,
        )

    def run(self, plan: PredictPlan) -> Prediction:
        if plan.ensemble is not None:  # its files are checked, and the table read, before any molecule is featurised
            return plan.ensemble.predict_into(plan.table, plan.out, plan.smiles_column)
        return predict_checkpoint(plan.model, plan.table, plan.out, plan.config, plan.smiles_column)


main = Predict().main
