"""Train Graphormer(+URPE) from a YAML config.

    python train.py --config qm9_gap.yaml
    python train.py --config zinc_subset.yaml --model.encoder.attention rpe --trainer.max_steps 200
    python train.py --config qm9_gap.yaml --run_name gap1 --ckpt_path last      # resume run "gap1"
    python train.py --config qm9_gap.yaml --init_from runs/qm9_rpe/checkpoints/last.ckpt  # RPE -> URPE (C = 1)
    python train.py --config smiles_csv_example --init_from runs/qm9_pretrain-.../checkpoints/best-8000.ckpt

Fits, then validates and tests the best checkpoint and writes ``metrics.json`` in the run directory.
Exit codes: 0 done, 2 bad input (missing dataset, unusable checkpoint), 3 non-finite loss,
128 + signal number after a signal stopped the run (``last.ckpt`` written).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from pytorch_lightning.utilities.exceptions import SIGTERMException

from graphormer_urpe.errors import InputError, NonFiniteLoss
from graphormer_urpe.run.callbacks import Preempted
from graphormer_urpe.run.checkpoints import check_checkpoint, resolve_ckpt_path
from graphormer_urpe.run.cli import GraphormerCLI, log, write_json
from graphormer_urpe.run.finetune import initialise

EXIT_BAD_INPUT = 2
EXIT_NON_FINITE = 3


def main(args: Sequence[str] | None = None) -> dict:
    """Run one experiment; returns the final metrics."""
    return fit_and_evaluate(GraphormerCLI(args))


def fit_and_evaluate(cli: GraphormerCLI) -> dict:
    """Fit (or resume) the configured run, then validate and test its best checkpoint."""
    trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    exit_code = 0
    try:
        ckpt_path = resolve_ckpt_path(cli.config["ckpt_path"], cli.checkpoint_dir)
        if ckpt_path is None and any(cli.checkpoint_dir.glob("*.ckpt")) and trainer.is_global_zero:
            log.warning("%s already holds checkpoints from an earlier run; they will be replaced (resume instead "
                        "with --ckpt_path last)", cli.checkpoint_dir)
        if ckpt_path is not None:
            check_checkpoint(ckpt_path, model, model.hparams)
        if cli.initialisation is not None and ckpt_path is None:
            initialise(model, cli.initialisation)
        elif cli.initialisation is not None:
            log.info("resuming from %s: --init_from %s only starts new runs (it decided the architecture)", ckpt_path,
                     cli.config["init_from"])
        trainer.fit(model, datamodule, ckpt_path=ckpt_path)
        best = trainer.checkpoint_callback.best_model_path or None
        validation = trainer.validate(model, datamodule, ckpt_path=best, verbose=False)[0]
        if "test" in datamodule.split_sizes:
            test = trainer.test(model, datamodule, ckpt_path=best, verbose=False)[0]
        else:  # e.g. PCQM4Mv2, MAG240M: test targets are hidden
            test = None
            hidden = [name for name in datamodule.split_sizes if name not in ("train", "valid")]
            log.info("no labelled 'test' split; write leaderboard predictions with evaluate.py --split %s "
                     "--submission-dir DIR", "|".join(hidden) or "<split>")
    except InputError as error:
        log.error("%s", error)
        exit_code = EXIT_BAD_INPUT
    except NonFiniteLoss as error:
        log.error("%s", error)
        exit_code = EXIT_NON_FINITE
    except Preempted as stop:
        if trainer.is_global_zero:
            log.warning("%s", stop)
        exit_code = stop.exit_code
    except SIGTERMException:  # Lightning's handler, outside the training loop (set-up, final evaluation)
        log.warning("SIGTERM received outside training steps; checkpoints are in %s", cli.checkpoint_dir)
        exit_code = 128 + signal.SIGTERM
    finally:
        finish_wandb(cli, exit_code)
    if exit_code:
        sys.exit(exit_code)
    metrics = {"best_checkpoint": best, "global_step": trainer.global_step, "validation": validation, "test": test}
    if trainer.is_global_zero:
        write_json(cli.run_dir / "metrics.json", metrics)
        log.info("validation %s | test %s (best checkpoint %s)", validation, test, best)
        log.info("metrics written to %s", cli.run_dir / "metrics.json")
    return metrics


def finish_wandb(cli: GraphormerCLI, exit_code: int) -> None:
    """Close this process's W&B run (marked preempted after a signal), so the next run starts clean."""
    if not cli.uses_wandb:
        return
    import wandb

    if wandb.run is not None:
        if exit_code > 128:
            wandb.run.mark_preempting()
        wandb.finish(exit_code=exit_code)


if __name__ == "__main__":
    main()
