"""MoleculeACE (van Tilborg, Alenicheva and Grisoni, J. Chem. Inf. Model. 2022) on 10 of its ChEMBL sets: the
recipe against the benchmark's best method (SVM on ECFP) and chemprop 2.3.1, as the benchmark defines itself.

    python bench/small_data/moleculeace.py --arms svm svm+valid chemprop chemprop+rdkit --chemprop CHEMPROP  # peers
    python bench/small_data/moleculeace.py --arms recipe                    # ours: graphormer-urpe sweep, every part
    python bench/small_data/moleculeace.py --sets CHEMBL1871_Ki --arms svm  # some sets
    python bench/small_data/moleculeace.py --report                         # the tables, from the committed results
    python bench/small_data/moleculeace.py --report --final-reading         # with the recipe's test figures
    python bench/small_data/moleculeace.py --blend-stability                # the blend rules under resampling
    python bench/small_data/moleculeace.py --selection recipe+ecfp recipe   # a candidate, on validation figures
    python bench/small_data/moleculeace.py --second-reading recipe+nodropout recipe+buckets  # a chosen one, on test
    python bench/small_data/moleculeace.py --validation-reading CANDIDATE recipe+nodropout  # rule 14: 8 sets' rows

Data: the ``MoleculeACE==3.0.0`` wheel (``pip install --no-deps MoleculeACE==3.0.0``; located, never imported)
ships each set as ``MoleculeACE/Data/benchmark_data/<set>.csv`` (``smiles``, ``y`` = -log10 of the activity in
molar, ``cliff_mol`` 0/1, ``split`` train/test) and each method's tuned hyperparameters as
``MoleculeACE/Data/configures/benchmark/<set>/<method>.yml``.

Rows (the same for every arm): the benchmark's test split is the test set. The validation rows were fixed before
any run, by one rule: ``round(0.1 * n)`` of the n rows of the benchmark's train split, drawn by
``numpy.random.default_rng(0).permutation(n)`` (the first ones), in table order; the other train rows train.
Scores, as the benchmark defines them (``MoleculeACE.benchmark.utils``): RMSE on the test rows, and RMSE on the
test rows flagged ``cliff_mol`` (its ``calc_cliff_rmse`` with the shipped flags).

Arms (:data:`ARMS`):

- ``svm``: scikit-learn's SVR with the set's shipped ``SVM_ECFP.yml`` hyperparameters on MoleculeACE's ECFP
  (Morgan radius 2, 1,024 bits, as its ``Featurizer.ecfp``), fitted on the training rows; ``svm+valid``: the same
  fitted on training and validation rows (all of the benchmark's train split, as MoleculeACE's own protocol
  fits its final model). Deterministic: one run each.
- ``chemprop``, ``chemprop+rdkit``: ``chemprop train`` with its defaults (and ``--molecule-featurizers
  v1_rdkit_2d_normalized``), the rows given by ``--splits-file``, on the CPU, 3 seeds (``--pytorch-seed``);
  validation RMSE by ``chemprop predict`` on the validation rows.
- ``recipe``: ``graphormer-urpe sweep --config small_molecules --seeds 0 1 2 --ensemble --trees --kernel`` on the
  set's table with the split given as a column; every part is reported: each seed's run, the ensemble of the runs,
  the trees alone, the fingerprint kernel alone, the blend the recipe chose. Its candidates (``recipe+ecfp``,
  ``recipe+buckets``, then ``recipe+mse``, ``recipe+nodropout``, ``recipe+batch16``, ``recipe+nodropout+mse``,
  ``recipe+nodropout+batch16``, ``recipe+nodropout+batch64``, ``recipe+nodropout+graphtoken``,
  ``recipe+nodropout+ecfp``, ``recipe+nodropout+average``, ``recipe+nodropout+epochs120`` for the network's
  share) add options, and a candidate checkpoint runs an arm as ``ARM@<its SHA-256's start>`` (``--init-from``);
  ``recipe+buckets`` is the final reading's arm, ``recipe+nodropout`` the second reading's and the shipped recipe
  since (docs/small-data.md).

A recipe arm's identity: its options, the SHA-256 of the checkpoint it starts from (``pretrained``) and of the
configuration its options resolve to (``configuration``, :func:`configuration`); its lines never mix two of them.

Results are kept in the repository, one small file per set: ``bench/results/moleculeace/<set>.jsonl``, one JSON
line per run or part (the arm, the seed or part, test RMSE and cliff RMSE, validation RMSE, CPU and wall seconds,
the command with paths relative to ``--work`` (:func:`portable`), the test predictions in table order, rounded to
5 decimals), so that the work adds up across machines and
interruptions: a run whose (set, arm, seed) is there is not run again. Scratch (the runs, chemprop's outputs, logs)
goes to ``--work`` (default ``runs/moleculeace``). ``--report`` writes ``bench/results/moleculeace/README.md``:
per set and arm, mean +- sample std over seeds and the ensemble (mean prediction over seeds); the means of
per-set ratios against SVM and against the better chemprop ensemble.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import itertools
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import REPO, SWEEP, BenchError, configuration, exit_code, spread
from bench.small_data.small_data import chemprop_predict, chemprop_train, run_child
from bench.small_data.small_data import read_results as read_json_lines

#: The 10 sets of the issue, smallest training split first (results of the small ones come first).
SETS = (
    "CHEMBL1871_Ki",
    "CHEMBL2034_Ki",
    "CHEMBL237_EC50",
    "CHEMBL2971_Ki",
    "CHEMBL3979_EC50",
    "CHEMBL4792_Ki",
    "CHEMBL219_Ki",
    "CHEMBL237_Ki",
    "CHEMBL244_Ki",
    "CHEMBL234_Ki",
)
#: The wheel that ships the data and the tuned hyperparameters.
REQUIREMENT = "MoleculeACE==3.0.0"
#: The validation rule: this fraction of the benchmark's train split, drawn with this seed.
VALID_FRACTION = 0.1
VALID_SEED = 0
#: Where each set's results are kept (committed).
RESULTS = REPO / "bench" / "results" / "moleculeace"
#: The recipe's seeds and sweep, as a user runs it.
RECIPE_SEEDS = (0, 1, 2)
#: The sets on which the recipe's candidates are chosen, on validation figures (docs/small-data.md, "Choices made on
#: the validation rows"): the two smallest, fixed before any of their runs.
SELECTION_SETS = ("CHEMBL1871_Ki", "CHEMBL2034_Ki")
#: The sets of a chosen candidate's second reading: those it was not chosen on.
READING_SETS = tuple(name for name in SETS if name not in SELECTION_SETS)
#: The parts a second reading compares: the config changes only if each one's mean test RMSE ratio is below 1.
READING_PARTS = ("ensemble", "blend")


@dataclass(frozen=True)
class Bounds:
    """A candidate replaces the recipe only if the means over :data:`SELECTION_SETS` of its network ensemble's and
    its blend's validation RMSE relative to the recipe's are at most these (fixed before the candidate's runs)."""

    ensemble: float
    blend: float


#: Each candidate's bounds: a change of the model must win (0.97); a change that only saves time (size-aware
#: batching) may cost at most 2 %, the spread of these ratios between seeds.
CANDIDATES = {
    "recipe+ecfp": Bounds(0.97, 1.0),
    "recipe+buckets": Bounds(1.02, 1.02),
    "recipe+mse": Bounds(0.97, 1.0),
    "recipe+nodropout": Bounds(0.97, 1.0),
    "recipe+batch16": Bounds(0.97, 1.0),
    "recipe+nodropout+mse": Bounds(0.97, 1.0),
    "recipe+nodropout+batch16": Bounds(0.97, 1.0),
    "recipe+nodropout+batch64": Bounds(0.97, 1.0),
    "recipe+nodropout+graphtoken": Bounds(0.97, 1.0),
    "recipe+nodropout+ecfp": Bounds(0.97, 1.0),
    "recipe+nodropout+average": Bounds(0.97, 1.0),
    "recipe+nodropout+epochs120": Bounds(0.97, 1.0),
}
#: A pretrained checkpoint replaces the shipped one as a change of the model does (rule 2 of the docs).
CHECKPOINT_BOUNDS = Bounds(0.97, 1.0)
#: Rule 14: a candidate judged on the validation rows of :data:`READING_SETS`, which the shipped arm was not chosen on
#: (the selection sets' rows carry its winner's curse): 8 sets' rows, so 2 % suffices.
WIDER_BOUNDS = Bounds(0.98, 1.0)
#: Rule 14's stop (docs/small-data.md): a candidate whose unfinished sets would need a mean network ratio below this,
#: the lowest any candidate reached on any one set (rule 6 on CHEMBL1871_Ki), is not chosen and its runs stop. A stop
#: can only end in "not chosen", so it lends no candidate a pass.
HOPELESS_BELOW = 0.927


@dataclass(frozen=True)
class Arm:
    """One arm: its kind (``svm``, ``chemprop``, ``recipe``), extra options, the seeds it runs."""

    kind: str
    options: str
    seeds: tuple[int, ...]


#: The final reading's recipe arm (``recipe+buckets``), whose options rules 5 to 7's candidates extend.
FINAL_OPTIONS = "--config small_molecules --ensemble --trees --kernel --data.bucket_window 4"
#: The second reading's (``recipe+nodropout``, the shipped recipe), whose options the candidates of rules 8, 9, 11
#: and 13 extend.
SHIPPED_OPTIONS = f"{FINAL_OPTIONS} --model.encoder.dropout 0 --model.encoder.attention_dropout 0"

ARMS: dict[str, Arm] = {
    "svm": Arm("svm", "", (0,)),
    "svm+valid": Arm("svm", "--fit-on-validation", (0,)),
    "chemprop": Arm("chemprop", "", (0, 1, 2)),
    "chemprop+rdkit": Arm("chemprop", "--molecule-featurizers v1_rdkit_2d_normalized", (0, 1, 2)),
    # the recipe before size-aware batching joined its config: its results (the selection sets) ran on the config's
    # earlier content (their "configuration"), so the arm cannot add more (stale_sets)
    "recipe": Arm("recipe", "--config small_molecules --ensemble --trees --kernel", RECIPE_SEEDS),
    # a candidate (rule 1, not chosen): fingerprint counts beside the descriptors, at the readout and in the trees,
    # run on the config's earlier content too
    "recipe+ecfp": Arm(
        "recipe", "--config small_molecules --ensemble --trees --kernel --data.source.fingerprints ecfp", RECIPE_SEEDS
    ),
    # a candidate that saves time (rule 3, chosen): batches of molecules of similar size (windows of 4 batches sorted
    # by size), so a few large molecules no longer pad every batch (CHEMBL1871_Ki: its median batch is padded to 178
    # atoms, its mean molecule has 33; docs/small-data.md). Since then the config holds the window itself: this arm
    # ran the shipped recipe's configuration (the same SHA-256), and it is the final reading's arm. Since rule 6 the
    # config holds no dropout, so its results stand and it runs no more (stale_sets)
    "recipe+buckets": Arm("recipe", FINAL_OPTIONS, RECIPE_SEEDS),
    # a candidate for the network's share (rule 5, judged on validation after the final reading): the squared error
    # as the training loss, against the final arm. The benchmark scores RMSE, and its cliff molecules are the large
    # errors, which an L1 loss treats as outliers; chemprop trains on the squared error too
    "recipe+mse": Arm("recipe", f"{FINAL_OPTIONS} --model.loss mse", RECIPE_SEEDS),
    # two more candidates for the network's share (rules 6 and 7, written before their runs, after rule 5's verdict).
    # Rule 6: no dropout. The kernel, which interpolates its training rows up to a noise it fits, is the best part on
    # these tables; the recipe's dropout (0.1 in the blocks and on attention) pulls the network towards smoother
    # functions than an activity cliff is. Chosen, and held on the test rows of the eight other sets (the second
    # reading): the config holds no dropout since, so this arm runs the shipped recipe's configuration
    "recipe+nodropout": Arm("recipe", SHIPPED_OPTIONS, RECIPE_SEEDS),
    # rule 7: batches of 16. The runs stop after 27 to 53 epochs of 15 to 17 steps (the validation MAE's patience):
    # half the batch gives the encoder twice the updates before the patience ends
    "recipe+batch16": Arm("recipe", f"{FINAL_OPTIONS} --data.batch_size 16", RECIPE_SEEDS),
    # rule 8, after the second reading: the squared error again (rule 5), on the shipped recipe without dropout, which
    # no longer holds the network to functions too smooth to follow a cliff whatever its loss
    "recipe+nodropout+mse": Arm("recipe", f"{SHIPPED_OPTIONS} --model.loss mse", RECIPE_SEEDS),
    # rule 9, after rule 8's verdict: rule 7's batches of 16, the closest of the candidates not chosen, on the shipped
    # recipe without dropout: twice the updates before the patience ends act on the fit in another way than dropout
    "recipe+nodropout+batch16": Arm("recipe", f"{SHIPPED_OPTIONS} --data.batch_size 16", RECIPE_SEEDS),
    # rule 11, after rule 10's verdict: batches of 64. Without dropout the batch's noise is the one left in the fit,
    # and rule 9 found more of it costs (1.019) where with dropout it had gained (rule 7, 0.982)
    "recipe+nodropout+batch64": Arm("recipe", f"{SHIPPED_OPTIONS} --data.batch_size 64", RECIPE_SEEDS),
    # rule 13, after rules 11 and 12's verdicts: the descriptors into the graph token, which every layer's attention
    # reads, instead of after the last layer (the readout won the first round on physical properties by a margin
    # within the seeds' spread)
    "recipe+nodropout+graphtoken": Arm(
        "recipe", f"{SHIPPED_OPTIONS} --model.encoder.molecule_features_into graph_token", RECIPE_SEEDS
    ),
    # rule 15, judged by rule 14: rule 1's fingerprint counts (at the readout and in the trees) on the shipped recipe
    # without dropout. MoleculeACE's models on ECFP beat its graph models, and rule 1 gave the readout the counts
    # while dropout 0.1 held the network to smooth functions (rule 6): its seeds gained, its ensemble did not
    "recipe+nodropout+ecfp": Arm("recipe", f"{SHIPPED_OPTIONS} --data.source.fingerprints ecfp", RECIPE_SEEDS),
    # rule 16, judged by rule 14: validations judge (and checkpoints hold) a moving average of the weights over about
    # the last 100 steps. The ensemble of three seeds is 4 to 8 % below their mean RMSE: much of a run's error is its
    # own variance, part of which an average within the run takes out
    "recipe+nodropout+average": Arm("recipe", f"{SHIPPED_OPTIONS} --model.optim.weight_average 0.99", RECIPE_SEEDS),
    # rule 18, judged by rule 14: on the largest sets the runs end at the 80 epochs' limit, their best epoch among
    # the last 25 (cut by the schedule, not stopped by the patience)
    "recipe+nodropout+epochs120": Arm("recipe", f"{SHIPPED_OPTIONS} --trainer.max_epochs 120", RECIPE_SEEDS),
}


def shipped_pretrained() -> str:
    """The SHA-256 of the pretrained checkpoint the package ships (``--init_from pretrained``, the recipe's start):
    part of a recipe arm's identity, so that results of two checkpoints are never mixed under one arm."""
    from graphormer_urpe.pretrained import provenance

    return provenance()["sha256"]


def with_checkpoint(arm: str, checkpoint: Path) -> str:
    """The name of recipe arm ``arm`` fine-tuned from ``checkpoint`` instead of the shipped checkpoint:
    ``<arm>@<the first 12 hex digits of the file's SHA-256>``, so that its results are another arm's."""
    from graphormer_urpe.pretrained import sha256_of

    return f"{arm}@{sha256_of(checkpoint)[:12]}"


def arm_of(name: str) -> Arm | None:
    """The arm a result's arm name runs (``recipe@<sha>``: ``recipe`` from another checkpoint), None if unknown."""
    return ARMS.get(name.split("@")[0])


def check_seed_runs(run_root: Path, sweep_name: str, seeds: Sequence[int], pretrained: str) -> None:
    """Refuse a sweep whose finished or started seeds (``run.json`` of ``<run_root>/<sweep_name>-seed<S>``) began
    from another checkpoint than ``pretrained``: the sweep would reuse them under the arm's name.

    Raises:
        BenchError: naming the run directory and both checkpoints.
    """
    for seed in seeds:
        record = run_root / f"{sweep_name}-seed{seed}" / "run.json"
        if not record.is_file():
            continue
        started = json.loads(record.read_text())["segments"][0].get("initialised_from") or {}
        if started.get("sha256") != pretrained:
            raise BenchError(
                f"{record.parent}: started from checkpoint sha256 {started.get('sha256')}, the shipped one is "
                f"{pretrained}: move that run away (or give another --work) to run the arm with this checkpoint"
            )


def package_directory() -> Path:
    """The installed ``MoleculeACE`` package's directory, found without importing it.

    Raises:
        BenchError: the package is not installed.
    """
    spec = importlib.util.find_spec("MoleculeACE")
    if spec is None or not spec.submodule_search_locations:
        raise BenchError(f"MoleculeACE is not installed: pip install --no-deps {REQUIREMENT}")
    return Path(spec.submodule_search_locations[0])


def validation_rows(train_rows: int) -> np.ndarray:
    """Positions (among the benchmark's train rows, in table order) of the validation rows: the first
    ``round(0.1 * n)`` of ``default_rng(0).permutation(n)``, sorted.

    Example:
        >>> validation_rows(10).tolist() == sorted(np.random.default_rng(0).permutation(10)[:1].tolist())
        True
    """
    count = round(VALID_FRACTION * train_rows)
    return np.sort(np.random.default_rng(VALID_SEED).permutation(train_rows)[:count])


def read_set(name: str) -> pd.DataFrame:
    """The set's table: ``smiles``, ``y``, ``cliff_mol`` (0/1) and ``split`` (``train``, ``valid``, ``test``:
    the benchmark's split, with the validation rows of :func:`validation_rows` taken from its train split).

    Raises:
        BenchError: the file or one of its columns is missing, or a split is not train or test.
    """
    path = package_directory() / "Data" / "benchmark_data" / f"{name}.csv"
    if not path.is_file():
        raise BenchError(f"{path}: no such file (another MoleculeACE version?): pip install --no-deps {REQUIREMENT}")
    table = pd.read_csv(path)
    missing = {"smiles", "y", "cliff_mol", "split"} - set(table.columns)
    if missing:
        raise BenchError(f"{path}: no column(s) {sorted(missing)} (its columns: {', '.join(table.columns)})")
    if not set(table["split"]) <= {"train", "test"}:
        raise BenchError(f"{path}: split values {sorted(set(table['split']))}, expected train and test")
    table = table[["smiles", "y", "cliff_mol", "split"]].copy()
    train = np.flatnonzero(table["split"].to_numpy() == "train")
    table.iloc[train[validation_rows(len(train))], table.columns.get_loc("split")] = "valid"
    return table


def svm_hyperparameters(name: str) -> dict:
    """The set's shipped ``SVM_ECFP.yml`` (``C``, ``epsilon``, ``gamma``, ``kernel``)."""
    path = package_directory() / "Data" / "configures" / "benchmark" / name / "SVM_ECFP.yml"
    if not path.is_file():
        raise BenchError(f"{path}: no such file (another MoleculeACE version?): pip install --no-deps {REQUIREMENT}")
    return yaml.safe_load(path.read_text())


def rmse(predicted: np.ndarray, true: np.ndarray) -> float:
    """Root-mean-square error (MoleculeACE's ``calc_rmse``)."""
    return float(np.sqrt(np.mean(np.square(np.asarray(true, np.float64) - np.asarray(predicted, np.float64)))))


def scores(predicted: np.ndarray, table: pd.DataFrame) -> dict[str, float]:
    """Test RMSE and cliff RMSE (the RMSE over the test rows flagged ``cliff_mol``) of predictions of the test
    rows, in table order."""
    test = table[table["split"] == "test"]
    cliff = test["cliff_mol"].to_numpy() == 1
    true = test["y"].to_numpy(np.float64)
    return {"test_rmse": rmse(predicted, true), "test_cliff_rmse": rmse(np.asarray(predicted)[cliff], true[cliff])}


def ecfp(smiles: Sequence[str]) -> np.ndarray:
    """MoleculeACE's ECFP: Morgan bits of radius 2, 1,024 bits (``Featurizer.ecfp``). (n, 1024) float64"""
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=1024)
    rows = []
    for text in smiles:
        mol = Chem.MolFromSmiles(text)
        if mol is None:
            raise BenchError(f"RDKit cannot read the SMILES {text!r}")
        rows.append(generator.GetFingerprintAsNumPy(mol).astype(np.float64))
    return np.stack(rows)


