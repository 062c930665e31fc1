"""Train Graphormer(+URPE) from a YAML config.

    python train.py --config qm9_gap.yaml
    python train.py --config zinc_subset.yaml --model.encoder.attention rpe --trainer.max_steps 200

Fits, then validates and tests the best checkpoint and writes ``metrics.json`` in the run directory.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from graphormer_urpe.cli import GraphormerCLI, log, write_json
from graphormer_urpe.data.sources import DataError, DatasetMissing


def main(args: Sequence[str] | None = None) -> dict:
    """Run one experiment; returns the final metrics."""
    cli = GraphormerCLI(args)
    trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    try:
        trainer.fit(model, datamodule)
    except (DatasetMissing, DataError) as error:
        log.error("%s", error)
        sys.exit(2)
    best = trainer.checkpoint_callback.best_model_path or None
    validation = trainer.validate(model, datamodule, ckpt_path=best, verbose=False)[0]
    if "test" in datamodule.split_sizes:
        test = trainer.test(model, datamodule, ckpt_path=best, verbose=False)[0]
    else:  # e.g. PCQM4Mv2, MAG240M: test targets are hidden
        test = None
        hidden = [name for name in datamodule.split_sizes if name not in ("train", "valid")]
        log.info("no labelled 'test' split; write leaderboard predictions with evaluate.py --split %s "
                 "--submission-dir DIR", "|".join(hidden) or "<split>")
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
