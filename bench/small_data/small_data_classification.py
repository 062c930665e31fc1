"""The small-data recipe on a binary table against chemprop 2.3.1: ROC-AUC and PR-AUC on B3DB's blood-brain barrier
labels (BBB+ / BBB-), same rows and splits for every arm, several seeds and scaffold splits (docs/small-data.md).

    python bench/small_data/small_data_classification.py --chemprop /path/to/chemprop-venv/bin/chemprop --out DIR
    python bench/small_data/small_data_classification.py --chemprop CHEMPROP --out DIR --molecules 2000 \
        --split-seeds 0 1 --seeds 0 1 2 --jobs 2

The table is ``B3DB_classification.tsv`` of the ``qc-b3db`` wheel (``pip install --no-deps qc-b3db==1.1.1``; located,
never imported): rows RDKit parses, repeats of a canonical SMILES dropped (``small_data.clean_table``), then
``--molecules`` of them drawn with a fixed seed (0) so that the benchmark fits a few CPU hours. Each split seed gives
one balanced scaffold split (``balanced_scaffold_split``, chemprop's ``scaffold_balanced`` rule, 0.8 / 0.1 / 0.1),
written once as ``DIR/data/split<s>/table.csv`` (``smiles``, ``bbb``, ``split``) and ``chemprop_splits.json``.

Arms, on every split and seed:

* ``recipe``: ``graphormer-urpe sweep --config small_molecules_classification --ensemble --trees`` (the shipped
  pretrained encoder, RDKit descriptors at the readout, early stopping on validation ROC-AUC) on the split's table,
  each seed's run scored, and the saved ensemble of the seeds (their mean probability), the descriptor trees alone,
  and the blend (its weight chosen on validation ROC-AUC);
* ``chemprop``: ``chemprop train --task-type classification`` with its defaults (the split file, the seed, no loader
  workers, the CPU), each run scored from its ``model_0/test_predictions.csv``, and the seeds' mean probability;
* ``chemprop+rdkit``: the same with ``--molecule-featurizers v1_rdkit_2d_normalized``.

Every arm's test predictions are scored here by the same definitions, the project's task metrics
(``DefinedBinaryAUROC``, ``DefinedBinaryAveragePrecision``). ``DIR/results.json`` holds every run and the summary;
``DIR/results.md`` the table: per split and arm the mean +- sample std over seeds, the ensembles' single values, and
the mean over the splits. A run whose result exists in ``DIR/runs.jsonl`` is skipped on the next invocation; a
directory whose recipe entries ran on another content of ``small_molecules_classification.yaml`` (each entry records
its :func:`~bench.common.configuration`) is refused before anything is written: use a new ``--out``.

``--cheap-parts`` trains no network and needs no chemprop: on the same rows and splits it measures the saved
ensemble's cheap parts alone (:func:`cheap_parts`; about 4 CPU minutes for 2,000 molecules and two splits, most of it
RDKit's descriptors): the trees on the descriptors (the recipe's), the trees on the descriptors and Morgan counts
(``--data.source.fingerprints ecfp``), the fingerprint kernel (``--kernel``) and their blends by the project's rule;
validation and test ROC-AUC and PR-AUC, ``DIR/cheap_parts.json`` and ``DIR/cheap_parts.md``:

    python bench/small_data/small_data_classification.py --cheap-parts --out DIR --molecules 2000 --split-seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import SWEEP, BenchError, PackagedDataset, configuration, package_file
from bench.small_data.small_data import Prepared, chemprop_splits, clean_table, run_child, split_names
from graphormer_urpe.data.sources.molecule_features import MoleculeFeatures
from graphormer_urpe.data.sources.tables import balanced_scaffold_split
from graphormer_urpe.evaluation.blend import blend, blend_weights
from graphormer_urpe.evaluation.ensemble import CheapParts, SavedEnsemble
from graphormer_urpe.tasks.metrics import DefinedBinaryAUROC, DefinedBinaryAveragePrecision

B3DB = PackagedDataset(
    "b3db_class",
    "B3DB blood-brain barrier permeability (BBB+ = 1)",
    "B3DB",
    "qc-b3db==1.1.1",
    ("B3DB_classification.tsv",),
    "\t",
    "SMILES",
    "BBB+/BBB-",
    "bbb",
    "label",
)
FRACTIONS = (0.8, 0.1, 0.1)
ARMS = {"chemprop": "", "chemprop+rdkit": "--molecule-featurizers v1_rdkit_2d_normalized"}
RUNS = "runs.jsonl"
#: The cheap parts ``--cheap-parts`` fits on each split's training rows, as ``graphormer-urpe ensemble`` fits them
#: (:meth:`CheapParts.fit`): name -> (the runs' molecule features, which the trees read; trees; kernel).
CHEAP_FITS = {
    "trees": (MoleculeFeatures("rdkit2d"), True, False),  # the recipe's trees (small_molecules_classification)
    "trees+ecfp": (MoleculeFeatures("rdkit2d", (), "ecfp"), True, False),  # runs with --data.source.fingerprints ecfp
    "kernel": (MoleculeFeatures(), False, True),  # --kernel: reads the fingerprints whatever the runs' features
}
#: The blends of cheap parts ``--cheap-parts`` measures: name -> parts, weighed by the project's rule
#: (``blend_weights``: inverse validation Brier scores of the parts within 1.5x of the best).
CHEAP_BLENDS = {"trees + kernel": ("trees", "kernel"), "trees+ecfp + kernel": ("trees+ecfp", "kernel")}
#: The rows a cheap part is scored on: the validation rows choose the blends' weights, the test rows only report.
SCORED = ("valid", "test")
#: The figures of a cheap part, in the order of :func:`cheap_report`'s columns.
CHEAP_FIGURES = ("valid_brier", "valid_roc_auc", "valid_pr_auc", "test_roc_auc", "test_pr_auc")


def scores(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """ROC-AUC and PR-AUC by the project's task metrics (NaN for one class). Shapes: (N,), (N,) 0/1."""
    p, y = torch.tensor(probabilities, dtype=torch.float32), torch.tensor(labels).long()
    return {"roc_auc": float(DefinedBinaryAUROC()(p, y)), "pr_auc": float(DefinedBinaryAveragePrecision()(p, y))}