@dataclass(frozen=True)
class Run:
    """One (set, arm, seed) of the benchmark."""

    set: str
    arm: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.set}-{self.arm}-seed{self.seed}"


def run_svm(run: Run, table: pd.DataFrame) -> dict:
    """Fit the SVR with the set's shipped hyperparameters on the ECFP of the training rows (and the validation
    rows, for ``svm+valid``); its test and validation predictions and CPU seconds."""
    from sklearn.svm import SVR

    started, wall = time.process_time(), time.monotonic()
    fitted = ["train", "valid"] if "--fit-on-validation" in ARMS[run.arm].options else ["train"]
    fit_rows = table[table["split"].isin(fitted)]
    model = SVR(**svm_hyperparameters(run.set)).fit(ecfp(fit_rows["smiles"]), fit_rows["y"].to_numpy())
    predicted = {
        split: model.predict(ecfp(table.loc[table["split"] == split, "smiles"])) for split in ("valid", "test")
    }
    valid = table.loc[table["split"] == "valid", "y"].to_numpy()
    # fitted on the validation rows, its validation RMSE says nothing: none is recorded
    val_rmse = None if "valid" in fitted else rmse(predicted["valid"], valid)
    return {
        "test_predictions": predicted["test"],
        "val_rmse": val_rmse,
        "cpu_seconds": time.process_time() - started,
        "wall_seconds": time.monotonic() - wall,
        "command": f"SVR({svm_hyperparameters(run.set)}) on ECFP, fitted on {' + '.join(fitted)}",
    }


