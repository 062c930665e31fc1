"""``graphormer-urpe predict``: new molecules, predicted by a saved ensemble or by one run's checkpoint.

    graphormer-urpe predict --model runs/small_molecules-ensemble-trees new.csv --out preds.csv
    graphormer-urpe predict --model runs/x/checkpoints/best-600.ckpt new.parquet --out preds.csv --smiles_column SMILES

TABLE is a CSV or Parquet table with a SMILES column (default: the training table's). Every row comes back in file
order, with the table's own columns (an ``id``, say) kept beside the predictions and an ``error`` column saying why
a row could not be predicted (its predictions empty). A checkpoint writes the task's columns (a regression's value
per target; a classification's label and probability). An ensemble (``graphormer-urpe ensemble``) writes its
prediction under the same names, and per score (``<target>``, ``<label>_probability``) each member's
(``_member<k>``), their standard deviation as an uncertainty (``_std``) and, blended with trees, the members' mean
(``_ensemble``) and the trees' (``_trees``): exactly what it recorded for its own test rows. Nothing is overwritten:
an existing ``--out`` is refused before any work, as are a table without rows or without its SMILES column.
Exit codes: :mod:`graphormer_urpe.commands.exits`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from graphormer_urpe.commands.exits import exit_codes
from graphormer_urpe.data.files import unwritable
from graphormer_urpe.errors import DataError
from graphormer_urpe.evaluation.ensemble import SavedEnsemble
from graphormer_urpe.evaluation.new_molecules import ERROR_COLUMN, predict_checkpoint, prediction_frame, write_new
from graphormer_urpe.run.cli import configure_logging, log, resolve_config_paths


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="graphormer-urpe predict", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "table", type=Path, metavar="TABLE", help="CSV or Parquet table of the molecules to predict"
    )
    parser.add_argument("--model", type=Path, required=True,
                        help="an ensemble's directory (graphormer-urpe ensemble) or one run's checkpoint (.ckpt)")
    parser.add_argument("--out", type=Path, required=True, help="the predictions' CSV file to write (a new file)")
    parser.add_argument("--smiles_column", default=None,
                        help="the SMILES column of TABLE (default: the training table's, or 'smiles')")
    parser.add_argument(
        "--config",
        default=None,
        help="with a checkpoint: predict with this config instead of the one the checkpoint holds",
    )
    return parser.parse_args(argv)


def check_paths(options: argparse.Namespace) -> None:
    """Refuse (:class:`DataError`) before any work an output that exists or cannot be written, or that is the table."""
    out = options.out
    if out.is_dir():
        raise DataError(f"--out {out} is a directory; name the CSV file to write")
    if out.exists():
        raise DataError(f"--out {out} exists; choose another output path (nothing is overwritten)")
    if (read_only := unwritable(out.parent)) is not None:
        raise DataError(f"--out {out}: {read_only} is not writable")
    if not options.table.is_file():
        raise DataError(f"the table to predict, {options.table}, does not exist")
    if out.resolve() == options.table.resolve():
        raise DataError(f"--out {out} is the table to predict; write the predictions to another file")
    if not options.model.exists():
        raise DataError(
            f"--model {options.model} does not exist: name an ensemble's directory or a checkpoint file"
        )
    if options.config is not None and options.model.is_dir():
        raise DataError("--config changes a checkpoint's config; an ensemble's members keep their own")


def main(argv: Sequence[str] | None = None) -> dict:
    """Predict the table's molecules into ``--out``; returns what was written."""
    options = parse_args(sys.argv[1:] if argv is None else argv)  # --help prints and exits first
    configure_logging()
    with exit_codes():
        check_paths(options)
        if options.model.is_dir():
            return predict_with_ensemble(options)
        config = None
        if options.config is not None:
            config = Path(resolve_config_paths(["--config", options.config])[1])
        return predict_checkpoint(options.model, options.table, options.out, config, options.smiles_column)


def predict_with_ensemble(options: argparse.Namespace) -> dict:
    """``--model DIR``: a saved ensemble's predictions (:class:`~graphormer_urpe.evaluation.ensemble.SavedEnsemble`);
    its files are checked, and the table read, before any molecule is featurised."""
    ensemble = SavedEnsemble(options.model)
    predicted, columns = ensemble.predict(options.table, options.smiles_column)
    frame = prediction_frame(predicted, columns)
    write_new(frame, options.out)
    failed = sum(bool(reason) for reason in predicted.errors)
    log.info(
        "wrote %s: %d rows, %d predicted by the ensemble of %d%s, %d could not be featurised (reason in '%s')",
        options.out,
        len(frame),
        len(frame) - failed,
        len(ensemble.record.members),
        " blended with descriptor trees" if ensemble.record.trees else "",
        failed,
        ERROR_COLUMN,
    )
    return {"model": str(options.model), "table": str(options.table), "out": str(options.out), "rows": len(frame),
            "predicted": len(frame) - failed, "failed": failed}
