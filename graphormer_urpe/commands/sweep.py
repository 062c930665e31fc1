"""``graphormer-urpe sweep``: one experiment over several seeds; mean and standard deviation of every metric, and
for a SMILES table the recipe's ensemble (docs/small-data.md).

    graphormer-urpe sweep --config zinc_subset --seeds 0 1 2 3
    graphormer-urpe sweep --config qm9_gap --seeds 0 1 2 3 --name gap_rpe --model.encoder.attention rpe
    graphormer-urpe sweep --collect --name gap_rpe --seeds 0 1 2 3      # only aggregate finished runs
    graphormer-urpe sweep --config small_molecules --seeds 0 1 2 3 4 --ensemble --trees --predict new.csv \\
        --data.source.path my.csv --data.source.targets '[logS]'

Seed S is the ``train`` run ``<run_root>/<name>-seed<S>`` with ``--seed_everything S`` (model initialisation, dropout
and data order; the split stays fixed), one after the other, each in its own process (``--trainer.devices 4`` works as
in ``train``). Any other option goes to ``train``; with ``--logger wandb`` the runs share the W&B group ``<name>``.
Finished seeds of the same config are reused, unfinished ones resume their ``last.ckpt``, a seed that another sweep
or a ``train`` runs is waited for (:mod:`graphormer_urpe.run.sweep`). On a SLURM cluster run the seeds as an array
job and aggregate them with ``--collect``.

Every refusal (this command's options, the options ``train`` would refuse, a seed directory of another config, the
ensemble's: a config that is not a SMILES table's, trees without descriptors or fingerprints, a label with one class
among the training rows, a table to predict that is missing or has no rows, an existing output) comes before the
first seed, in one line (exit code 2).

Writes ``<run_root>/<name>-seeds.json`` and ``.md``: per metric the mean, the sample standard deviation (n - 1; 0 for
one seed), n and every seed's value. ``--ensemble`` saves the seeds' best checkpoints as an ensemble (``graphormer-urpe
ensemble``), ``<run_root>/<name>-ensemble[-trees][-kernel]/``: blended with gradient-boosted trees on the molecule
features (``--trees``), a Gaussian process on fingerprints (``--kernel``); ``--predict TABLE`` predicts with it into
``<ensemble's directory>-predict-<TABLE's stem>.csv``. An ensemble of the same seeds' runs that exists is reused, and
so is its prediction of the same table; one of other runs, or another prediction, is refused.

Stopping: SIGTERM (or SIGUSR1) sent to the sweep is passed on to the running seed's ``train`` (Ctrl-C in the terminal
reaches it directly): the seed finishes its step and writes ``last.ckpt``, and the sweep stops with the seed's exit
code (128 + the signal). In the ensemble phase the sweep stops at once, no part of an output written. Either way it
says so, and the same command resumes. Seeds that did not finish: exit code 4, the last line naming each one's cause.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from graphormer_urpe.commands.command import Command
from graphormer_urpe.data.files import unwritable
from graphormer_urpe.errors import InputError
from graphormer_urpe.evaluation.ensemble import (
    EnsembleOutputs,
    EnsembleRecord,
    plan_ensemble_outputs,
    summary,
    write_ensemble,
)
from graphormer_urpe.evaluation.new_molecules import Prediction
from graphormer_urpe.run.checkpoints import run_config
from graphormer_urpe.run.sweep import (
    SeedRuns,
    Statistic,
    aggregate,
    check_seed_runs,
    collect,
    held,
    log,
    resolved_config,
    run_seeds,
    stopping_on_signals,
    unfinished,
    write_summary,
)


@dataclass(frozen=True)
class SweepPlan:
    """A sweep with every input checked: its seeds' runs, and what its ensemble writes."""

    runs: SeedRuns
    collect: bool  # only aggregate the finished seeds
    ensemble: EnsembleOutputs | None  # --ensemble's outputs; None: no ensemble
    command: str  # this sweep's command line, recorded by its ensemble


@dataclass(frozen=True)
class SweepResult:
    """What a sweep finished: the statistics of its finished seeds, and its ensemble."""

    experiment: str
    seeds: list[int]  # the finished seeds, aggregated
    missing_seeds: list[int]  # the seeds that did not finish
    runs: dict[int, str]  # finished seed -> its run directory
    metrics: dict[str, Statistic]  # metric -> its statistics over the finished seeds
    ensemble: EnsembleRecord | None = None
    predictions: Prediction | None = None  # --predict's table of new molecules, predicted by the ensemble

    def summary(self) -> dict:
        """``<name>-seeds.json``: everything but the ensemble, which has its own record."""
        return {key: value for key, value in dataclasses.asdict(self).items() if key not in ("ensemble", "predictions")}