def b3db_table(molecules: int) -> pd.DataFrame:
    """The benchmark's rows: B3DB's labelled molecules, cleaned, ``molecules`` of them drawn with seed 0."""
    path = package_file(B3DB)
    frame = pd.read_csv(path, sep="\t", dtype={"SMILES": str})
    labels = frame["BBB+/BBB-"].map({"BBB+": 1, "BBB-": 0})
    if labels.isna().any():
        other = sorted(set(frame["BBB+/BBB-"]) - {"BBB+", "BBB-"})
        raise BenchError(f"{path}: labels other than BBB+ and BBB-: {other}")
    table, _ = clean_table(pd.DataFrame({"smiles": frame["SMILES"].str.strip(), "bbb": labels.astype(int)}))
    rows = np.sort(np.random.default_rng(0).choice(len(table), size=min(molecules, len(table)), replace=False))
    return table.iloc[rows].reset_index(drop=True)


@dataclass(frozen=True)
class Split:
    """One scaffold split of the benchmark's rows (its seed), written as the regression benchmark writes a dataset."""

    seed: int
    prepared: Prepared  # its directory (table.csv, chemprop_splits.json) and rows per split

    @property
    def directory(self) -> Path:
        return self.prepared.directory

    @property
    def table(self) -> Path:
        return self.prepared.table

    @property
    def rows(self) -> dict[str, np.ndarray]:
        return self.prepared.splits


def write_split(table: pd.DataFrame, seed: int, out: Path) -> Split:
    rows, _ = balanced_scaffold_split(table["smiles"].tolist(), FRACTIONS, seed)
    split = Split(seed, Prepared(f"split{seed}", out / "data" / f"split{seed}", "bbb", rows))
    if not split.table.is_file():
        split.directory.mkdir(parents=True, exist_ok=True)
        table.assign(split=split_names(rows, len(table))).to_csv(split.table, index=False)
        (split.directory / "chemprop_splits.json").write_text(json.dumps(chemprop_splits(rows)) + "\n")
    return split


def test_rows(split: Split) -> pd.DataFrame:
    return pd.read_csv(split.table).iloc[split.rows["test"]]


#: The recipe's config, whose content (:func:`~bench.common.configuration`) each of its entries records.
RECIPE_CONFIG = "--config small_molecules_classification"
#: The arm of each part of the recipe's saved ensemble the sweep's entries report, beside each seed's (``recipe``).
PART_ARMS = {"ensemble": "recipe, ensemble", "trees": "descriptor trees", "blend": "recipe, ensemble + trees"}
#: The arms of the entries the recipe's sweep writes.
RECIPE_ARMS = ("recipe", *PART_ARMS.values())


