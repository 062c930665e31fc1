"""``graphormer-urpe evaluate``: a checkpoint's metrics on a split, or OGB-LSC test submissions written and checked.

    graphormer-urpe evaluate --model runs/qm9_gap-.../checkpoints/best-1000.ckpt --split test --out metrics.json
    graphormer-urpe evaluate --model runs/pcqm4mv2-.../checkpoints/last.ckpt --split valid
    graphormer-urpe evaluate --model runs/pcqm4mv2-.../checkpoints/last.ckpt --split test-dev --submission_dir subs/
    graphormer-urpe evaluate --check_submission subs/y_pred_pcqm4m-v2_test-dev.npz --data_root data
    graphormer-urpe evaluate --model runs/mag240m-.../checkpoints/best.ckpt --split test-dev --submission_dir subs/

The checkpoint carries its resolved config; ``--config`` and dotted overrides (``--data.root``,
``--trainer.devices 8 --trainer.strategy ddp``) change it. On CPU the validation metric equals the
one logged for the checkpoint in training. The checkpoint also records the identity of its data
(:func:`~graphormer_urpe.run.checkpoints.compare_data`: table SHA-1, split options, cache key); evaluation on data
that differ (an edited table, another split) stops with exit code 2 naming what differs, unless
``--allow_other_data``, and then the output and ``--out`` say so (``same_data_as_training``). The
result names where the run's weights came from (``initialised_from``) when it started from another
checkpoint (``train --init_from``).

For OGB-LSC datasets (PCQM4Mv2, MAG240M) every split is predicted in its order by any number of
processes; ``--split valid`` prints the metric of ogb's evaluator (MAE, accuracy), and a hidden
test split (``test-dev``, ``test-challenge``) is written into ``--submission_dir``, read back and
checked, with a log (``*.log.json``) listing every row given the training mean
(:mod:`graphormer_urpe.evaluation.ogb`); ``--check_submission`` checks a file
(:func:`~graphormer_urpe.evaluation.submission.check_submission_file`).

``--model`` names the checkpoint (``--ckpt``, its earlier name, still works, with a note); new molecules are
``graphormer-urpe predict``'s (:mod:`graphormer_urpe.commands.predict`). Before any work the plan checks the outputs
(writable; ``--out`` no existing file), the split, the checkpoint and its data
(:mod:`graphormer_urpe.evaluation.checkpoint`, where the run's evaluation is too). Exit codes
(:mod:`graphormer_urpe.commands.exits`): 0 done; 1 an invalid submission (``--check_submission``, or predictions the
leaderboard would refuse); 2 bad input (checkpoint, config, data, options, a split the data do not have, an output
that cannot be written or exists).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from graphormer_urpe.commands.command import Command
from graphormer_urpe.data.lsc_formats import MODES, SubmissionFormat
from graphormer_urpe.data.predictable import RunData
from graphormer_urpe.errors import DataError
from graphormer_urpe.evaluation.checkpoint import (
    Evaluation,
    check_outputs,
    check_split,
    check_submission,
    evaluate_checkpoint,
)
from graphormer_urpe.run.callbacks import remove_weight_averaging
from graphormer_urpe.run.checkpoints import check_checkpoint, compare_data, data_identity, embedded_config
from graphormer_urpe.run.cli import GraphormerCLI, log
from graphormer_urpe.run.finetune import describe
from graphormer_urpe.run.ledger import write_json
from graphormer_urpe.tasks.base import INITIALISED_FROM


@dataclass(frozen=True)
class EvaluatePlan:
    """A checkpoint to evaluate on a split, its model and data built and checked."""

    checkpoint: str  # --model, as given
    split: str  # valid, test, test-dev, test-challenge
    trainer: pl.Trainer  # the config's trainer (no logger, no weight averaging)
    model: pl.LightningModule  # the checkpoint's task, as its config (or --config) builds it
    data: RunData  # its data
    submission: SubmissionFormat | None  # the OGB-LSC dataset's format (None: not one)
    data_check: dict[str, Any]  # compare_data's: same_data_as_training (and data_differences)
    initialised_from: str | None  # where the run's weights came from (train --init_from)
    out: Path | None  # the metrics' JSON file to write (it does not exist)
    submission_dir: Path | None  # where a hidden split's submission goes
    predictions: Path | None  # where an OGB-LSC split's predictions go (.npz)
    started: float  # time.perf_counter() when the command started (a submission's wall time)


@dataclass(frozen=True)
class CheckPlan:
    """``--check_submission FILE``: an existing submission file to check."""

    path: Path  # the submission file
    data_root: Path  # where the dataset's split sizes are (else ogb's official sizes)


class Evaluate(Command[EvaluatePlan | CheckPlan, Evaluation | dict[str, Any]]):
    NAME = "evaluate"
    HELP = __doc__
    EPILOG = "Any other option (--data.root DIR, --config FILE ...) changes the checkpoint's own config, as train's do."
    OVERRIDES = True

    def add_args(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--model", default=None, metavar="CKPT", help="the checkpoint file (.ckpt) to evaluate")
        parser.add_argument("--ckpt", default=None, help=argparse.SUPPRESS)  # --model's earlier name
        parser.add_argument("--split", default="valid", choices=["valid", "test", *MODES], help="split to evaluate")
        parser.add_argument("--out", type=Path, default=None, help="write the metrics to this JSON file")
        parser.add_argument(
            "--submission_dir",
            type=Path,
            default=None,
            help="directory for the OGB-LSC submission file of --split test-dev/test-challenge",
        )
        parser.add_argument(
            "--predictions",
            type=Path,
            default=None,
            metavar="FILE",
            help="also save the split's rows and predictions (NaN for skipped rows) to this .npz file",
        )
        parser.add_argument(
            "--check_submission",
            type=Path,
            default=None,
            metavar="FILE",
            help="only check an existing submission file (name, shape, dtype, finite values)",
        )
        parser.add_argument(
            "--allow_other_data",
            action="store_true",
            help="evaluate even if the data differ from those the checkpoint was trained on (the result then says so)",
        )
        parser.add_argument(
            "--data_root",
            type=Path,
            default=Path("data"),
            help="dataset root holding <dataset>/split_dict.pt, for --check_submission (without it: "
            "ogb's official test split sizes)",
        )

    def plan(self, args: argparse.Namespace) -> EvaluatePlan | CheckPlan:
        started = time.perf_counter()
        check_outputs(args.out, args.predictions, args.submission_dir)
        if args.check_submission is not None:
            return CheckPlan(args.check_submission, args.data_root)
        if args.ckpt is not None:
            if args.model is not None:
                raise DataError("--ckpt is --model's earlier name: give one of them")
            log.warning("--ckpt is now spelled --model (graphormer-urpe evaluate --model CKPT)")
        checkpoint = args.model or args.ckpt
        if checkpoint is None:
            raise DataError("--model CKPT is required (or --check_submission FILE)")
        if Path(checkpoint).is_dir():
            raise DataError(
                f"--model {checkpoint} is a directory: evaluate takes one run's checkpoint (an "
                f"ensemble's scores are in its ensemble.json)"
            )
        if args.submission_dir is not None and args.split not in MODES:
            raise DataError(f"--submission_dir writes test-dev or test-challenge submissions, not '{args.split}'")
        own_config = any(a == "--config" or a.startswith("--config=") for a in args.overrides)
        # the checkpoint's config holds the architecture --init_from gave the run; its weights are --model's
        cli = GraphormerCLI(args.overrides, config_text=None if own_config else embedded_config(checkpoint))
        data = cli.datamodule
        remove_weight_averaging(cli.trainer)  # the checkpoint holds the averaged weights; nothing averages here
        if not isinstance(data, RunData):
            raise DataError(f"{type(data).__name__} does not give what evaluation needs of its data (identity())")
        submission = check_split(data, args.split, checkpoint, args.predictions, args.submission_dir)
        stored = check_checkpoint(checkpoint, cli.model, cli.model.hparams)
        initialised = stored.get(INITIALISED_FROM)
        return EvaluatePlan(
            checkpoint=checkpoint,
            split=args.split,
            trainer=cli.trainer,
            model=cli.model,
            data=data,
            submission=submission,
            data_check=compare_data(checkpoint, stored, data_identity(data), args.allow_other_data),
            initialised_from=None if initialised is None else describe(initialised),
            out=args.out,
            submission_dir=args.submission_dir,
            predictions=args.predictions,
            started=started,
        )

    def run(self, plan: EvaluatePlan | CheckPlan) -> Evaluation | dict[str, Any]:
        if isinstance(plan, CheckPlan):
            return check_submission(plan.path, plan.data_root)
        result = evaluate_checkpoint(
            plan.trainer,
            plan.model,
            plan.data,
            plan.checkpoint,
            plan.split,
            plan.submission,
            submission_dir=plan.submission_dir,
            predictions=plan.predictions,
            data_check=plan.data_check,
            initialised_from=plan.initialised_from,
            started=plan.started,
        )
        if plan.trainer.is_global_zero:
            log.info("%s", result.as_json())
            if plan.out is not None:
                write_json(plan.out, result.as_json())
        return result


main = Evaluate().main