class Sweep(Command[SweepPlan, SweepResult]):
    NAME = "sweep"
    HELP = __doc__
    OVERRIDES = True  # train's options, passed on to every seed

    def add_args(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--config", help="experiment config (as for train)")
        parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3], help="seeds (default: 0 1 2 3)")
        parser.add_argument("--name", help="experiment name (default: the config name)")
        parser.add_argument("--run_root", type=Path, default=Path("runs"), help="where the runs and the summary are")
        parser.add_argument("--collect", action="store_true", help="only aggregate the seeds' finished runs")
        parser.add_argument(
            "--ensemble",
            action="store_true",
            help="also save the seeds' best checkpoints as an ensemble, scored on the test split (a "
            "SMILES table's config; docs/small-data.md)",
        )
        blended = {
            "--trees": "gradient-boosted trees on the runs' descriptors or fingerprints",
            "--kernel": "a Gaussian process on Morgan count fingerprints (Tanimoto's kernel)",
        }
        for option, part in blended.items():
            parser.add_argument(option, action="store_true", help=f"with --ensemble: blend {part} in")
        parser.add_argument(
            "--predict",
            type=Path,
            metavar="TABLE",
            help="with --ensemble: also predict the molecules of TABLE (CSV or Parquet, the training "
            "table's SMILES column) with the ensemble",
        )

    def parse(self, argv: Sequence[str]) -> argparse.Namespace:
        args = super().parse(argv)
        args.command = shlex.join(["graphormer-urpe", self.NAME, *argv])
        return args

    def plan(self, args: argparse.Namespace) -> SweepPlan:
        for option, given in (("--trees", args.trees), ("--kernel", args.kernel), ("--predict", args.predict)):
            if given and not args.ensemble:
                raise InputError(f"{option} works on the seeds' ensemble: add --ensemble")
        if args.config is None and (not args.collect or args.ensemble):
            raise InputError("--config is required to run seeds or make their ensemble")
        name = args.name or Path(args.config).stem
        runs = SeedRuns(name, args.run_root, tuple(args.seeds), args.config, tuple(args.overrides))
        if (read_only := unwritable(args.run_root)) is not None:
            raise InputError(f"--run_root {args.run_root}: {read_only} is not writable")
        if args.collect and not collect(runs):  # seeds of different configs are refused there
            raise InputError(f"no finished run of {name} under {args.run_root} for seeds {list(runs.seeds)}")
        if args.collect and not args.ensemble:
            return SweepPlan(runs, True, None, args.command)
        wanted = resolved_config(runs.command(runs.seeds[0]))  # train's refusals of its options stop here
        if not args.collect:
            check_seed_runs(runs, wanted)
        outputs = None
        if args.ensemble:
            parts = "".join(f"-{part}" for part, chosen in (("trees", args.trees), ("kernel", args.kernel)) if chosen)
            outputs = plan_ensemble_outputs(
                run_config(yaml.safe_dump(wanted)),
                [runs.run_dir(s) for s in runs.seeds],
                args.run_root / f"{name}-ensemble{parts}",
                args.trees,
                args.predict,
                args.kernel,
            )
        return SweepPlan(runs, args.collect, outputs, args.command)

    def run(self, plan: SweepPlan) -> SweepResult:
        runs = plan.runs
        with stopping_on_signals("between seeds"):
            failed = {} if plan.collect else run_seeds(runs)  # a running seed gets the signal itself
            per_seed = collect(runs)
        missing = [seed for seed in runs.seeds if seed in failed or seed not in per_seed]
        if not per_seed:
            raise unfinished(runs, failed, missing, [])
        finished = sorted(per_seed)
        run_dirs = {seed: str(runs.run_dir(seed)) for seed in finished}
        result = SweepResult(runs.name, finished, missing, run_dirs, aggregate(per_seed))
        print(write_summary(runs, result.summary(), result.metrics), flush=True)
        if plan.ensemble is not None:
            with (
                stopping_on_signals("in its ensemble phase"),
                held(runs.run_root / f".{runs.name}-ensemble.lock", f"{runs.name}: the ensemble"),
            ):
                record, predictions = write_ensemble(
                    plan.ensemble, [runs.run_dir(seed) for seed in finished], plan.command
                )
                log.info(
                    "%s: ensemble of seeds %s: %s; written %s",
                    runs.name,
                    result.seeds,
                    summary(record),
                    plan.ensemble.directory,
                )
            result = dataclasses.replace(result, ensemble=record, predictions=predictions)
        if missing:
            raise unfinished(runs, failed, missing, result.seeds)
        return result


main = Sweep().main
