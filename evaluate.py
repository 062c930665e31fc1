"""Evaluate a checkpoint on a split, or write and check OGB-LSC test submissions.

    python evaluate.py --ckpt runs/qm9_gap-.../checkpoints/best-1000.ckpt --split test --out metrics.json
    python evaluate.py --ckpt runs/mag240m-.../checkpoints/best.ckpt --split test-dev --submission-dir subs
    python evaluate.py --check-submission subs/y_pred_mag240m_test-dev.npz

The checkpoint carries its resolved config; ``--config`` and dotted overrides (``--data.root``)
change it. On CPU the validation metric equals the one logged for the checkpoint in training.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from graphormer_urpe.cli import CONFIG_KEY, GraphormerCLI, log, write_json
from graphormer_urpe.data.sources import DatasetMissing
from graphormer_urpe.submission import SubmissionError, check_submission, write_submission

#: Splits whose labels are hidden: evaluating them writes a submission file.
SUBMISSION_SPLITS = ("test-dev", "test-challenge")


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     add_help=False)
    parser.add_argument("--ckpt", help="checkpoint file (.ckpt)")
    parser.add_argument("--split", default="valid", choices=["valid", "test", *SUBMISSION_SPLITS],
                        help="split to evaluate; test-dev / test-challenge write an OGB-LSC submission")
    parser.add_argument("--out", type=Path, default=None, help="write the metrics to this JSON file")
    parser.add_argument("--submission-dir", type=Path, default=Path("submissions"),
                        help="directory of the submission file written for test-dev / test-challenge")
    parser.add_argument("--check-submission", type=Path, default=None, metavar="FILE",
                        help="only check that FILE is a valid OGB-LSC submission (name, shape, dtype, values)")
    options, rest = parser.parse_known_args(argv)
    if options.check_submission is None and options.ckpt is None:
        parser.error("--ckpt is required (unless --check-submission is given)")
    return options, rest


def embedded_config(ckpt: str) -> str:
    """The YAML config stored in a checkpoint by training."""
    if not Path(ckpt).is_file():
        raise SystemExit(f"error: checkpoint {ckpt} does not exist")
    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=True)
    if CONFIG_KEY not in checkpoint:
        raise SystemExit(f"error: {ckpt} holds no config (not written by train.py); pass --config")
    return checkpoint[CONFIG_KEY]


def main(argv: Sequence[str] | None = None) -> dict:
    """Evaluate; returns the metrics."""
    options, rest = parse_args(sys.argv[1:] if argv is None else argv)
    if options.check_submission is not None:
        try:
            summary = check_submission(options.check_submission)
        except SubmissionError as error:
            log.error("%s", error)
            sys.exit(1)
        log.info("valid submission: %s", summary)
        return summary
    with tempfile.TemporaryDirectory() as tmp:
        if not any(a == "--config" or a.startswith("--config=") for a in rest):
            config = Path(tmp) / "checkpoint_config.yaml"
            config.write_text(embedded_config(options.ckpt))
            rest = ["--config", str(config), *rest]
        cli = GraphormerCLI([*rest, "--logger", "none", "--run_root", tmp])
        try:
            if options.split in SUBMISSION_SPLITS:
                path = write_submission(cli.trainer, cli.model, cli.datamodule, options.split,
                                        options.submission_dir, ckpt_path=options.ckpt)
                metrics = {"submission": str(path), **check_submission(path)}
            else:
                run = cli.trainer.validate if options.split == "valid" else cli.trainer.test
                metrics = run(cli.model, cli.datamodule, ckpt_path=options.ckpt, verbose=False)[0]
        except DatasetMissing as error:
            log.error("%s", error)
            sys.exit(2)
        except SubmissionError as error:
            log.error("%s", error)
            sys.exit(1)
    result = {"checkpoint": options.ckpt, "split": options.split, "metrics": metrics}
    log.info("%s", result)
    if options.out is not None and cli.trainer.is_global_zero:
        write_json(options.out, result)
    return result


if __name__ == "__main__":
    main()