def set_directory(work: Path, name: str, table: pd.DataFrame) -> Path:
    """``work/data/<set>``: the set's ``table.csv`` and ``chemprop_splits.json`` (its rows by split, chemprop's
    ``--splits-file``), written once (and checked to be the same table when there)."""
    directory = work / "data" / name
    text = table.to_csv(index=False)
    path = directory / "table.csv"
    if path.is_file():
        if path.read_text() != text:
            raise BenchError(f"{path} holds another table (another MoleculeACE version?): give another --work")
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    rows = {split: np.flatnonzero(table["split"].to_numpy() == split).tolist() for split in ("train", "valid", "test")}
    (directory / "chemprop_splits.json").write_text(
        json.dumps([{"train": rows["train"], "val": rows["valid"], "test": rows["test"]}]) + "\n"
    )
    for split in ("valid", "test"):
        table.loc[table["split"] == split, ["smiles"]].to_csv(directory / f"{split}_smiles.csv", index=False)
    path.write_text(text)
    return directory


def run_chemprop(run: Run, table: pd.DataFrame, directory: Path, work: Path, executable: str) -> dict:
    """``chemprop train`` on the set's rows, then ``chemprop predict`` on the validation rows; its test and
    validation predictions (checked to be those rows, in order) and CPU seconds (both processes).

    Raises:
        BenchError: a chemprop process failed, or its rows are not the set's.
    """
    output = fresh_directory(work / "runs" / run.name)
    options = shlex.split(ARMS[run.arm].options)
    train = chemprop_train(
        executable, directory / "table.csv", "y", directory / "chemprop_splits.json", run.seed, output, options
    )
    cpu, wall = checked_child(train, work / "logs" / f"{output.name}.log")
    test = table[table["split"] == "test"]
    predictions = pd.read_csv(output / "model_0" / "test_predictions.csv")
    if predictions["smiles"].tolist() != test["smiles"].tolist():
        raise BenchError(f"{output}/model_0/test_predictions.csv: its molecules are not the test rows in order")
    written = output / "model_0" / "valid_predictions.csv"
    predict = chemprop_predict(
        executable, directory / "valid_smiles.csv", output / "model_0" / "best.pt", written, options
    )
    predict_cpu, predict_wall = checked_child(predict, work / "logs" / f"{output.name}-validate.log")
    valid_predictions = pd.read_csv(written)
    valid = table[table["split"] == "valid"]
    if valid_predictions["smiles"].tolist() != valid["smiles"].tolist():
        raise BenchError(f"{written}: its molecules are not the validation rows in order")
    return {
        "test_predictions": predictions["y"].to_numpy(np.float64),
        "val_rmse": rmse(valid_predictions["y"].to_numpy(np.float64), valid["y"].to_numpy()),
        "cpu_seconds": cpu + predict_cpu,
        "wall_seconds": wall + predict_wall,
        "command": portable(train, work),
    }


def fresh_directory(path: Path) -> Path:
    """``path``, or ``path-try<k>`` for the first k >= 2 that does not exist (an interrupted run's directory is
    kept, never reused)."""
    candidate, attempt = path, 1
    while candidate.exists():
        attempt += 1
        candidate = path.with_name(f"{path.name}-try{attempt}")
    candidate.parent.mkdir(parents=True, exist_ok=True)
    return candidate


def portable(command: Sequence[str], work: Path) -> str:
    """``command`` as the results record it, naming no path of this machine: the program by its name, paths under
    ``work`` relative to it.

    Example:
        >>> portable(["/opt/venv/bin/chemprop", "train", "--data-path", "/w/data/t.csv", "-x", "1"], Path("/w"))
        'chemprop train --data-path data/t.csv -x 1'
    """
    prefix = f"{work.resolve()}/"
    words = [word.removeprefix(prefix) if word.startswith(prefix) else word for word in command[1:]]
    return shlex.join([Path(command[0]).name, *words])