def check_recipe_configuration(done: Sequence[dict], path: Path) -> None:
    """Refuse to resume a directory whose recipe entries ran on another content of the recipe's config (or before
    entries recorded it): mixed with today's runs they would mislead.

    Raises:
        BenchError: naming the file and what to do.
    """
    today = configuration(RECIPE_CONFIG)
    if any(entry["arm"] in RECIPE_ARMS and entry.get("configuration") != today for entry in done):
        raise BenchError(
            f"{path}: the recipe's runs there ran on another content of small_molecules_classification.yaml than "
            "today's: use a new --out"
        )


def run_recipe(split: Split, seeds: Sequence[int], out: Path, threads: int) -> list[dict]:
    """The recipe's sweep on one split: one entry per seed, then the ensemble, the trees and the blend."""
    name = f"recipe-split{split.seed}"
    command = [
        *SWEEP,
        *RECIPE_CONFIG.split(),
        "--seeds",
        *map(str, seeds),
        "--name",
        name,
        "--ensemble",
        "--trees",
        "--run_root",
        str(out / "runs"),
        "--data.source.path",
        str(split.table),
        "--data.source.targets",
        "[bbb]",
        "--data.source.split",
        "column",
        "--data.source.split_column",
        "split",
        "--data.root",
        str(out / "cache" / name),
        "--trainer.enable_progress_bar",
        "false",
    ]
    (out / "logs").mkdir(exist_ok=True)
    code, cpu, wall = run_child(command, out / "logs" / f"{name}.log", threads)
    if code:
        raise BenchError(f"{name} failed (exit code {code}): see {out / 'logs' / f'{name}.log'}")
    configured = configuration(RECIPE_CONFIG)
    entries = []
    for seed in seeds:
        metrics = json.loads((out / "runs" / f"{name}-seed{seed}" / "metrics.json").read_text())["test"]
        entries.append(
            {
                "split": split.seed,
                "arm": "recipe",
                "configuration": configured,
                "seed": seed,
                "roc_auc": metrics["test/auroc"],
                "pr_auc": metrics["test/auprc"],
            }
        )
    record = SavedEnsemble(out / "runs" / f"{name}-ensemble-trees").record
    for part, arm in PART_ARMS.items():
        test = record.scores["test"][part]
        entries.append(
            {
                "split": split.seed,
                "arm": arm,
                "configuration": configured,
                "seed": None,
                "roc_auc": test["test/auroc"],
                "pr_auc": test["test/auprc"],
                "tree_weight": record.blend_weights["bbb"].get("trees", 0.0),
            }
        )
    entries[0] |= {"cpu_seconds_all_seeds": round(cpu, 1), "wall_seconds_all_seeds": round(wall, 1)}
    return entries


def run_chemprop(split: Split, arm: str, seed: int, executable: str, out: Path, threads: int) -> dict:
    """One chemprop run, scored from its test predictions (checked to be the split's test rows, in order)."""
    name = f"{arm}-split{split.seed}-seed{seed}"
    output = out / "chemprop" / name
    command = [
        executable,
        "train",
        "--data-path",
        str(split.table),
        "--smiles-columns",
        "smiles",
        "--target-columns",
        "bbb",
        "--task-type",
        "classification",
        "--splits-file",
        str(split.directory / "chemprop_splits.json"),
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
        *ARMS[arm].split(),
    ]
    (out / "logs").mkdir(exist_ok=True)
    code, cpu, wall = run_child(command, out / "logs" / f"{name}.log", threads)
    if code:
        raise BenchError(f"{name} failed (exit code {code}): see {out / 'logs' / f'{name}.log'}")
    test = test_rows(split)
    predicted = pd.read_csv(output / "model_0" / "test_predictions.csv")
    if predicted["smiles"].tolist() != test["smiles"].tolist():
        raise BenchError(f"{output}: chemprop's test molecules are not the split's test rows in order")
    probabilities = predicted["bbb"].to_numpy(np.float64)
    return {
        "split": split.seed,
        "arm": arm,
        "seed": seed,
        **scores(probabilities, test["bbb"].to_numpy()),
        "probabilities": probabilities.tolist(),
        "cpu_seconds": round(cpu, 1),
        "wall_seconds": round(wall, 1),
    }


