"""Train Graphormer(+URPE) from a YAML config.

    python train.py --config qm9_gap.yaml
    python train.py --config zinc_subset.yaml --model.encoder.attention rpe --trainer.max_steps 200
    python train.py --config qm9_gap.yaml --run_name gap1 --ckpt_path last      # resume or extend run "gap1"
    python train.py --config qm9_gap.yaml --run_name gap1 --ckpt_path auto      # resume if possible, else start
    python train.py --config qm9_gap.yaml --init_from runs/qm9_rpe/checkpoints/last.ckpt  # RPE -> URPE (C = 1)
    python train.py --config smiles_csv_example --init_from runs/qm9_pretrain-.../checkpoints/best-8000.ckpt

Fits, then validates and tests the best checkpoint and writes ``metrics.json`` in the run directory.
A new run gets a new directory; every start in a run directory (resume, extension) appends a segment
to its record and its metrics log (:mod:`graphormer_urpe.run.ledger`). A resume is checked before any
file is written: the checkpoint must fit the model, come from the same data and the same batch size.
Exit codes: 0 done, 2 bad input (missing dataset, unusable checkpoint, a run directory that cannot be
used so), 3 non-finite loss, 128 + signal number after a signal stopped the run (``last.ckpt``
written): 143 SIGTERM, 138 SIGUSR1, 130 Ctrl-C (the first press finishes the optimiser step and
writes ``last.ckpt``; a second press stops at once).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

import pytorch_lightning as pl
import yaml
from pytorch_lightning.utilities.exceptions import SIGTERMException

from graphormer_urpe.data.loaders import resume_problem
from graphormer_urpe.errors import EXIT_BAD_INPUT, CheckpointError, ConfigError, InputError, NonFiniteLoss, shown
from graphormer_urpe.run.callbacks import Preempted
from graphormer_urpe.run.checkpoints import CONFIG_KEY, check_checkpoint, saved_loader_states
from graphormer_urpe.run.cli import GraphormerCLI, launcher_run_id, log
from graphormer_urpe.run.finetune import initialise
from graphormer_urpe.run.identity import DATA_IDENTITY_KEY, config_identity, differences
from graphormer_urpe.run.ledger import CONFIG_FILE, RunDirError
from graphormer_urpe.run.records import write_json

EXIT_NON_FINITE = 3
EXIT_INTERRUPTED = 128 + signal.SIGINT


def main(args: Sequence[str] | None = None) -> dict:
    """Run one experiment; returns the final metrics."""
    try:
        cli = GraphormerCLI(args)
    except KeyboardInterrupt:
        log.warning("interrupted (Ctrl-C) while setting up; nothing was trained")
        sys.exit(EXIT_INTERRUPTED)
    return fit_and_evaluate(cli)


def fit_and_evaluate(cli: GraphormerCLI) -> dict:
    """Fit (or resume) the configured run, then validate and test its best checkpoint."""
    exit_code, interrupted = 0, False
    try:
        return fit_and_test(cli)
    except InputError as error:
        log.error("%s", error)
        exit_code = EXIT_BAD_INPUT
    except NonFiniteLoss as error:
        log.error("%s", error)
        exit_code = EXIT_NON_FINITE
    except Preempted as stop:
        if cli.trainer.is_global_zero:
            log.warning("%s", stop)
        exit_code = stop.exit_code
    except SIGTERMException:  # Lightning's handler, outside the training loop (set-up, final evaluation)
        log.warning("SIGTERM received outside training steps; checkpoints are in %s", cli.checkpoint_dir)
        exit_code = 128 + signal.SIGTERM
    except KeyboardInterrupt:  # outside Lightning's calls
        exit_code, interrupted = EXIT_INTERRUPTED, True
    except SystemExit as stop:
        if not isinstance(stop.__context__, KeyboardInterrupt):
            raise
        exit_code, interrupted = EXIT_INTERRUPTED, True  # Lightning stops on a KeyboardInterrupt with exit code 1
    finally:
        finish_wandb(cli, exit_code)
        cli.run_directory.release()
    if interrupted and cli.trainer.is_global_zero:  # a second Ctrl-C in training, or one outside it
        last = cli.run_directory.last_checkpoint
        log.warning("interrupted (Ctrl-C) after step %d; %s", cli.trainer.global_step,
                    f"continue from {last} with --run_name {cli.run_dir.name} --ckpt_path last" if last.is_file()
                    else "no checkpoint was written")
    sys.exit(exit_code)


def fit_and_test(cli: GraphormerCLI) -> dict:
    """Check how this start may use its run directory, fit, then validate and test the best checkpoint."""
    trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    launch = launcher_run_id() if trainer.world_size > 1 else None  # each process started by SLURM or torchrun
    start = cli.run_directory.open(cli.config["ckpt_path"], writer=trainer.is_global_zero, launch=launch)
    if start.checkpoint is not None:
        check_resume(cli, start.checkpoint)
    elif start.earlier_segments:
        check_same_run(cli)
    if cli.initialisation is not None and start.checkpoint is None:
        initialise(model, cli.initialisation)
    elif cli.initialisation is not None:
        log.info("resuming from %s: --init_from %s only starts new runs (it decided the architecture)",
                 start.checkpoint, cli.config["init_from"])
    if trainer.is_global_zero:
        warn_if_never_validated(trainer)
    trainer.fit(model, datamodule, ckpt_path=start.checkpoint)
    best = trainer.checkpoint_callback.best_model_path or None
    # no result (None) when no batch is evaluated: trainer.limit_val_batches (limit_test_batches) 0
    validation = next(iter(trainer.validate(model, datamodule, ckpt_path=best, verbose=False)), None)
    if "test" in datamodule.split_sizes:
        test = next(iter(trainer.test(model, datamodule, ckpt_path=best, verbose=False)), None)
    else:  # e.g. PCQM4Mv2, MAG240M: test targets are hidden
        test = None
        hidden = [name for name in datamodule.split_sizes if name not in ("train", "valid")]
        log.info("no labelled 'test' split; write leaderboard predictions with evaluate.py --split %s "
                 "--submission-dir DIR", "|".join(hidden) or "<split>")
    metrics = {"best_checkpoint": best, "global_step": trainer.global_step, "validation": validation, "test": test}
    if trainer.is_global_zero:
        write_json(cli.run_dir / "metrics.json", metrics)
        log.info("validation %s | test %s (best checkpoint %s)", validation, test, best)
        log.info("metrics written to %s", cli.run_dir / "metrics.json")
    return metrics


#: Options a resume takes from the checkpoint (the optimiser's state, the random state) rather than from the
#: command line: one that differs from the checkpoint's would be recorded but not used.
RESUMED_FROM_THE_CHECKPOINT = ("model.init_args.optim.lr", "model.init_args.optim.weight_decay",
                               "model.init_args.optim.adam_eps", "seed_everything")


def check_resume(cli: GraphormerCLI, ckpt_path: str) -> None:
    """Stop (:class:`CheckpointError`, :class:`ConfigError`) unless ``ckpt_path`` fits the model, was
    trained on the same data with the options a resume takes from it (:data:`RESUMED_FROM_THE_CHECKPOINT`),
    continues in the same global batches and has steps left to reach or evaluate (``trainer.max_steps``
    not below its step); then tell the run record where this segment starts."""
    checkpoint = check_checkpoint(ckpt_path, cli.model, cli.model.hparams)
    step, max_steps = int(checkpoint["global_step"]), cli.trainer.max_steps
    if 0 <= max_steps < step:
        raise ConfigError("trainer.max_steps", max_steps, f"is below the step of {ckpt_path} ({step}): a resume "
                          f"continues a run and cannot shorten it; pass at least {step} ({step} evaluates it again), "
                          "or start a new run")
    if CONFIG_KEY in checkpoint:
        trained, now = yaml.safe_load(checkpoint[CONFIG_KEY]), yaml.safe_load(cli.config_yaml)
        for key in RESUMED_FROM_THE_CHECKPOINT:
            old, new = _dotted(trained, key), _dotted(now, key)
            if old != new and not (key == "seed_everything" and cli.seed_drawn):
                raise ConfigError(key.replace("init_args.", ""), new, f"differs from {ckpt_path}'s {shown(old)}, "
                                  "which a resume continues with (optimiser and random state); resume with "
                                  f"{shown(old)}, or start a new run from its weights with --init_from {ckpt_path}")
    recorded = checkpoint.get(DATA_IDENTITY_KEY)
    if recorded is None:
        log.warning("%s records no identity of its data (written by an earlier version): the data are not "
                    "compared", ckpt_path)
    elif differing := differences(recorded, cli.data_identity(), "checkpoint", "now"):
        raise CheckpointError(f"{ckpt_path} was trained on other data than this run has: {differing}; a resume "
                              "continues on its run's data (start a new run, or take the weights with --init_from)")
    datamodule = cli.datamodule
    for state in saved_loader_states(checkpoint):
        problem = resume_problem(state, datamodule.batch_size, getattr(datamodule, "bucket_window", 0))
        if problem is not None:
            raise CheckpointError(f"{ckpt_path}: {problem}")
    cli.run_record.resuming(ckpt_path, step)


def _dotted(config: dict, key: str) -> object:
    """The value of a dotted key in a resolved config (None where absent)."""
    for part in key.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def check_same_run(cli: GraphormerCLI) -> None:
    """Before starting from step 0 in a directory that holds earlier segments of a run: stop
    (:class:`RunDirError`) unless this is the configuration recorded there."""
    recorded_path = cli.run_dir / CONFIG_FILE
    if not recorded_path.is_file():  # stopped before its first segment was recorded
        return
    recorded = config_identity(yaml.safe_load(recorded_path.read_text()))
    if differing := differences(recorded, config_identity(yaml.safe_load(cli.config_yaml)), str(recorded_path),
                                "now"):
        raise RunDirError(f"{cli.run_dir} holds a run of another configuration and no checkpoint to resume "
                          f"({differing}); give this run another --run_name")
    log.info("%s holds no checkpoint of its run: starting it again from step 0 (a new segment)", cli.run_dir)


def warn_if_never_validated(trainer: pl.Trainer) -> None:
    """Say so when ``val_check_interval`` (in training batches) exceeds the training batches of ``max_steps``:
    then the run never validates, keeps no best checkpoint and reports its last weights."""
    interval, batches = trainer.val_check_interval, trainer.max_steps * trainer.accumulate_grad_batches
    if (isinstance(interval, int) and trainer.check_val_every_n_epoch is None and trainer.max_steps > 0
            and trainer.limit_val_batches != 0 and interval > batches):
        log.warning("--trainer.val_check_interval %d is more than the %d training batches of --trainer.max_steps %d: "
                    "the run never validates while training, keeps no best checkpoint, and its final metrics are "
                    "those of the last weights", interval, batches, trainer.max_steps)


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
