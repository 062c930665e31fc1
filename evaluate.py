"""Evaluate a checkpoint on a split, or write and check OGB-LSC test submissions.

    python evaluate.py --ckpt runs/qm9_gap-.../checkpoints/best-1000.ckpt --split test --out metrics.json
    python evaluate.py --ckpt runs/pcqm4mv2-.../checkpoints/last.ckpt --split valid
    python evaluate.py --ckpt runs/pcqm4mv2-.../checkpoints/last.ckpt --split test-dev --submission-dir subs/
    python evaluate.py --check-submission subs/y_pred_pcqm4m-v2_test-dev.npz --data-root data
    python evaluate.py --ckpt runs/mag240m-.../checkpoints/best.ckpt --split test-dev --submission-dir subs/
    python evaluate.py --ckpt runs/smiles_csv_example-.../checkpoints/best-600.ckpt --predict new.csv --out preds.csv

The checkpoint carries its resolved config; ``--config`` and dotted overrides (``--data.root``,
``--trainer.devices 8 --trainer.strategy ddp``) change it. On CPU the validation metric equals the
one logged for the checkpoint in training. The checkpoint also records the identity of its data
(:mod:`graphormer_urpe.run.identity`: table SHA-1, split options, cache key); evaluation on data
that differ (an edited table, another split) stops with exit code 2 naming what differs, unless
``--allow-other-data``, and then the output and ``--out`` say so (``same_data_as_training``). The
result names where the run's weights came from (``initialised_from``) when it started from another
checkpoint (``train.py --init_from``).

For OGB-LSC datasets (PCQM4Mv2, MAG240M) every split is predicted with ``trainer.predict`` and
gathered by example (:func:`~graphormer_urpe.evaluation.splits.predict_split`, the one prediction
path of both), so any number of processes gives the same predictions in the split's order.
``--split valid`` prints the metric of ogb's evaluator (MAE, accuracy); a hidden test split
(``test-dev``, ``test-challenge``) is written with ogb's ``save_test_submission`` into
``--submission-dir``, read back and checked, with a log (``*.log.json``) listing every row that
could not be featurised and was given the training mean.

``--predict FILE --out FILE.csv`` predicts new molecules (a CSV or Parquet table with a SMILES
column) with a checkpoint trained on any molecular dataset, one output row per input row in file
order, with an empty prediction and the reason for rows that could not be featurised
(:mod:`graphormer_urpe.evaluation.new_molecules`).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from graphormer_urpe.data.lsc_formats import FORMATS, MODES, SubmissionFormat
from graphormer_urpe.data.split_rows import PredictableData
from graphormer_urpe.errors import CheckpointError, InputError, SubmissionError
from graphormer_urpe.evaluation.new_molecules import predict_table
from graphormer_urpe.evaluation.splits import SplitPredictions, predict_split
from graphormer_urpe.evaluation.submission import check_submission, write_submission
from graphormer_urpe.run.checkpoints import check_checkpoint, load_checkpoint
from graphormer_urpe.run.cli import (
    CONFIG_KEY,
    GraphormerCLI,
    configure_logging,
    git_commit,
    log,
    package_versions,
    resolve_config_paths,
    write_json,
)
from graphormer_urpe.run.finetune import describe
from graphormer_urpe.run.identity import DATA_IDENTITY_KEY, differences
from graphormer_urpe.tasks.base import INITIALISED_FROM
from graphormer_urpe.tasks.classification import predicted_classes
from graphormer_urpe.tasks.compat import migrate_config

#: Skipped rows named one by one in log messages (the submission log lists all of them).
SHOWN_ROWS = 10


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     add_help=False)
    parser.add_argument("--ckpt", default=None, help="checkpoint file (.ckpt)")
    parser.add_argument("--split", default="valid", choices=["valid", "test", *MODES], help="split to evaluate")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the metrics to this JSON file (with --predict: the predictions' CSV file)")
    parser.add_argument("--predict", type=Path, default=None, metavar="TABLE",
                        help="predict the molecules of this CSV or Parquet table (one SMILES column) into --out")
    parser.add_argument("--smiles-column", default=None,
                        help="with --predict: the SMILES column of TABLE (default: the training table's, or 'smiles')")
    parser.add_argument("--submission-dir", type=Path, default=None,
                        help="directory for the OGB-LSC submission file of --split test-dev/test-challenge")
    parser.add_argument("--predictions", type=Path, default=None, metavar="FILE",
                        help="also save the split's rows and predictions (NaN for skipped rows) to this .npz file")
    parser.add_argument("--check-submission", type=Path, default=None, metavar="FILE",
                        help="only check an existing submission file (name, shape, dtype, finite values)")
    parser.add_argument("--allow-other-data", action="store_true",
                        help="evaluate even if the data differ from those the checkpoint was trained on (the result "
                             "then says so)")
    parser.add_argument("--data-root", type=Path, default=Path("data"),
                        help="dataset root holding <dataset>/split_dict.pt, for --check-submission (without it: "
                             "ogb's official test split sizes)")
    return parser.parse_known_args(argv)


def embedded_config(ckpt: str) -> str:
    """The YAML config stored in a checkpoint by training (one of an older version read in today's layout)."""
    checkpoint = load_checkpoint(ckpt)
    if CONFIG_KEY not in checkpoint:
        raise SystemExit(f"error: {ckpt} holds no config (not written by train.py); pass --config")
    return migrate_config(checkpoint[CONFIG_KEY])


def check_submission_file(path: Path, data_root: Path) -> dict:
    """Check an existing submission against the split sizes in ``data_root`` (ogb's official sizes when
    the dataset is not there); print one line when it is valid, exit 1 saying what is wrong otherwise."""
    configure_logging()
    fmt = next((f for name, f in FORMATS.items() if path.name.startswith(f"y_pred_{name}_")), None)
    if fmt is None:
        raise SystemExit(f"error: {path}: not a submission file name (expected y_pred_<dataset>_<mode>.npz for "
                         f"a dataset in {sorted(FORMATS)})")
    mode = next((m for m in MODES if path.name == fmt.filename(m)), None)
    sizes_from = "split_dict.pt"
    try:
        if mode is None:
            raise SubmissionError(f"{path}: the file must be named {' or '.join(fmt.filename(m) for m in MODES)}")
        try:
            expected = fmt.split_size(data_root, mode)
        except FileNotFoundError as error:
            expected, sizes_from = fmt.official_sizes[mode], "official"
            log.info("the expected row count comes from the dataset's split file, and %s: checking against the "
                     "official %s %s size instead, %d rows (pass --data-root DIR with DIR/%s/split_dict.pt for "
                     "another release)", error, fmt.dataset, mode, expected, fmt.directory or fmt.dataset)
        y_pred = check_submission(path, expected, fmt, mode)
    except (SubmissionError, RuntimeError) as error:
        log.error("%s", error)
        raise SystemExit(1) from error
    against = "ogb's official split size" if sizes_from == "official" else f"the split file under {data_root}"
    print(f"{path} is a valid {fmt.dataset} {mode} submission: {len(y_pred)} finite {y_pred.dtype} predictions, "
          f"as many rows as {against}", flush=True)
    return {"file": str(path), "dataset": fmt.dataset, "mode": mode, "rows": len(y_pred), "valid": True,
            "expected_rows_from": sizes_from}


def main(argv: Sequence[str] | None = None) -> dict:
    """Evaluate, or write or check a submission; returns what was measured or written."""
    started = time.perf_counter()
    # evaluating in a temporary run directory, Lightning notes on every checkpoint that its run's is another
    warnings.filterwarnings("ignore", message="The dirpath has changed from", category=UserWarning)
    options, rest = parse_args(sys.argv[1:] if argv is None else argv)
    if options.check_submission is not None:
        return check_submission_file(options.check_submission, options.data_root)
    if options.ckpt is None:
        raise SystemExit("error: --ckpt is required (or --check-submission FILE)")
    if options.predict is not None:
        return predict_file(options, rest)
    if options.submission_dir is not None and options.split not in MODES:
        raise SystemExit("error: --submission-dir writes test-dev or test-challenge submissions, "
                         f"not '{options.split}'")
    if options.split in MODES and options.submission_dir is None and options.predictions is None:
        raise SystemExit(f"error: --split {options.split} has hidden targets: pass --submission-dir DIR to write a "
                         "leaderboard submission (or --predictions FILE)")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if not any(a == "--config" or a.startswith("--config=") for a in rest):
                config = Path(tmp) / "checkpoint_config.yaml"
                config.write_text(embedded_config(options.ckpt))
                rest = ["--config", str(config), *rest]
            # the checkpoint's config holds the architecture --init_from gave the run; its weights are --ckpt's
            cli = GraphormerCLI([*rest, "--logger", "none", "--run_root", tmp, "--init_from", "null"])
            checkpoint = check_checkpoint(options.ckpt, cli.model, cli.model.hparams)
            data_check = compare_data(options, checkpoint, cli)
        except InputError as error:
            log.error("%s", error)
            sys.exit(2)
        fmt = cli.datamodule.spec.submission if isinstance(cli.datamodule, PredictableData) else None
        if options.predictions is not None and fmt is None:
            raise SystemExit("error: --predictions is available for OGB-LSC datasets (PCQM4Mv2, MAG240M)")
        try:
            if fmt is not None:
                result = evaluate_with_ogb(cli, options, started, data_check)
            elif options.split in MODES:
                raise SystemExit(f"error: {type(cli.datamodule).__name__} has no hidden test split '{options.split}'")
            else:
                run = cli.trainer.validate if options.split == "valid" else cli.trainer.test
                metrics = run(cli.model, cli.datamodule, ckpt_path=options.ckpt, verbose=False)[0]
                result = {"checkpoint": options.ckpt, "split": options.split, "metrics": metrics}
        except InputError as error:
            log.error("%s", error)
            sys.exit(2)
        except SubmissionError as error:
            log.error("%s", error)
            sys.exit(1)
    result.update(data_check)
    if (initialised := checkpoint.get(INITIALISED_FROM)) is not None:
        result["initialised_from"] = describe(initialised)
    if cli.trainer.is_global_zero:
        log.info("%s", result)
        if options.out is not None:
            write_json(options.out, result)
    return result


def compare_data(options: argparse.Namespace, checkpoint: dict, cli: GraphormerCLI) -> dict:
    """Compare the data this evaluation rebuilt with the checkpoint's; stop with a :class:`CheckpointError`
    when they differ, unless ``--allow-other-data``. Returns what the result records about it:
    ``same_data_as_training`` (None when the checkpoint records no data) and the differences."""
    recorded = checkpoint.get(DATA_IDENTITY_KEY)
    if recorded is None:
        log.warning("%s records no identity of its data (written by an earlier version): the data are not "
                    "compared", options.ckpt)
        return {"same_data_as_training": None}
    differing = differences(recorded, cli.data_identity(), "checkpoint", "now")
    if not differing:
        return {"same_data_as_training": True}
    if not options.allow_other_data:
        raise CheckpointError(f"{options.ckpt} was trained on other data than these: {differing}; evaluate on the "
                              "checkpoint's data, or pass --allow-other-data to evaluate on these anyway")
    log.warning("evaluating on OTHER data than %s was trained on (--allow-other-data): %s", options.ckpt, differing)
    return {"same_data_as_training": False, "data_differences": differing}


def predict_file(options: argparse.Namespace, rest: list[str]) -> dict:
    """``--predict TABLE --out FILE.csv``: predictions for new molecules, in the table's row order."""
    configure_logging()
    if options.out is None:
        raise SystemExit("error: --predict TABLE needs --out FILE.csv for the predictions")
    config_args = resolve_config_paths(rest)
    if len(config_args) not in (0, 2) or (config_args and config_args[0] != "--config"):
        raise SystemExit(f"error: with --predict, only --config FILE may be added to --ckpt, --out, --smiles-column; "
                         f"got {' '.join(rest)}")
    config_yaml = Path(config_args[1]).read_text() if config_args else embedded_config(options.ckpt)
    try:
        frame = predict_table(Path(options.ckpt), options.predict, options.out, config_yaml, options.smiles_column)
    except InputError as error:
        log.error("%s", error)
        sys.exit(2)
    failed = int((frame["error"] != "").sum())
    return {"checkpoint": options.ckpt, "table": str(options.predict), "out": str(options.out), "rows": len(frame),
            "predicted": len(frame) - failed, "failed": failed}


def evaluate_with_ogb(cli: GraphormerCLI, options: argparse.Namespace, started: float, data_check: dict) -> dict:
    """Predict ``options.split`` in its order, then score it with ogb's evaluator or write a submission
    (whose log records ``data_check``, :func:`compare_data`)."""
    datamodule: PredictableData = cli.datamodule
    fmt = datamodule.spec.submission
    if options.split not in fmt.splits:
        raise SystemExit(f"error: {fmt.dataset} has no split '{options.split}'; its splits are {', '.join(fmt.splits)}")
    log.info("predicting %s '%s' with %s on %d process(es)", fmt.dataset, options.split, options.ckpt,
             cli.trainer.world_size)
    inference_started = time.perf_counter()
    predictions = predict_split(cli.trainer, cli.model, datamodule, options.split, options.ckpt)
    if not cli.trainer.is_global_zero:
        return {"checkpoint": options.ckpt, "split": options.split}
    log.info("'%s': %d rows, %d predicted, %d skipped while preprocessing", options.split, len(predictions.rows),
             int((predictions.graphs >= 0).sum()), len(predictions.skipped))
    preprocessing = datamodule.preprocessing_seconds
    inference = time.perf_counter() - inference_started - preprocessing
    if predictions.duplicates:
        log.info("%d repeated predictions (sampler padding across processes) dropped", predictions.duplicates)
    if fmt.num_classes is not None:  # class probabilities (R, C) -> labels (R, 1), NaN rows stay NaN
        labels = predicted_classes(predictions.prediction).astype(np.float32)
        labels[np.isnan(predictions.prediction).any(axis=1)] = np.nan
        predictions = dataclasses.replace(predictions, prediction=labels[:, None])
    if predictions.prediction.shape[1] != 1:
        raise SubmissionError(f"the model predicts {predictions.prediction.shape[1]} targets; ogb expects one")
    if options.predictions is not None:
        options.predictions.parent.mkdir(parents=True, exist_ok=True)
        np.savez(options.predictions, rows=predictions.rows, prediction=predictions.prediction[:, 0])
        log.info("predictions of %d '%s' rows saved to %s", len(predictions.rows), options.split, options.predictions)
    if options.split not in MODES:
        return score(predictions, fmt, options.ckpt)
    if options.submission_dir is None:
        return {"checkpoint": options.ckpt, "split": options.split, "predictions": str(options.predictions)}
    return submit(predictions, cli, options, started, preprocessing, inference, data_check)


def score(predictions: SplitPredictions, fmt: SubmissionFormat, ckpt: str) -> dict:
    """ogb's metric on the rows of a labelled split that have an example and a target."""
    known = (predictions.graphs >= 0) & np.isfinite(predictions.target[:, 0])
    unlabelled = int(((predictions.graphs >= 0) & ~known).sum())
    if unlabelled:
        log.warning("%d rows of '%s' have no target and are not scored", unlabelled, predictions.split)
    if predictions.skipped:
        log.warning("%d rows of '%s' could not be preprocessed and are not scored (first: %s)",
                    len(predictions.skipped), predictions.split, list(predictions.skipped.items())[:SHOWN_ROWS])
    evaluator = fmt.evaluator()
    metrics = evaluator.eval({"y_true": predictions.target[known, 0], "y_pred": predictions.prediction[known, 0]})
    metrics = {name: float(value) for name, value in metrics.items()}
    summary = ", ".join(f"{name.upper()} {value:.6f}" for name, value in metrics.items())
    print(f"{fmt.dataset} {predictions.split}: {summary} ({type(evaluator).__name__}, {int(known.sum()):,} "
          f"{fmt.examples})")
    return {"checkpoint": ckpt, "split": predictions.split, "metrics": metrics, "evaluator": type(evaluator).__name__,
            "scored": int(known.sum()), "skipped": len(predictions.skipped)}


def submit(predictions: SplitPredictions, cli: GraphormerCLI, options: argparse.Namespace, started: float,
           preprocessing: float, inference: float, data_check: dict) -> dict:
    """Fill skipped rows with the training mean, write the submission and its log (with ``data_check``,
    whether the data are the checkpoint's), say how long it took."""
    datamodule: PredictableData = cli.datamodule
    fmt, mode = datamodule.spec.submission, options.split
    expected = fmt.split_size(datamodule.root, mode)
    if expected != len(predictions.rows):
        raise SubmissionError(f"{datamodule.root / (fmt.directory or fmt.dataset) / 'split_dict.pt'} has {expected} "
                              f"{mode} rows but {datamodule.cache_dir} was built with {len(predictions.rows)}; "
                              "delete it")
    y_pred = predictions.prediction[:, 0].copy()
    filled = np.flatnonzero(np.isnan(y_pred))
    train_mean = None
    if filled.size:  # only cached graph datasets skip rows (MAG240M has an example for every paper)
        train_mean = float(datamodule.target_statistics()[0][0])
        y_pred[filled] = train_mean
        log.warning("%d of %d %s rows could not be featurised; they are predicted as the training mean %.6f "
                    "(first: %s; all are listed in the submission log)", filled.size, len(y_pred), mode, train_mean,
                    [(int(predictions.rows[p]), predictions.skipped[int(predictions.rows[p])])
                     for p in filled[:SHOWN_ROWS]])
    if fmt.num_classes is not None:
        y_pred = y_pred.astype(np.int64)  # class labels, exact in float32 (gathered as float32)
    writing_started = time.perf_counter()
    path = write_submission(y_pred, options.submission_dir, mode, expected, fmt)
    now = time.perf_counter()
    seconds = {
        "total": round(now - started, 3),
        "preprocessing": round(preprocessing, 3),
        "inference": round(inference, 3),
        "writing_and_checking": round(now - writing_started, 3),
    }
    record = {
        "file": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "dataset": fmt.dataset,
        "mode": mode,
        "rows": len(y_pred),
        "checkpoint": options.ckpt,
        "cache": str(datamodule.cache_dir),
        "filled_with_train_mean": [{"row": int(row), "position": int(p), "reason": predictions.skipped[int(row)]}
                                   for p, row in zip(filled, predictions.rows[filled])],
        "train_mean": train_mean,
        "seconds": seconds,
        "preprocessing_cached": preprocessing == 0.0,
        "devices": cli.trainer.world_size,
        "git_commit": git_commit(),
        "versions": package_versions(),
        **data_check,
    }
    write_json(path.with_suffix(".log.json"), record)
    prepared = "found built" if preprocessing == 0.0 else f"built now, {preprocessing:.1f} s"
    log.info("wrote %s (%d rows, %d filled with the training mean), checked after reading it back", path,
             len(y_pred), filled.size)
    log.info("wall time %s -> file: %.1f s (preprocessed files: %s; inference %.1f s on %d process(es); writing "
             "and checking %.1f s); log: %s", "SMILES" if fmt.num_classes is None else "papers", seconds["total"],
             prepared, inference, cli.trainer.world_size, seconds["writing_and_checking"],
             path.with_suffix(".log.json"))
    return record


if __name__ == "__main__":
    main()