def cheap_parts(split: Split) -> list[dict]:
    """The saved ensemble's cheap parts alone on one split (no network): each of :data:`CHEAP_FITS` fitted on the
    split's training rows and predicting its validation and test rows, then each blend of :data:`CHEAP_BLENDS` with
    its weights chosen on the validation rows (``blend_weights``, Brier scores). One entry per part: its validation
    Brier score, ROC-AUC and PR-AUC on the validation and test rows (:func:`scores`), the blend's weights, the CPU
    seconds of its fit and predictions (a blend: of its weights)."""
    table = pd.read_csv(split.table)
    frames = {name: table.iloc[split.rows[name]] for name in ("train", *SCORED)}
    smiles = {name: frame["smiles"].tolist() for name, frame in frames.items()}
    labels = {name: frame[["bbb"]].to_numpy(np.float64) for name, frame in frames.items()}  # (R, 1)
    predicted: dict[str, dict[str, np.ndarray]] = {}  # part -> rows -> (R, 1) probabilities of BBB+
    weights: dict[str, dict[str, float] | None] = {}
    seconds = {}
    for part, (features, trees, kernel) in CHEAP_FITS.items():
        start = time.process_time()
        fitted = CheapParts.fit("binary", ["bbb"], smiles["train"], labels["train"], features, trees, kernel)
        predicted[part] = {rows: fitted.predict(smiles[rows])["trees" if trees else "kernel"] for rows in SCORED}
        weights[part], seconds[part] = None, time.process_time() - start
    for name, parts in CHEAP_BLENDS.items():
        start = time.process_time()
        weights[name] = blend_weights({p: predicted[p]["valid"] for p in parts}, labels["valid"], ["bbb"])["bbb"]
        predicted[name] = {rows: blend({p: predicted[p][rows] for p in parts}, [weights[name]]) for rows in SCORED}
        seconds[name] = time.process_time() - start
    entries = []
    for part, values in predicted.items():
        figures = {
            f"{rows}_{metric}": value
            for rows in SCORED
            for metric, value in scores(values[rows][:, 0], labels[rows][:, 0]).items()
        }
        brier = float(np.mean((values["valid"] - labels["valid"]) ** 2))
        entries.append(
            {"split": split.seed, "part": part, "valid_brier": brier, **figures}
            | {"weights": weights[part], "cpu_seconds": round(seconds[part], 2)}
        )
    return entries


def cheap_summary(entries: Sequence[dict]) -> list[dict]:
    """Each part's entries of every split, then its mean over the splits (``split``: ``mean``)."""
    rows = []
    for part in dict.fromkeys(e["part"] for e in entries):
        group = [e for e in entries if e["part"] == part]
        rows += group
        rows.append(
            {"split": "mean", "part": part, **{f: statistics.fmean(e[f] for e in group) for f in CHEAP_FIGURES}}
        )
    return rows