def checked_child(command: list[str], log_path: Path) -> tuple[float, float]:
    """Run ``command`` on one thread (:func:`small_data.run_child`); its CPU and wall seconds.

    Raises:
        BenchError: it failed (its exit code, its last log line, the log's path).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    code, cpu, wall = run_child(command, log_path, threads=1)
    if code != 0:
        lines = [line for line in log_path.read_text().splitlines() if line.strip()]
        raise BenchError(f"{command[0]} failed (exit code {code}): {lines[-1] if lines else ''} (log: {log_path})")
    return cpu, wall


def run_recipe(name: str, arm_name: str, table: pd.DataFrame, work: Path, checkpoint: Path | None = None) -> list[dict]:
    """``graphormer-urpe sweep`` of the arm (the recipe's seeds, its ensemble) on the set's table with the split as a
    column, fine-tuned from the shipped checkpoint or from ``checkpoint`` (a path under ``work``; the arm is then
    named :func:`with_checkpoint`); one JSON line per part of the saved ensemble (its ``valid.csv`` and
    ``test.csv``): each seed's run (``member``, with its seed), the ``ensemble`` of the runs, its cheap parts
    (``trees``, ``kernel``) and the ``blend``. The sweep's CPU seconds (its whole process tree) are recorded on the
    ``ensemble`` line.

    Raises:
        BenchError: the sweep failed, or the ensemble's rows are not the set's.
    """
    from graphormer_urpe.pretrained import sha256_of

    arm = arm_of(arm_name)
    directory = set_directory(work, name, table)
    run_root = work / "recipe"
    sweep_name = f"{name}-{arm_name.replace('@', '-')}"  # a sweep stopped earlier resumes: finished seeds are reused
    pretrained = shipped_pretrained() if checkpoint is None else sha256_of(checkpoint)
    check_seed_runs(run_root, sweep_name, arm.seeds, pretrained)
    configured = configuration(arm.options)
    command = [
        *SWEEP,
        *shlex.split(arm.options),
        *([] if checkpoint is None else ["--init_from", str(checkpoint)]),
        "--seeds",
        *map(str, arm.seeds),
        "--name",
        sweep_name,
        "--run_root",
        str(run_root),
        "--data.source.path",
        str(directory / "table.csv"),
        "--data.source.targets",
        "[y]",
        "--data.source.split",
        "column",
        "--data.source.split_column",
        "split",
    ]
    started = datetime.datetime.now()
    cpu, wall = checked_child(command, work / "logs" / f"{sweep_name}-{started:%Y%m%d-%H%M%S}.log")
    cheap = [part for part in ("trees", "kernel") if f"--{part}" in shlex.split(arm.options)]
    ensemble = run_root / f"{sweep_name}-ensemble{''.join(f'-{part}' for part in cheap)}"
    parts = {}
    for split in ("valid", "test"):
        written = pd.read_csv(ensemble / f"{split}.csv")
        rows = table[table["split"] == split]
        if written["smiles"].tolist() != rows["smiles"].tolist():
            raise BenchError(f"{ensemble / split}.csv: its molecules are not the {split} rows in order")
        parts[split] = {
            column.removeprefix("y_"): written[column].to_numpy(np.float64)
            for column in written.columns
            if column == "y" or column.startswith("y_")
        }
    valid = table.loc[table["split"] == "valid", "y"].to_numpy()
    members = [f"member{k}" for k in range(len(arm.seeds))]
    names = [*members, "ensemble", *cheap, *(["y"] if cheap else [])]  # "y": the ensemble's prediction, the blend
    entries = []
    for part in names:
        seed = arm.seeds[int(part.removeprefix("member"))] if part.startswith("member") else None
        predicted = parts["test"][part]
        entries.append(
            {
                "set": name,
                "arm": arm_name,
                "seed": seed,
                "part": "blend" if part == "y" else part.rstrip("0123456789"),
                "options": arm.options,
                "pretrained": pretrained,
                "configuration": configured,
                **scores(predicted, table),
                "val_rmse": rmse(parts["valid"][part], valid),
                "cpu_seconds": cpu if part == "ensemble" else None,
                "wall_seconds": wall if part == "ensemble" else None,
                "command": portable(command, work),
                "ensemble": str(ensemble.relative_to(work)),
                "test_predictions": np.round(predicted, 5).tolist(),
                # the validation rows' too: blend rules are compared on them (--blend-rules), never on the test rows
                "valid_predictions": np.round(parts["valid"][part], 5).tolist(),
                "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            }
        )
    return entries


def execute(run: Run, table: pd.DataFrame, work: Path, chemprop: str | None) -> dict:
    """One run; returns its JSON line."""
    kind = ARMS[run.arm].kind
    if kind == "svm":
        result = run_svm(run, table)
    elif kind == "chemprop":
        result = run_chemprop(run, table, set_directory(work, run.set, table), work, str(chemprop))
    else:
        raise BenchError(f"arm {run.arm}: runs as a sweep (run_recipe)")
    predictions = np.asarray(result.pop("test_predictions"), np.float64)
    return {
        "set": run.set,
        "arm": run.arm,
        "seed": run.seed,
        "options": ARMS[run.arm].options,
        **scores(predictions, table),
        **result,
        "test_predictions": np.round(predictions, 5).tolist(),
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def read_results(name: str) -> list[dict]:
    """The set's JSON lines (:func:`bench.small_data.small_data.read_results`: none when there is no file, a
    truncated last line ignored)."""
    return read_json_lines(RESULTS / f"{name}.jsonl")


def append_result(entry: dict) -> None:
    """Append one JSON line to the set's results file."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / f"{entry['set']}.jsonl").open("a") as results:
        results.write(json.dumps(entry) + "\n")


def pending(sets: Sequence[str], arms: Sequence[str]) -> list[Run]:
    """The runs of these sets and arms without a result (each set's results read once).

    Raises:
        BenchError: a result of an arm whose options have changed since (mixing them would mislead).
    """
    todo = []
    for name in sets:
        entries = checked_results(name)
        done = {(entry["arm"], entry["seed"]) for entry in entries}
        todo += [Run(name, arm, seed) for arm in arms for seed in ARMS[arm].seeds if (arm, seed) not in done]
    return todo


def checked_results(name: str) -> list[dict]:
    """The set's results, each of an arm that still is what it was: the same options; for a recipe arm, one
    identity (the checkpoint it started from, the configuration) for all its lines, and a candidate checkpoint's arm
    (``<arm>@<sha>``) started from that checkpoint. An arm whose shipped checkpoint or config has changed since keeps
    its results; :func:`stale_sets` stops it from adding more.

    Raises:
        BenchError: a result of an arm whose options have changed, or lines of one arm that mix identities.
    """
    entries = read_results(name)
    recipe_arms = set()
    for entry in entries:
        arm = arm_of(entry["arm"])
        if arm is None:
            continue
        if entry["options"] != arm.options:
            raise BenchError(
                f"{RESULTS / name}.jsonl: arm {entry['arm']} ran with options {entry['options']!r}, "
                f"now {arm.options!r}: keep the arm's options or name a new arm"
            )
        if arm.kind != "recipe":
            continue
        recipe_arms.add(entry["arm"])
        _, _, checkpoint = entry["arm"].partition("@")  # a candidate checkpoint's arm names its SHA-256's start
        if checkpoint and not (entry.get("pretrained") or "").startswith(checkpoint):
            raise BenchError(
                f"{RESULTS / name}.jsonl: arm {entry['arm']} ran from the pretrained checkpoint sha256 "
                f"{entry.get('pretrained')}, not {checkpoint}..."
            )
    for arm_name in sorted(recipe_arms):
        identities = {identity(entry) for entry in entries if entry["arm"] == arm_name}
        if len(identities) > 1:
            described = ", ".join(f"checkpoint {p[:12]} with configuration {c[:12]}" for p, c in sorted(identities))
            raise BenchError(
                f"{RESULTS / name}.jsonl: arm {arm_name} holds lines of {len(identities)} identities "
                f"({described}): results of one arm must not mix"
            )
    return entries


def identity(entry: dict) -> tuple[str, str]:
    """What a recipe line ran beyond its options: the SHA-256 of the checkpoint it started from and of its
    configuration (empty where a line lacks one)."""
    return entry.get("pretrained") or "", entry.get("configuration") or ""


def stale_sets(arm_name: str) -> list[str]:
    """The sets (of all :data:`SETS`) where recipe arm ``arm_name`` ran from another checkpoint than the shipped one
    (an arm without ``@``) or with another configuration than its options resolve to today (:func:`configuration`):
    one of them changed since, and another run would mix the two."""
    today = configuration(arm_of(arm_name).options)
    shipped = None if "@" in arm_name else shipped_pretrained()  # a candidate's checkpoint: checked by its name

    def stale(entry: dict) -> bool:
        started, configured = identity(entry)
        return configured != today or (shipped is not None and started != shipped)

    return [name for name in SETS if any(entry["arm"] == arm_name and stale(entry) for entry in checked_results(name))]


def run_peers(sets: Sequence[str], arms: Sequence[str], work: Path, chemprop: str | None, jobs: int) -> None:
    """Run the pending runs of the SVM and chemprop arms, ``jobs`` at a time, each appended as it finishes."""
    tables = {name: read_set(name) for name in sets}
    todo = pending(sets, arms)
    print(f"{len(todo)} runs to do, {jobs} at a time; results in {RESULTS}, scratch in {work}", flush=True)
    with ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(execute, run, tables[run.set], work, chemprop): run for run in todo}
        for done, future in enumerate(as_completed(futures), 1):
            run = futures[future]
            entry = future.result()
            append_result(entry)
            valid = "" if entry["val_rmse"] is None else f", valid RMSE {entry['val_rmse']:.3f}"
            print(
                f"[{done}/{len(todo)}] {run.name}: test RMSE {entry['test_rmse']:.3f}, cliff RMSE "
                f"{entry['test_cliff_rmse']:.3f}{valid}, {entry['cpu_seconds']:.0f} CPU s",
                flush=True,
            )


def run_recipes(sets: Sequence[str], bases: Sequence[str], work: Path, checkpoint: Path | None, jobs: int) -> None:
    """Run the recipe arms ``bases`` (from ``checkpoint``, else the shipped one) on the sets where they have not
    finished, ``jobs`` sweeps at a time (each sweep's seeds one after the other, one thread each), in the order given:
    arm by arm, set by set. Each sweep's lines are appended as it finishes, and its validation figures printed (the
    recipe's candidates are chosen on them; its test figures wait for the final reading)."""
    arms = [base if checkpoint is None else with_checkpoint(base, checkpoint) for base in bases]
    for arm in arms:
        stale = stale_sets(arm)
        if stale:
            raise BenchError(
                f"arm {arm} ran from another checkpoint or with another configuration on {', '.join(stale)} (the "
                "shipped checkpoint or the config has changed since): its results stand as they are; name a new arm "
                "to run today's"
            )
    tables = {name: read_set(name) for name in sets}
    for name, table in tables.items():  # written once here, before sweeps of one set may run side by side
        set_directory(work, name, table)
    todo = [
        (name, arm)
        for arm in arms
        for name in sets
        if not any(entry["arm"] == arm and entry.get("part") == "ensemble" for entry in checked_results(name))
    ]
    print(f"{len(todo)} recipe sweeps to do, {jobs} at a time; results in {RESULTS}, scratch in {work}", flush=True)
    with ThreadPoolExecutor(jobs) as pool:
        futures = {
            pool.submit(run_recipe, name, arm, tables[name], work, checkpoint): (name, arm) for name, arm in todo
        }
        for future in as_completed(futures):
            name, arm = futures[future]
            entries = future.result()
            for entry in entries:
                append_result(entry)
            parts = ", ".join(
                f"{e['part']}{'' if e['seed'] is None else e['seed']} {e['val_rmse']:.3f}" for e in entries
            )
            print(f"{name} {arm}: validation RMSE {parts}", flush=True)


