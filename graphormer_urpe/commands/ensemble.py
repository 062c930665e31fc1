"""``graphormer-urpe ensemble``: the runs of one SMILES table saved as an ensemble, one directory that
``graphormer-urpe predict --model DIR`` reads from anywhere, without the training table (docs/small-data.md).

    graphormer-urpe ensemble --runs runs/small_molecules-seed0 runs/small_molecules-seed1 --trees --out ens/
    graphormer-urpe ensemble --runs runs/a/checkpoints/best-40.ckpt runs/b/checkpoints/best-60.ckpt --out ens/

A run is its directory (its best checkpoint, from ``metrics.json``) or a checkpoint file. The members predict the
table's validation and test rows; their mean is the ensemble's prediction, as chemprop's ensembles. With ``--trees``
(runs with ``--data.source.descriptors rdkit2d``; regression targets or binary labels), gradient-boosted trees on the
descriptors, fitted on the training rows, are blended in with a weight per target chosen on the validation rows by
the task's own metric (MAE; ROC-AUC for binary labels). Run it where the runs were trained: it reads their table.
The directory's files: :mod:`graphormer_urpe.evaluation.ensemble`. Exit codes: :mod:`graphormer_urpe.commands.exits`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from graphormer_urpe.commands.exits import exit_codes
from graphormer_urpe.errors import DataError
from graphormer_urpe.evaluation.ensemble import EnsembleRecord, build_ensemble, plan_ensemble
from graphormer_urpe.run.cli import configure_logging, log

#: How the summary names each metric of the tasks (``mae``, ``auroc`` ...).
METRIC_NAMES = {"mae": "MAE", "auroc": "ROC-AUC", "auprc": "PR-AUC", "accuracy": "accuracy"}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="graphormer-urpe ensemble", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, nargs="+", required=True, metavar="RUN",
                        help="run directories (their best checkpoint) or checkpoint files of one table's runs")
    parser.add_argument("--out", type=Path, required=True, help="the ensemble's directory to write (a new one)")
    parser.add_argument(
        "--trees",
        action="store_true",
        help="blend gradient-boosted trees on the RDKit descriptors in, their weight chosen on the "
             "validation rows",
    )
    return parser.parse_args(argv)


def best_checkpoint(run: Path) -> Path:
    """A run's member: the checkpoint file given, or the best checkpoint its directory's ``metrics.json`` names."""
    if run.is_file():
        return run
    metrics = run / "metrics.json"
    if not metrics.is_file():
        raise DataError(f"--runs {run}: neither a checkpoint file nor a finished run's directory (no {metrics})")
    best = json.loads(metrics.read_text()).get("best_checkpoint")
    if not best or not Path(best).is_file():
        raise DataError(f"--runs {run}: its best checkpoint {best} is not there; name a checkpoint file instead")
    return Path(best)


def summary(record: EnsembleRecord, split: str = "test") -> str:
    """One line: the ensemble's prediction scored on ``split`` (the blend's, named as the blend's, with its
    weights; the ensemble alone and the trees alone beside it)."""
    scores = record.scores[split]

    def shown(part: str) -> str:
        headline = {key.split("/")[1]: value for key, value in scores[part].items() if key.count("/") == 1}
        return ", ".join(f"{METRIC_NAMES.get(name, name)} {value:.4g}" for name, value in headline.items())

    members = f"{len(record.members)} member{'s' if len(record.members) > 1 else ''}"
    if not record.trees:
        return f"{split} {shown('ensemble')} (the mean of {members})"
    return (
        f"{split} {shown('blend')} of the blend with the descriptor trees (trees' weights {record.tree_weights}, "
        f"chosen on validation {record.blend_metric}); the ensemble of {members} alone {shown('ensemble')}, the "
        f"trees alone {shown('trees')}"
    )


def make_ensemble(runs: Sequence[Path], out: Path, trees: bool, command: str) -> EnsembleRecord:
    """Plan (every refusal first), build and save the ensemble; log what it scores."""
    plan = plan_ensemble([best_checkpoint(run) for run in runs], out, trees)
    record = build_ensemble(plan, command)
    log.info("ensemble written to %s: %s", out, summary(record))
    return record


def main(argv: Sequence[str] | None = None) -> EnsembleRecord:
    args = list(sys.argv[1:] if argv is None else argv)
    options = parse_args(args)  # --help prints and exits first
    configure_logging()
    with exit_codes():
        return make_ensemble(
            options.runs, options.out, options.trees, shlex.join(["graphormer-urpe", "ensemble", *args])
        )
