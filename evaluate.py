"""Evaluate a checkpoint on a split.

    python evaluate.py --ckpt runs/qm9_gap-.../checkpoints/best-1000.ckpt --split test --out metrics.json

The checkpoint carries its resolved config; ``--config`` and dotted overrides (``--data.root``)
change it. On CPU the validation metric equals the one logged for the checkpoint in training.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from graphormer_urpe.checkpoints import CheckpointError, check_checkpoint, load_checkpoint
from graphormer_urpe.cli import CONFIG_KEY, GraphormerCLI, log, write_json
from graphormer_urpe.data.sources import DatasetMissing


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     add_help=False)
    parser.add_argument("--ckpt", required=True, help="checkpoint file (.ckpt)")
    parser.add_argument("--split", default="valid", choices=["valid", "test"], help="split to evaluate")
    parser.add_argument("--out", type=Path, default=None, help="write the metrics to this JSON file")
    return parser.parse_known_args(argv)


def embedded_config(ckpt: str) -> str:
    """The YAML config stored in a checkpoint by training."""
    checkpoint = load_checkpoint(ckpt)
    if CONFIG_KEY not in checkpoint:
        raise SystemExit(f"error: {ckpt} holds no config (not written by train.py); pass --config")
    return checkpoint[CONFIG_KEY]


def main(argv: Sequence[str] | None = None) -> dict:
    """Evaluate; returns the metrics."""
    options, rest = parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if not any(a == "--config" or a.startswith("--config=") for a in rest):
                config = Path(tmp) / "checkpoint_config.yaml"
                config.write_text(embedded_config(options.ckpt))
                rest = ["--config", str(config), *rest]
            cli = GraphormerCLI([*rest, "--logger", "none", "--run_root", tmp])
            check_checkpoint(options.ckpt, cli.model, cli.model.hparams)
            run = cli.trainer.validate if options.split == "valid" else cli.trainer.test
            metrics = run(cli.model, cli.datamodule, ckpt_path=options.ckpt, verbose=False)[0]
        except (DatasetMissing, CheckpointError) as error:
            log.error("%s", error)
            sys.exit(2)
    result = {"checkpoint": options.ckpt, "split": options.split, "metrics": metrics}
    log.info("%s", result)
    if options.out is not None and cli.trainer.is_global_zero:
        write_json(options.out, result)
    return result


if __name__ == "__main__":
    main()