@dataclass(frozen=True)
class Figure:
    """One line of a set's table: test RMSE and cliff RMSE (a mean +- sample std over seeds, or one value)."""

    arm: str
    what: str  # "seeds" (mean +- std of single runs), "ensemble" (mean prediction over seeds), or a part's name
    rmse: float
    cliff_rmse: float
    rmse_std: float | None = None
    cliff_rmse_std: float | None = None
    val_rmse: float | None = None


def set_figures(name: str, table: pd.DataFrame) -> list[Figure]:
    """The set's figures from its results: each deterministic arm; each chemprop arm's seeds (mean +- std) and their
    ensemble (the mean prediction); each recipe arm's members (mean +- std) and every other part of its ensemble."""
    entries = read_results(name)
    figures = []
    for arm in dict.fromkeys(entry["arm"] for entry in entries):
        group = [entry for entry in entries if entry["arm"] == arm]
        singles = [entry for entry in group if entry.get("part", "member") == "member"]
        if len(singles) > 1:
            rmse_mean, rmse_std = spread([entry["test_rmse"] for entry in singles])
            cliff_mean, cliff_std = spread([entry["test_cliff_rmse"] for entry in singles])
            figures.append(
                Figure(
                    arm,
                    "seeds",
                    rmse_mean,
                    cliff_mean,
                    rmse_std,
                    cliff_std,
                    spread([entry["val_rmse"] for entry in singles])[0],
                )
            )
        if "part" not in group[0] and len(singles) > 1:  # a peer's seeds: their ensemble, computed here
            mean = np.mean([entry["test_predictions"] for entry in singles], axis=0)
            figures.append(
                Figure(
                    arm, "ensemble", **{key.removeprefix("test_"): value for key, value in scores(mean, table).items()}
                )
            )
        elif len(singles) == 1 and "part" not in group[0]:
            entry = singles[0]
            in_sample = "--fit-on-validation" in entry["options"]  # fitted on the validation rows: no figure
            figures.append(
                Figure(
                    arm,
                    "one run",
                    entry["test_rmse"],
                    entry["test_cliff_rmse"],
                    val_rmse=None if in_sample else entry["val_rmse"],
                )
            )
        for entry in group:
            if entry.get("part", "member") != "member":
                figures.append(
                    Figure(arm, entry["part"], entry["test_rmse"], entry["test_cliff_rmse"], val_rmse=entry["val_rmse"])
                )
    return figures


def final_figure(figures: Sequence[Figure], arm: str) -> Figure | None:
    """An arm's own result: its blend (the recipe's choice), else its ensemble, else its one run."""
    for what in ("blend", "ensemble", "one run"):
        found = [figure for figure in figures if figure.arm == arm and figure.what == what]
        if found:
            return found[0]
    return None


#: The arm of the final reading: the recipe as rules 1 and 3 leave it, the shipped configuration until rule 6
#: (docs/small-data.md; ``recipe+buckets@<sha>`` should rule 2 have chosen a new checkpoint).
FINAL_ARM = "recipe+buckets"
#: The arm of the second reading: the final arm without dropout (rule 6, chosen on validation, then read on the test
#: rows of the sets it was not chosen on), the shipped configuration since.
SHIPPED_ARM = "recipe+nodropout"
#: The recipe's parts whose ratios the report gives: the network ensemble, each cheap part, the blend.
RECIPE_PARTS = ("ensemble", "trees", "kernel", "blend")


@dataclass(frozen=True)
class Bound:
    """One bound of the issue on the final arm: the mean over the sets of a part's per-set ratio ``against`` SVM or
    the better chemprop ensemble, on one metric, is at most ``at_most``."""

    part: str  # "blend" (the recipe's own result) or "ensemble" (the network's alone)
    against: str  # "SVM" or "chemprop"
    metric: str  # "RMSE" or "cliff RMSE"
    at_most: float


BOUNDS = (
    Bound("blend", "SVM", "RMSE", 0.93),
    Bound("blend", "chemprop", "RMSE", 0.93),
    Bound("blend", "SVM", "cliff RMSE", 0.93),
    Bound("blend", "chemprop", "cliff RMSE", 0.93),
    Bound("ensemble", "chemprop", "RMSE", 0.90),
)


