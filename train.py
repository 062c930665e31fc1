"""Train Graphormer(+URPE) from a YAML config.

    python train.py --config qm9_gap.yaml
    python train.py --config zinc_subset.yaml --model.encoder.attention rpe --trainer.max_steps 200
    python train.py --config qm9_gap.yaml --init_from runs/qm9_gap-rpe/checkpoints/best-1500.ckpt  # RPE -> URPE

Fits, then validates and tests the best checkpoint and writes ``metrics.json`` in the run directory.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from graphormer_urpe.cli import GraphormerCLI, log, write_json
from graphormer_urpe.data.sources import DatasetMissing
from graphormer_urpe.finetune import init_from_checkpoint


def main(args: Sequence[str] | None = None) -> dict:
    """Run one experiment; returns the final metrics."""
    cli = GraphormerCLI(args)
    trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    if cli.config.get("init_from"):
        init_from_checkpoint(model, cli.config["init_from"])
    try:
        trainer.fit(model, datamodule)
    except DatasetMissing as error:
        log.error("%s", error)
        sys.exit(2)
    best = trainer.checkpoint_callback.best_model_path or None
    validation = trainer.validate(model, datamodule, ckpt_path=best, verbose=False)[0]
    test = trainer.test(model, datamodule, ckpt_path=best, verbose=False)[0]
    metrics = {
        "best_checkpoint": best,
        "global_step": trainer.global_step,
        "validation": validation,
        "test": test,
    }
    if trainer.is_global_zero:
        write_json(cli.run_dir / "metrics.json", metrics)
        log.info("validation %s | test %s (best checkpoint %s)", validation, test, best)
        log.info("metrics written to %s", cli.run_dir / "metrics.json")
    return metrics


if __name__ == "__main__":
    main()