def cheap_report(rows: Sequence[dict], setup: dict) -> str:
    """The cheap parts' table (Markdown): per part its rows of every split and their mean, the blends' weights."""
    lines = [
        f"B3DB classification, {setup['molecules']} molecules, balanced scaffold splits {setup['split_seeds']}: the "
        "cheap parts alone, fitted on the training rows; blends weighed on the validation rows' Brier scores. "
        "Test figures report only: nothing is chosen on them.",
        "",
        "| part | split | valid Brier | valid ROC-AUC | valid PR-AUC | test ROC-AUC | test PR-AUC | weights | CPU s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        figures = " | ".join(f"{row[f]:.3f}" for f in CHEAP_FIGURES)
        chosen = ", ".join(f"{p} {w:.2f}" for p, w in (row.get("weights") or {}).items())
        cpu = f"{row['cpu_seconds']:.1f}" if "cpu_seconds" in row else ""
        lines.append(f"| {row['part']} | {row['split']} | {figures} | {chosen} | {cpu} |")
    return "\n".join(lines) + "\n"


def summary(entries: Sequence[dict], splits: Sequence[Split]) -> list[dict]:
    """Per split and arm: mean and sample std over seeds (or the ensemble's value), n; chemprop's ensembles added
    (the seeds' mean probability); then every arm's mean over the splits."""
    entries = list(entries)
    for split in splits:
        for arm in ARMS:
            runs = [e for e in entries if e["split"] == split.seed and e["arm"] == arm]
            if runs:
                mean = np.mean([e["probabilities"] for e in runs], axis=0)
                entries.append(
                    {
                        "split": split.seed,
                        "arm": f"{arm}, ensemble",
                        "seed": None,
                        **scores(mean, test_rows(split)["bbb"].to_numpy()),
                    }
                )
    rows = []
    for arm in dict.fromkeys(e["arm"] for e in entries):
        for split in [*(s.seed for s in splits), "mean"]:
            group = [e for e in entries if e["arm"] == arm and (split == "mean" or e["split"] == split)]
            row = {"arm": arm, "split": split, "n": len(group)}
            for metric in ("roc_auc", "pr_auc"):
                values = [e[metric] for e in group]
                row[metric] = statistics.fmean(values)
                row[f"{metric}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
            rows.append(row)
    return rows


def report(rows: Sequence[dict], setup: dict) -> str:
    lines = [
        f"B3DB classification, {setup['molecules']} molecules, balanced scaffold splits {setup['split_seeds']}, "
        f"seeds {setup['seeds']}: test ROC-AUC and PR-AUC, mean +- sample std over seeds (an ensemble: one "
        "value per split; 'mean': over splits and seeds)",
        "",
        "| arm | split | n | ROC-AUC | PR-AUC |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['arm']} | {row['split']} | {row['n']} | {row['roc_auc']:.3f} +- {row['roc_auc_std']:.3f} "
            f"| {row['pr_auc']:.3f} +- {row['pr_auc_std']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def table_setup(table: pd.DataFrame, splits: Sequence[Split]) -> dict:
    """The benchmark's rows as the results record them: molecules, split seeds, labels, and per split the rows and
    BBB+ rows of each part."""
    return {
        "molecules": len(table),
        "split_seeds": [s.seed for s in splits],
        "labels": {"positive": int(table["bbb"].sum()), "negative": int((1 - table["bbb"]).sum())},
        "splits": {
            s.seed: {
                name: {"rows": len(rows), "positive": int(table["bbb"].iloc[rows].sum())}
                for name, rows in s.rows.items()
            }
            for s in splits
        },
    }


def run_cheap_parts(table: pd.DataFrame, splits: Sequence[Split], out: Path) -> list[dict]:
    """``--cheap-parts``: :func:`cheap_parts` on every split, written as ``cheap_parts.json`` and ``cheap_parts.md``."""
    entries = []
    for split in splits:
        print(f"[bench] split {split.seed}: cheap parts", flush=True)
        entries += cheap_parts(split)
    setup = table_setup(table, splits)
    rows = cheap_summary(entries)
    (out / "cheap_parts.json").write_text(json.dumps({"setup": setup, "summary": rows}, indent=1))
    (out / "cheap_parts.md").write_text(cheap_report(rows, setup))
    print(cheap_report(rows, setup))
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chemprop", help="the chemprop executable of chemprop's own environment")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--molecules", type=int, default=2000)
    parser.add_argument("--split-seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs side by side")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per run")
    parser.add_argument(
        "--cheap-parts",
        action="store_true",
        help="no network, no chemprop: the ensemble's cheap parts alone on the same splits (cheap_parts.md)",
    )
    options = parser.parse_args(argv)
    if options.chemprop is None and not options.cheap_parts:
        parser.error("--chemprop CHEMPROP is required (the chemprop 2.3.1 executable), unless --cheap-parts")
    options.out.mkdir(parents=True, exist_ok=True)
    done_path = options.out / RUNS
    done = [json.loads(line) for line in done_path.read_text().splitlines()] if done_path.is_file() else []
    if not options.cheap_parts:  # before anything is written
        check_recipe_configuration(done, done_path)
    table = b3db_table(options.molecules)
    splits = [write_split(table, seed, options.out) for seed in options.split_seeds]
    if options.cheap_parts:
        return run_cheap_parts(table, splits, options.out)
    finished = {(e["split"], e["arm"], e["seed"]) for e in done}

    def record(new: Sequence[dict]) -> None:
        with done_path.open("a") as handle:
            handle.writelines(json.dumps(e) + "\n" for e in new)
        done.extend(new)

    jobs = [(split, None, None) for split in splits if (split.seed, "recipe", options.seeds[0]) not in finished]
    jobs += [
        (split, arm, seed)
        for split in splits
        for arm in ARMS
        for seed in options.seeds
        if (split.seed, arm, seed) not in finished
    ]

    def work(job: tuple) -> list[dict]:
        split, arm, seed = job
        print(f"[bench] split {split.seed}: {arm or 'recipe'}{'' if seed is None else f' seed {seed}'}", flush=True)
        if arm is None:
            return run_recipe(split, options.seeds, options.out, options.threads)
        return [run_chemprop(split, arm, seed, options.chemprop, options.out, options.threads)]

    with ThreadPoolExecutor(options.jobs) as pool:
        for new in pool.map(work, jobs):
            record(new)
    setup = table_setup(table, splits) | {"seeds": options.seeds}
    rows = summary(done, splits)
    (options.out / "results.json").write_text(json.dumps({"setup": setup, "summary": rows, "runs": done}, indent=1))
    (options.out / "results.md").write_text(report(rows, setup))
    print(report(rows, setup))
    return rows


if __name__ == "__main__":
    main()
