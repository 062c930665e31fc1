"""``graphormer-urpe evaluate``: a checkpoint's metrics on a split, or OGB-LSC test submissions written and checked.

    graphormer-urpe evaluate --ckpt runs/qm9_gap-.../checkpoints/best-1000.ckpt --split test --out metrics.json
    graphormer-urpe evaluate --ckpt runs/pcqm4mv2-.../checkpoints/last.ckpt --split valid
    graphormer-urpe evaluate --ckpt runs/pcqm4mv2-.../checkpoints/last.ckpt --split test-dev --submission_dir subs/
    graphormer-urpe evaluate --check_submission subs/y_pred_pcqm4m-v2_test-dev.npz --data_root data
    graphormer-urpe evaluate --ckpt runs/mag240m-.../checkpoints/best.ckpt --split test-dev --submission_dir subs/

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

New molecules: ``graphormer-urpe predict`` (:mod:`graphormer_urpe.commands.predict`).

This command parses the command line, checks that every output can be written and that ``--out`` names
no existing file (:func:`check_outputs`), builds the checkpoint's data and model from its config
(:class:`~graphormer_urpe.run.cli.GraphormerCLI`, no run directory), checks the split (:func:`check_split`)
and dispatches. Exit codes (:mod:`graphormer_urpe.commands.exits`): 0 done; 1 an invalid submission
(``--check_submission``, or predictions the leaderboard would refuse); 2 bad input (checkpoint, config, data,
options, a split the data do not have, an output that cannot be written or exists).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from graphormer_urpe.commands.exits import exit_codes
from graphormer_urpe.data.files import unwritable
from graphormer_urpe.data.lsc_formats import MODES, SubmissionFormat
from graphormer_urpe.data.predictable import PredictableData, RunData
from graphormer_urpe.errors import SubmissionError, refuse
from graphormer_urpe.evaluation.ogb import evaluate_split
from graphormer_urpe.evaluation.submission import check_submission_file
from graphormer_urpe.run.callbacks import remove_weight_averaging
from graphormer_urpe.run.checkpoints import check_checkpoint, compare_data, data_identity, embedded_config
from graphormer_urpe.run.cli import GraphormerCLI, configure_logging, log
from graphormer_urpe.run.finetune import describe
from graphormer_urpe.run.ledger import write_json
from graphormer_urpe.tasks.base import INITIALISED_FROM


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="graphormer-urpe evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Any other option (--data.root DIR, --config FILE ...) changes the "
                                            "checkpoint's own config, as train's options do.")
    parser.add_argument("--ckpt", default=None, help="checkpoint file (.ckpt)")
    parser.add_argument("--split", default="valid", choices=["valid", "test", *MODES], help="split to evaluate")
    parser.add_argument("--out", type=Path, default=None, help="write the metrics to this JSON file")
    parser.add_argument("--submission_dir", type=Path, default=None,
                        help="directory for the OGB-LSC submission file of --split test-dev/test-challenge")
    parser.add_argument(
        "--predictions",
        type=Path,
        default=None,
        metavar="FILE",
        help="also save the split's rows and predictions (NaN for skipped rows) to this .npz file",
    )
    parser.add_argument("--check_submission", type=Path, default=None, metavar="FILE",
                        help="only check an existing submission file (name, shape, dtype, finite values)")
    parser.add_argument(
        "--allow_other_data",
        action="store_true",
        help="evaluate even if the data differ from those the checkpoint was trained on (the result "
             "then says so)",
    )
    parser.add_argument("--data_root", type=Path, default=Path("data"),
                        help="dataset root holding <dataset>/split_dict.pt, for --check_submission (without it: "
                             "ogb's official test split sizes)")
    return parser.parse_known_args(argv)


def check_outputs(options: argparse.Namespace) -> None:
    """Refuse (exit code 2) before any work an output that cannot be written, or ``--out`` over any existing file
    (nothing is overwritten)."""
    for flag, path, is_dir in (("--out", options.out, False), ("--predictions", options.predictions, False),
                               ("--submission_dir", options.submission_dir, True)):
        if path is None:
            continue
        if not is_dir and path.is_dir():
            refuse(f"{flag} {path} is a directory; name the file to write")
        if (read_only := unwritable(path if is_dir else path.parent)) is not None:
            refuse(f"{flag} {path}: {read_only} is not writable")
    if options.out is not None and options.out.exists():
        refuse(f"--out {options.out} exists; choose another output path (nothing is overwritten)")


def check_split(options: argparse.Namespace, data: RunData) -> SubmissionFormat | None:
    """Refuse (exit code 2) a split that ``data`` does not have, or a hidden test split without a place for its
    predictions; returns the OGB-LSC submission format of ``data`` (None: not an OGB-LSC dataset)."""
    fmt = data.spec.submission if isinstance(data, PredictableData) else None
    if fmt is None:
        if options.split in MODES:
            refuse(
                f"{options.ckpt}'s data have no split '{options.split}': test-dev and test-challenge are the "
                "hidden test splits of OGB-LSC datasets (PCQM4Mv2, MAG240M); evaluate it with --split valid or test"
            )
        if options.predictions is not None:
            refuse("--predictions is available for OGB-LSC datasets (PCQM4Mv2, MAG240M)")
        return None
    if options.split not in fmt.splits:
        refuse(f"{fmt.dataset} has no split '{options.split}'; its splits are {', '.join(fmt.splits)}")
    if options.split in MODES and options.submission_dir is None and options.predictions is None:
        refuse(f"--split {options.split} has hidden targets: pass --submission_dir DIR to write a leaderboard "
               "submission (or --predictions FILE)")
    return fmt


def main(argv: Sequence[str] | None = None) -> dict:
    """Evaluate, or write or check a submission; returns what was measured or written."""
    started = time.perf_counter()
    options, rest = parse_args(sys.argv[1:] if argv is None else argv)  # --help prints and exits first
    configure_logging()
    check_outputs(options)
    with exit_codes():
        if options.check_submission is not None:
            return check_submission(options.check_submission, options.data_root)
        if options.ckpt is None:
            refuse("--ckpt is required (or --check_submission FILE)")
        if options.submission_dir is not None and options.split not in MODES:
            refuse(f"--submission_dir writes test-dev or test-challenge submissions, not '{options.split}'")
        return evaluate(options, rest, started)


def check_submission(path: Path, data_root: Path) -> dict:
    """``--check_submission FILE``: the file as the leaderboard would check it (:class:`SubmissionError`)."""
    try:
        return check_submission_file(path, data_root)
    except RuntimeError as error:  # the OGB-LSC evaluator's own refusals
        raise SubmissionError(str(error)) from error


def evaluate(options: argparse.Namespace, rest: list[str], started: float) -> dict:
    """``--ckpt CKPT --split SPLIT``: the checkpoint's model and data (its config, or ``--config``, with the
    overrides in ``rest``) on one split: its metrics, or an OGB-LSC split's predictions or submission."""
    own_config = any(a == "--config" or a.startswith("--config=") for a in rest)
    # the checkpoint's config holds the architecture --init_from gave the run; its weights are --ckpt's
    cli = GraphormerCLI(rest, config_text=None if own_config else embedded_config(options.ckpt))
    data = cli.datamodule
    remove_weight_averaging(cli.trainer)  # the checkpoint holds the averaged weights; nothing averages here
    if not isinstance(data, RunData):
        refuse(f"{type(data).__name__} does not give what evaluation needs of its data (identity())")
    fmt = check_split(options, data)
    checkpoint = check_checkpoint(options.ckpt, cli.model, cli.model.hparams)
    data_check = compare_data(options.ckpt, checkpoint, data_identity(data), options.allow_other_data)
    if fmt is not None:
        result = evaluate_split(cli.trainer, cli.model, data, options.split, options.ckpt,
                                submission_dir=options.submission_dir, predictions_file=options.predictions,
                                started=started, data_check=data_check)
    else:
        run = cli.trainer.validate if options.split == "valid" else cli.trainer.test
        metrics = run(cli.model, data, ckpt_path=options.ckpt, verbose=False)[0]
        result = {"checkpoint": options.ckpt, "split": options.split, "metrics": metrics}
    result.update(data_check)
    if (initialised := checkpoint.get(INITIALISED_FROM)) is not None:
        result["initialised_from"] = describe(initialised)
    if cli.trainer.is_global_zero:
        log.info("%s", result)
        if options.out is not None:
            write_json(options.out, result)
    return result