def bounds_text(ratios: dict[tuple[str, str, str], list[tuple[float, float]]], arm: str, reading: str) -> list[str]:
    """A recipe arm (the final or the second ``reading``'s) against :data:`BOUNDS`: each mean ratio, on how many
    sets, met or missed (by how much)."""
    lines = [
        f"## The bounds, for {arm} (the {reading} reading)",
        "",
        "| part | against | metric | sets | mean ratio | bound | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for bound in BOUNDS:
        values = ratios.get((arm, bound.part, bound.against), [])
        if not values:
            lines.append(f"| {bound.part} | {bound.against} | {bound.metric} | 0 | | {bound.at_most} | not run |")
            continue
        column = 1 if bound.metric == "cliff RMSE" else 0  # each per-set value is (RMSE ratio, cliff RMSE ratio)
        mean = float(np.mean([value[column] for value in values]))
        verdict = "met" if mean <= bound.at_most else f"missed by {mean - bound.at_most:.3f}"
        if len(values) < len(SETS):
            verdict += f" (on {len(values)} of {len(SETS)} sets)"
        lines.append(
            f"| {bound.part} | {bound.against} | {bound.metric} | {len(values)} | {mean:.3f} | {bound.at_most} | "
            f"{verdict} |"
        )
    return lines


def report(sets: Sequence[str], final: bool = False) -> str:
    """The Markdown tables: per set, every figure; then, per arm (a recipe arm: per part of :data:`RECIPE_PARTS`),
    the mean over sets of its per-set ratios to ``svm`` and to the better chemprop ensemble (per metric), on the sets
    where both were run; in the ``final`` reading, the final arm against :data:`BOUNDS`. Before the final reading
    the recipe's arms show their validation figures only (their candidates are chosen on those), and no ratio of
    theirs."""
    command = "--report --final-reading" if final else "--report"
    lines = [
        "# MoleculeACE: the recipe against SVM-ECFP and chemprop 2.3.1",
        "",
        f"Written by `python bench/small_data/moleculeace.py {command}` from the JSON lines beside this file. "
        "Test RMSE / cliff RMSE (the test molecules flagged `cliff_mol`); seeds: mean +- sample std of single "
        "runs; ensemble: the mean prediction of the seeds; valid: RMSE on the validation rows."
        + ("" if final else " The recipe's test figures wait for the final reading (`--final-reading`)."),
        "",
    ]
    ratios: dict[tuple[str, str, str], list[tuple[float, float]]] = {}  # (arm, figure, against) -> per set
    rule = chosen_rule(held_out_ratios(FINAL_ARM)) if final else None  # rule 4, on validation rows only
    for name in sets:
        table = read_set(name)
        figures = set_figures(name, table)
        if not figures:
            continue
        if rule not in (None, TODAYS_RULE) and recipe_parts(name, FINAL_ARM, "test"):
            figures = [
                ruled_blend(name, FINAL_ARM, rule, table) if (f.arm, f.what) == (FINAL_ARM, "blend") else f
                for f in figures
            ]
        counts = table["split"].value_counts()
        cliffs = int(table.loc[table["split"] == "test", "cliff_mol"].sum())
        lines += [
            f"## {name} ({counts['train']} / {counts['valid']} / {counts['test']}, {cliffs} cliff molecules in test)",
            "",
            "| arm | figure | test RMSE | cliff RMSE | valid RMSE |",
            "|---|---|---|---|---|",
        ]
        for figure in figures:
            rmse_text = f"{figure.rmse:.3f}" + ("" if figure.rmse_std is None else f" +- {figure.rmse_std:.3f}")
            cliff_text = f"{figure.cliff_rmse:.3f}" + (
                "" if figure.cliff_rmse_std is None else f" +- {figure.cliff_rmse_std:.3f}"
            )
            if not final and arm_of(figure.arm).kind == "recipe":
                rmse_text = cliff_text = "(final reading)"
            valid = "" if figure.val_rmse is None else f"{figure.val_rmse:.3f}"
            lines.append(f"| {figure.arm} | {figure.what} | {rmse_text} | {cliff_text} | {valid} |")
        lines.append("")
        svm = final_figure(figures, "svm")
        chemprop = [f for f in (final_figure(figures, arm) for arm in ("chemprop", "chemprop+rdkit")) if f]
        for arm in dict.fromkeys(figure.arm for figure in figures):
            if arm_of(arm).kind == "recipe":
                if not final:
                    continue
                compared = [figure for figure in figures if figure.arm == arm and figure.what in RECIPE_PARTS]
            else:
                compared = [final_figure(figures, arm)]
            for own in compared:
                if svm is not None:
                    ratios.setdefault((arm, own.what, "SVM"), []).append(
                        (own.rmse / svm.rmse, own.cliff_rmse / svm.cliff_rmse)
                    )
                if len(chemprop) == 2:
                    best = min(f.rmse for f in chemprop), min(f.cliff_rmse for f in chemprop)
                    ratios.setdefault((arm, own.what, "chemprop"), []).append(
                        (own.rmse / best[0], own.cliff_rmse / best[1])
                    )
    lines += [
        "## Means of per-set ratios",
        "",
        "Each arm's own result (chemprop: its 3-seed ensemble; SVM: its one run) and each part of the recipe's "
        "(the network ensemble, the trees, the kernel, the blend: the recipe's own result) over SVM's, and over "
        "the better chemprop ensemble of the set (per metric), averaged over the sets where both ran.",
        "",
        "| arm | figure | against | sets | RMSE ratio | cliff RMSE ratio |",
        "|---|---|---|---|---|---|",
    ]
    for (arm, what, against), values in ratios.items():
        lines.append(
            f"| {arm} | {what} | {against} | {len(values)} | {np.mean([v[0] for v in values]):.3f} | "
            f"{np.mean([v[1] for v in values]):.3f} |"
        )
    if final:
        if rule is None:
            blend = f"{FINAL_ARM}'s blend is its stored one (today's rule): rule 4 waits for all {len(SETS)} sets."
        else:
            blend = f"{FINAL_ARM}'s blend weighs its stored parts by rule 4's choice: {rule} (`--blend-rules`)."
        lines += [
            "",
            blend,
            "",
            *bounds_text(ratios, FINAL_ARM, "final"),
            "",
            *bounds_text(ratios, SHIPPED_ARM, "second"),
        ]
    return "\n".join(lines) + "\n"


def validation_figures(name: str, arm: str) -> dict[str, float]:
    """A recipe arm's validation RMSE on the set, per part: ``seeds`` (the mean over its runs), ``ensemble``, its
    cheap parts and ``blend``; empty when the arm has not finished there. No test figure is read."""
    entries = [entry for entry in checked_results(name) if entry["arm"] == arm]
    if not any(entry.get("part") == "ensemble" for entry in entries):
        return {}
    figures = {"seeds": float(np.mean([entry["val_rmse"] for entry in entries if entry["part"] == "member"]))}
    figures.update({entry["part"]: entry["val_rmse"] for entry in entries if entry["part"] != "member"})
    return figures


def selection(candidate: str, baseline: str, wider: bool = False) -> str:
    """The rule that decides whether ``candidate`` replaces the recipe ``baseline``, on validation figures only (no
    test row is read): of :data:`SELECTION_SETS` by the candidate's :data:`CANDIDATES` bounds, or (``wider``, rule 14
    of docs/small-data.md) of :data:`READING_SETS` by :data:`WIDER_BOUNDS`. Per set and part, both validation RMSEs
    and their ratio; then the means over the sets of the network ensemble's and the blend's ratios against the
    bounds. A Markdown text ending in the verdict."""
    if wider:
        sets, bounds, flag, title = READING_SETS, WIDER_BOUNDS, "--validation-reading", "Validation reading"
    else:
        sets, flag, title = SELECTION_SETS, "--selection", "Selection"
        bounds = CHECKPOINT_BOUNDS if "@" in candidate else CANDIDATES[candidate]
    lines = [
        f"# {title}: {candidate} against {baseline}, on the validation rows of {', '.join(sets)}",
        "",
        f"Written by `python bench/small_data/moleculeace.py {flag} {candidate} {baseline}`. The rule, fixed "
        f"before the runs: {candidate} replaces {baseline} only if the mean over these sets of its network "
        f"ensemble's validation RMSE relative to {baseline}'s is at most {bounds.ensemble} and its blend's at most "
        f"{bounds.blend}.",
        "",
        f"| set | part | {baseline} | {candidate} | ratio |",
        "|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {"ensemble": [], "blend": []}
    missing = []
    for name in sets:
        old, new = validation_figures(name, baseline), validation_figures(name, candidate)
        if not old or not new:
            missing += [f"{name} {arm}" for arm, figures in ((baseline, old), (candidate, new)) if not figures]
            continue
        for part in old:
            lines.append(f"| {name} | {part} | {old[part]:.4f} | {new[part]:.4f} | {new[part] / old[part]:.3f} |")
        for part in ratios:
            ratios[part].append(new[part] / old[part])
    lines.append("")
    if missing:
        left = len(sets) - len(ratios["ensemble"])
        needed = {part: (getattr(bounds, part) * len(sets) - sum(ratios[part])) / left for part in ratios}
        lines.append(
            f"Not finished: {', '.join(missing)}. To pass, the sets left ({left} of {len(sets)}) would need mean "
            f"ratios of at most {needed['ensemble']:.3f} (network ensemble) and {needed['blend']:.3f} (blend)."
        )
        lines.append("")
        if wider and needed["ensemble"] < HOPELESS_BELOW:
            lines.append(
                f"**{candidate} does not replace {baseline}**: the sets left would need a mean network ratio of "
                f"{needed['ensemble']:.3f}, below {HOPELESS_BELOW}, the lowest any candidate reached on any one set; "
                "its runs stop."
            )
        else:
            lines.append("**No verdict yet.**")
        return "\n".join(lines) + "\n"
    ensemble, blend = np.mean(ratios["ensemble"]), np.mean(ratios["blend"])
    chosen = ensemble <= bounds.ensemble and blend <= bounds.blend
    lines.append(
        f"Mean ratios: network ensemble {ensemble:.3f} (at most {bounds.ensemble}), blend {blend:.3f} "
        f"(at most {bounds.blend}). **{candidate} {'replaces' if chosen else 'does not replace'} {baseline}.**"
    )
    return "\n".join(lines) + "\n"


def reading_figures(name: str, arm: str) -> dict[str, tuple[float, float]]:
    """A recipe arm's test RMSE and cliff RMSE on the set, per part of :data:`READING_PARTS`; empty when the arm has
    not finished there."""
    entries = [entry for entry in checked_results(name) if entry["arm"] == arm and entry["part"] in READING_PARTS]
    return {entry["part"]: (entry["test_rmse"], entry["test_cliff_rmse"]) for entry in entries}


def second_reading(candidate: str, baseline: str) -> str:
    """The rule for the shipped config, once a candidate chosen on :data:`SELECTION_SETS` has run everywhere (fixed
    before any of its test figures was read; docs/small-data.md): it changes the config (the shipped checkpoint, for a
    candidate checkpoint's arm ``ARM@SHA``) only if, over :data:`READING_SETS`, the mean of its per-set test RMSE
    ratios to ``baseline``'s is below 1 for the network ensemble and for the blend. Per set and part both test RMSEs
    / cliff RMSEs and their ratios; the means (the cliffs' too, which the rule does not read); the verdict. A
    Markdown text."""
    shipped = "checkpoint" if "@" in candidate else "config"
    lines = [
        f"# Second reading: {candidate} against {baseline}, on the test rows of the sets it was not chosen on",
        "",
        f"Written by `python bench/small_data/moleculeace.py --second-reading {candidate} {baseline}`. The rule, "
        f"fixed before any test figure of {candidate} was read: the shipped {shipped} takes {candidate}'s change only "
        f"if the mean over these {len(READING_SETS)} sets of its network ensemble's test RMSE relative to "
        f"{baseline}'s is below 1, and its blend's too. Test RMSE / cliff RMSE.",
        "",
        f"| set | part | {baseline} | {candidate} | ratio | cliff ratio |",
        "|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[tuple[float, float]]] = {part: [] for part in READING_PARTS}
    missing = []
    for name in READING_SETS:
        old, new = reading_figures(name, baseline), reading_figures(name, candidate)
        if len(old) < len(READING_PARTS) or len(new) < len(READING_PARTS):
            unfinished = ((baseline, old), (candidate, new))
            missing += [f"{name} {arm}" for arm, figures in unfinished if len(figures) < len(READING_PARTS)]
            continue
        for part in READING_PARTS:
            ratio = (new[part][0] / old[part][0], new[part][1] / old[part][1])
            ratios[part].append(ratio)
            lines.append(
                f"| {name} | {part} | {old[part][0]:.3f} / {old[part][1]:.3f} | {new[part][0]:.3f} / "
                f"{new[part][1]:.3f} | {ratio[0]:.3f} | {ratio[1]:.3f} |"
            )
    lines.append("")
    if missing:
        lines.append(f"**No verdict yet**: not finished: {', '.join(missing)}.")
        return "\n".join(lines) + "\n"
    means = {part: np.mean(values, axis=0) for part, values in ratios.items()}
    lower = {part: sum(value[0] < 1 for value in values) for part, values in ratios.items()}
    changes = all(means[part][0] < 1 for part in READING_PARTS)
    for part in READING_PARTS:
        lines.append(
            f"- {part}: mean ratio {means[part][0]:.3f} (cliffs {means[part][1]:.3f}), lower on "
            f"{lower[part]} of {len(READING_SETS)} sets"
        )
    lines += ["", f"**The shipped {shipped} {'takes' if changes else 'does not take'} {candidate}'s change.**"]
    return "\n".join(lines) + "\n"


def inverse_errors(parts: dict[str, np.ndarray], truth: np.ndarray, power: float) -> dict[str, float]:
    """Weights proportional to 1 / MSE**power of the parts within ``ADMIT`` times the best MSE. Shapes: parts (N,),
    truth (N,)."""
    from graphormer_urpe.evaluation.blend import ADMIT

    errors = {part: float(np.mean((values - truth) ** 2)) for part, values in parts.items()}
    best = min(errors.values())
    admitted = {part: error**-power for part, error in errors.items() if error <= ADMIT * best}
    return {part: value / sum(admitted.values()) for part, value in admitted.items()}


def best_part(parts: dict[str, np.ndarray], truth: np.ndarray) -> dict[str, float]:
    """All the weight on the part with the lowest MSE on these rows."""
    return {min(parts, key=lambda part: np.mean((parts[part] - truth) ** 2)): 1.0}


def simplex_grid(parts: int, steps: int) -> np.ndarray:
    """Every weight vector of ``parts`` non-negative multiples of ``1 / steps`` that sum to 1, shape (points, parts)."""
    points = [w for w in itertools.product(range(steps + 1), repeat=parts) if sum(w) == steps]
    return np.array(points, dtype=np.float64) / steps


def least_squares(parts: dict[str, np.ndarray], truth: np.ndarray, steps: int = 20) -> dict[str, float]:
    """Stacking: the non-negative weights summing to 1, on a grid of ``1 / steps``, whose blend has the lowest MSE on
    these rows (the first such point of :func:`simplex_grid` on a tie). Shapes: parts (N,), truth (N,)."""
    names = list(parts)
    grid = simplex_grid(len(names), steps)  # (G, P)
    blends = np.stack([parts[name] for name in names], axis=1) @ grid.T  # (N, G)
    best = grid[int(np.argmin(np.mean((blends - truth[:, None]) ** 2, axis=0)))]
    return {name: float(weight) for name, weight in zip(names, best, strict=True) if weight > 0}


#: The blend rules ``--blend-rules`` compares: each maps the parts' predictions and the truth of some rows to
#: weights. Today's is :func:`~graphormer_urpe.evaluation.blend.blend_weights` (inverse MSE, within 1.5x).
TODAYS_RULE = "inverse MSE, within 1.5x (today's)"
BLEND_RULES = {
    TODAYS_RULE: lambda parts, truth: inverse_errors(parts, truth, 1.0),
    "inverse squared MSE, within 1.5x": lambda parts, truth: inverse_errors(parts, truth, 2.0),
    "the best part alone": best_part,
    "least squares (weights >= 0, summing to 1)": least_squares,
    "the network ensemble alone": lambda parts, truth: {"ensemble": 1.0},
}
#: Rule 4 (docs/small-data.md), fixed before the final arm's sweeps: over all of :data:`SETS`, the rule with the lowest
#: mean held-out ratio replaces today's if that mean is at least this much lower than today's.
RULE_MARGIN = 0.02
#: The parts a recipe arm's blend weighs.
BLENDED_PARTS = ("ensemble", "trees", "kernel")


def recipe_parts(name: str, arm: str, split: str) -> dict[str, np.ndarray]:
    """A recipe arm's stored predictions of one split (``valid`` or ``test``) per part of :data:`BLENDED_PARTS`,
    shape (rows,); empty when the arm has not finished on the set."""
    entries = {e["part"]: e for e in checked_results(name) if e["arm"] == arm and e["part"] != "member"}
    if "ensemble" not in entries:
        return {}
    return {part: np.asarray(entries[part][f"{split}_predictions"]) for part in BLENDED_PARTS}


@dataclass(frozen=True)
class ShippedValidation:
    """What a script varying one cheap part reads of a set: the shipped arm's stored validation predictions per part
    of :data:`BLENDED_PARTS` (each (V,)), the training and validation rows, the validation targets (V,)."""

    parts: dict[str, np.ndarray]
    train: pd.DataFrame
    valid: pd.DataFrame
    truth: np.ndarray


def shipped_validation(name: str) -> ShippedValidation | None:
    """:class:`ShippedValidation` of set ``name``; None where the shipped arm has not finished there."""
    parts = recipe_parts(name, SHIPPED_ARM, "valid")
    if not parts:
        return None
    table = read_set(name)
    valid = table[table["split"] == "valid"]
    return ShippedValidation(parts, table[table["split"] == "train"], valid, valid["y"].to_numpy(dtype=np.float64))


def product_blend(parts: dict[str, np.ndarray], truth: np.ndarray) -> np.ndarray:
    """The blend the recipe's own rule (``blend_weights``: inverse MSE over the parts within 1.5x of the best) makes
    of one target's parts, its weights chosen on these very rows. Shapes: each part (V,), truth (V,) -> (V,)."""
    from graphormer_urpe.evaluation.blend import blend, blend_weights

    columns = {part: values[:, None] for part, values in parts.items()}  # (V, 1): one target
    weights = blend_weights(columns, truth[:, None], ["y"])
    return blend(columns, [weights["y"]])[:, 0]


def variants_main(
    argv: Sequence[str] | None,
    description: str,
    set_figures: Callable[[str], dict],
    verdict_text: Callable[[dict], str],
    written: str,
) -> None:
    """The command of a script that varies one cheap part on the validation rows (rules 12 and 17): each set's
    figures (``set_figures``, printed as they come), then the verdict (``verdict_text``), written to
    ``RESULTS / written`` and printed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    options = parser.parse_args(argv)
    figures = {}
    for name in options.sets:
        figures[name] = set_figures(name)
        print(f"{name}: {figures[name] or 'not finished'}", flush=True)
    text = verdict_text(figures)
    (RESULTS / written).write_text(text)
    print(text)


def held_out_ratios(arm: str, splits: int = 500) -> dict[str, dict[str, float]]:
    """Per set of :data:`SETS` where the recipe arm finished, per rule of :data:`BLEND_RULES`: the mean RMSE of the
    rule's blend on held-out halves of the validation rows relative to the network ensemble's on the same half. The
    validation rows are cut into two random halves ``splits`` times (seed 0); the rule weighs the parts on one half
    and is scored on the other (and the other way round). Validation rows only: no test row is read.

    Raises:
        BenchError: today's rule, applied here, is not the product's (``blend_weights``) on a set's validation rows.
    """
    from graphormer_urpe.evaluation.blend import blend_weights

    ratios = {}
    for name in SETS:
        parts = recipe_parts(name, arm, "valid")
        if not parts:
            continue
        truth = read_set(name).query("split == 'valid'")["y"].to_numpy()
        whole = blend_weights({part: values[:, None] for part, values in parts.items()}, truth[:, None], ["y"])["y"]
        here = BLEND_RULES[TODAYS_RULE](parts, truth)  # must be the rule as the ensemble applies it (every row here)
        if whole.keys() != here.keys() or not np.allclose([whole[p] for p in here], list(here.values())):
            raise BenchError(f"{name}: today's rule gives {whole} on the validation rows, this copy of it {here}")
        rng = np.random.default_rng(0)
        held_out = {rule: [] for rule in BLEND_RULES}
        for _ in range(splits):
            order = rng.permutation(len(truth))
            halves = order[: len(truth) // 2], order[len(truth) // 2 :]
            for chosen, scored in (halves, halves[::-1]):
                network = rmse(parts["ensemble"][scored], truth[scored])
                for rule, weigh in BLEND_RULES.items():
                    weights = weigh({part: values[chosen] for part, values in parts.items()}, truth[chosen])
                    blended = sum(weight * parts[part][scored] for part, weight in weights.items())
                    held_out[rule].append(rmse(blended, truth[scored]) / network)
        ratios[name] = {rule: float(np.mean(values)) for rule, values in held_out.items()}
    return ratios


def chosen_rule(ratios: dict[str, dict[str, float]]) -> str | None:
    """Rule 4's verdict on :func:`held_out_ratios`: the rule with the lowest mean ratio over the sets if it is at
    least :data:`RULE_MARGIN` lower than today's, else today's; None until the arm has finished on all of
    :data:`SETS`."""
    if set(ratios) != set(SETS):
        return None
    means = {rule: float(np.mean([ratios[name][rule] for name in SETS])) for rule in BLEND_RULES}
    best = min(means, key=means.get)
    return best if means[best] <= (1 - RULE_MARGIN) * means[TODAYS_RULE] else TODAYS_RULE


def blend_rules(arm: str, splits: int = 500) -> str:
    """:func:`held_out_ratios` as a Markdown table (per set and rule, and the mean over the sets), and rule 4's
    verdict (:func:`chosen_rule`) once the arm has finished on all of :data:`SETS`."""
    ratios = held_out_ratios(arm, splits)
    rows = []
    for name, by_rule in ratios.items():
        validation = int((read_set(name)["split"] == "valid").sum())
        rows.append(f"| {name} | {validation} | " + " | ".join(f"{by_rule[rule]:.3f}" for rule in BLEND_RULES) + " |")
    means = [np.mean([by_rule[rule] for by_rule in ratios.values()]) if ratios else None for rule in BLEND_RULES]
    header = "| set | validation rows | " + " | ".join(BLEND_RULES) + " |"
    mean = "| mean | | " + " | ".join("" if value is None else f"{value:.3f}" for value in means) + " |"
    rule = chosen_rule(ratios)
    if rule is None:
        verdict = f"Rule 4 decides once {arm} has finished on all {len(SETS)} sets ({len(ratios)} so far)."
    elif rule == TODAYS_RULE:
        verdict = f"**Rule 4: today's rule stays** (no rule's mean is {RULE_MARGIN:.0%} below today's)."
    else:
        verdict = f'**Rule 4: "{rule}" replaces today\'s rule** (its mean at least {RULE_MARGIN:.0%} below).'
    return "\n".join([header, "|---|---|" + "---|" * len(BLEND_RULES), *rows, mean, "", verdict]) + "\n"


def ruled_blend(name: str, arm: str, rule: str, table: pd.DataFrame) -> Figure:
    """A recipe arm's blend on the set by one of :data:`BLEND_RULES`: its weights chosen on all the validation rows
    from the stored parts' predictions, applied to their test predictions; scored as the arm's ``blend``."""
    valid, test = recipe_parts(name, arm, "valid"), recipe_parts(name, arm, "test")
    truth = table.loc[table["split"] == "valid", "y"].to_numpy()
    weights = BLEND_RULES[rule](valid, truth)
    blended = sum(weight * test[part] for part, weight in weights.items())
    in_sample = sum(weight * valid[part] for part, weight in weights.items())
    figures = scores(blended, table)
    return Figure(arm, "blend", figures["test_rmse"], figures["test_cliff_rmse"], val_rmse=rmse(in_sample, truth))


#: The previous release's blend rule: the weight of this grid whose blend has the lowest validation MAE.
GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


def grid_weight(first: np.ndarray, second: np.ndarray, truth: np.ndarray) -> float:
    """The weight of ``second`` by the previous release's rule: the point of :data:`GRID` whose blend
    ``(1 - w) first + w second`` has the lowest MAE on these rows, the smaller on a tie."""
    errors = [np.mean(np.abs((1 - w) * first + w * second - truth)) for w in GRID]
    return GRID[int(np.argmin(errors))]


def blend_stability(sets: Sequence[str], resamples: int = 1000) -> str:
    """How much each rule's weights move when the validation rows change: for each set, the trees (on the RDKit
    descriptors) and the fingerprint kernel are fitted on the training rows and predict the validation rows; over
    ``resamples`` bootstrap resamples of those rows (seed 0), the trees' weight in a blend of the two by the
    previous rule (:func:`grid_weight`) and by today's (:func:`~graphormer_urpe.evaluation.blend.blend_weights`):
    its mean, standard deviation and the share of resamples that give one part all the weight. Validation rows
    only: no test row is read. A Markdown table."""
    from graphormer_urpe.data.sources.fingerprints import ecfp_count_matrix
    from graphormer_urpe.data.sources.molecule_features import MoleculeFeatures
    from graphormer_urpe.evaluation.blend import DescriptorTrees, blend_weights, tree_inputs
    from graphormer_urpe.evaluation.kernel import FingerprintKernel

    lines = [
        "| set | validation rows | grid rule: trees' weight | all or nothing | inverse errors: trees' weight | "
        "all or nothing |",
        "|---|---|---|---|---|---|",
    ]
    features = MoleculeFeatures("rdkit2d")
    for name in sets:
        table = read_set(name)
        train, valid = table[table["split"] == "train"], table[table["split"] == "valid"]
        targets = train[["y"]].to_numpy()
        trees = DescriptorTrees.fit("regression", ["y"], tree_inputs(features, train["smiles"]), targets)
        kernel = FingerprintKernel.fit("regression", ["y"], ecfp_count_matrix(train["smiles"].tolist()), targets)
        parts = {
            "kernel": kernel.predict(ecfp_count_matrix(valid["smiles"].tolist())),
            "trees": trees.predict(tree_inputs(features, valid["smiles"])),
        }
        truth = valid[["y"]].to_numpy()
        rng = np.random.default_rng(0)
        grid, inverse = [], []
        for _ in range(resamples):
            rows = rng.integers(0, len(valid), len(valid))
            grid.append(grid_weight(parts["kernel"][rows, 0], parts["trees"][rows, 0], truth[rows, 0]))
            chosen = blend_weights({part: values[rows] for part, values in parts.items()}, truth[rows], ["y"])
            inverse.append(chosen["y"].get("trees", 0.0))
        columns = [
            f"{np.mean(weights):.2f} +- {np.std(weights):.2f} | {np.mean(np.isin(weights, (0.0, 1.0))):.0%}"
            for weights in (grid, inverse)
        ]
        lines.append(f"| {name} | {len(valid)} | {columns[0]} | {columns[1]} |")
        print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=[])
    parser.add_argument("--chemprop", default=None, help="the chemprop 2.3.1 executable (its own environment)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs (peers) or sweeps (the recipe's arms) at a time, one thread each"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=REPO / "runs" / "moleculeace",
        help="scratch: tables, runs, logs (default runs/moleculeace)",
    )
    parser.add_argument("--report", action="store_true", help="write the tables from the results")
    parser.add_argument(
        "--final-reading",
        action="store_true",
        help="with --report: the recipe's test figures and ratios too (once its candidates are chosen)",
    )
    parser.add_argument(
        "--selection",
        nargs=2,
        metavar=("CANDIDATE", "RECIPE"),
        help="whether a candidate recipe arm (one of CANDIDATES, or a recipe arm from another checkpoint: "
        "ARM@SHA256-PREFIX) replaces the recipe, by the rule fixed before on validation figures of SELECTION_SETS "
        "(bench/results/moleculeace/selection-CANDIDATE.md)",
    )
    parser.add_argument(
        "--validation-reading",
        nargs=2,
        metavar=("CANDIDATE", "RECIPE"),
        help="rule 14: whether a candidate replaces the recipe, by WIDER_BOUNDS on validation figures of READING_SETS, "
        "which the shipped arm was not chosen on (bench/results/moleculeace/validation_reading-CANDIDATE.md)",
    )
    parser.add_argument(
        "--second-reading",
        nargs=2,
        metavar=("CANDIDATE", "RECIPE"),
        help="whether a candidate chosen on SELECTION_SETS changes the shipped config (or, ARM@SHA256-PREFIX, the "
        "shipped checkpoint), by the rule fixed before on the test figures of the other sets "
        "(bench/results/moleculeace/second_reading-CANDIDATE.md)",
    )
    parser.add_argument(
        "--blend-rules",
        metavar="ARM",
        help="compare blend rules on held-out halves of the validation rows of the sets where this recipe arm "
        "(or ARM@SHA256-PREFIX) finished, and give rule 4's verdict once it has finished on all of them "
        "(bench/results/moleculeace/blend_rules-ARM.md)",
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="fine-tune the recipe arms from this pretrained checkpoint (under --work) instead of the shipped one; "
        "their results go to ARM@<its SHA-256's first 12 digits> (rule 2 of docs/small-data.md)",
    )
    parser.add_argument(
        "--blend-stability",
        action="store_true",
        help="measure how the blend rules' weights move under resampling of the validation rows "
        "(bench/results/moleculeace/blend_stability.md)",
    )
    options = parser.parse_args(argv)
    options.work = options.work.resolve()  # the results record commands with paths relative to it (portable)
    pairs = {
        "--selection": options.selection,
        "--validation-reading": options.validation_reading,
        "--second-reading": options.second_reading,
    }
    for flag, pair in pairs.items():
        if not pair:
            continue
        candidate, recipe = pair
        if candidate not in CANDIDATES and not ("@" in candidate and arm_of(candidate) is not None):
            parser.error(f"{flag} {candidate}: not a candidate ({', '.join(CANDIDATES)}, or ARM@SHA256-PREFIX)")
        if recipe not in ARMS or ARMS[recipe].kind != "recipe":
            parser.error(f"{flag} ... {recipe}: not a recipe arm")
    if options.blend_rules and (arm_of(options.blend_rules) is None or arm_of(options.blend_rules).kind != "recipe"):
        parser.error(f"--blend-rules {options.blend_rules}: not a recipe arm (or ARM@SHA256-PREFIX)")
    if options.init_from is not None:
        options.init_from = options.init_from.resolve()
        if not options.init_from.is_file():
            parser.error(f"--init-from {options.init_from}: no such file")
        if not options.init_from.is_relative_to(options.work):
            # the committed results record the command with paths relative to --work: none of this machine's
            parser.error(f"--init-from {options.init_from}: put the checkpoint under --work ({options.work})")
    if options.jobs < 1:
        parser.error(f"--jobs {options.jobs}: must be at least 1")
    if options.final_reading and not options.report:
        parser.error("--final-reading goes with --report")
    tasks = (options.arms, options.report, options.blend_stability, options.blend_rules, *pairs.values())
    if not any(tasks):
        parser.error(
            "nothing to do: give --arms, --report, --selection, --validation-reading, --second-reading, --blend-rules "
            "or --blend-stability"
        )
    return options


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    if any(ARMS[arm].kind == "chemprop" for arm in options.arms) and options.chemprop is None:
        raise BenchError("chemprop's arms need --chemprop PATH, the chemprop 2.3.1 executable (docs/small-data.md)")
    peers = [arm for arm in options.arms if ARMS[arm].kind != "recipe"]
    if peers:
        run_peers(options.sets, peers, options.work, options.chemprop, options.jobs)
    recipes = [arm for arm in options.arms if ARMS[arm].kind == "recipe"]
    if recipes:
        run_recipes(options.sets, recipes, options.work, options.init_from, options.jobs)
    if options.blend_stability:
        text = blend_stability(options.sets)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "blend_stability.md").write_text(text)
    if options.blend_rules:
        text = blend_rules(options.blend_rules)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"blend_rules-{options.blend_rules}.md").write_text(text)
        print(text)
    if options.selection:
        text = selection(*options.selection)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"selection-{options.selection[0]}.md").write_text(text)
        print(text)
    if options.validation_reading:
        text = selection(*options.validation_reading, wider=True)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"validation_reading-{options.validation_reading[0]}.md").write_text(text)
        print(text)
    if options.second_reading:
        text = second_reading(*options.second_reading)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"second_reading-{options.second_reading[0]}.md").write_text(text)
        print(text)
    if options.report:
        text = report(options.sets, options.final_reading)
        (RESULTS / "README.md").write_text(text)
        print(text)


if __name__ == "__main__":
    sys.exit(exit_code(main))
