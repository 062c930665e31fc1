"""Molecule-level features end to end: ``train.py --data.source.descriptors rdkit2d --data.source.feature_columns``,
``evaluate.py --split test`` and ``evaluate.py --predict`` on a table of new molecules (descriptors recomputed, the
feature column read from it)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from rdkit import Chem

import evaluate
import train
from graphormer_urpe.data.batch import GraphRecord, collate_graphs
from graphormer_urpe.data.sources.descriptors import normalised_descriptors
from graphormer_urpe.data.sources.featurize import molecule_graph
from graphormer_urpe.data.sources.tables import TableError
from graphormer_urpe.evaluation.new_molecules import predict_checkpoint
from graphormer_urpe.run.cli import RUN_DIR_ENV
from graphormer_urpe.tasks import GraphRegression
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.runs import SMALL_TABLE_LINES
from graphormer_urpe.testing.tolerance import rounding_tolerance

TINY = [
    "--data.num_workers",
    "0",
    "--data.preprocess_workers",
    "0",
    "--model.encoder.num_layers",
    "2",
    "--model.encoder.hidden_dim",
    "16",
    "--model.encoder.ffn_dim",
    "16",
    "--model.encoder.num_heads",
    "4",
    "--trainer.max_steps",
    "4",
    "--trainer.val_check_interval",
    "2",
    "--model.optim.warmup_steps",
    "1",
    "--trainer.enable_progress_bar",
    "false",
]


def record_of(smiles: str, features: np.ndarray) -> GraphRecord:
    graph = molecule_graph(smiles, np.zeros(0))
    return GraphRecord.from_graph(graph.x, graph.edge_index, graph.edge_attr, np.zeros(0, np.float32))._replace(
        molecule_features=features.astype(np.float32)
    )


@pytest.mark.slow
def test_descriptors_and_a_feature_column_train_evaluate_and_predict(tmp_path: Path) -> None:
    os.environ.pop(RUN_DIR_ENV, None)
    table = tmp_path / "mols.csv"
    lines = (REPO_DIR / "examples" / "qm9_sample.csv").read_text().splitlines(True)
    table.write_text("".join(lines[:SMALL_TABLE_LINES]))
    metrics = train.main(
        [
            "--config",
            "smiles_csv_example",
            "--data.source.path",
            str(table),
            "--data.source.descriptors",
            "rdkit2d",
            "--data.source.feature_columns",
            "[rings]",
            *TINY,
            "--data.root",
            str(tmp_path / "data"),
            "--run_root",
            str(tmp_path / "runs"),
            "--run_name",
            "run",
        ]
    )
    ckpt = Path(metrics["best_checkpoint"])
    task = GraphRegression.from_checkpoint(ckpt).eval()
    names = task.model.config.molecule_features
    assert len(names) == 218 and names[0].startswith("rdkit2d/") and names[-1] == "rings"
    assert task.model.molecule.projection.weight.any()  # trained away from its zero start
    frame = pd.read_csv(table)
    train_rows = np.load(next((tmp_path / "data").rglob("splits.npz")))["train"]
    rings = frame["rings"].to_numpy(np.float32)[train_rows].astype(np.float64)
    assert task.model.molecule.mean[-1].item() == pytest.approx(rings.mean(), rel=1e-6)  # training statistics
    assert task.model.molecule.std[-1].item() == pytest.approx(rings.std(), rel=1e-6)
    assert not task.model.molecule.mean[:-1].any() and (task.model.molecule.std[:-1] == 1).all()

    evaluated = evaluate.main(["--ckpt", str(ckpt), "--split", "test", "--out", str(tmp_path / "test.json")])
    assert evaluated.metrics["test/mae"] == pytest.approx(metrics["test"]["test/mae"], rel=1e-5)

    new = pd.DataFrame({"smiles": ["CCO", "c1ccccc1O", "C1CC(=O"], "rings": [0, "", 1]})
    new.to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "preds.csv"
    evaluate.main(["--ckpt", str(ckpt), "--predict", str(tmp_path / "new.csv"), "--out", str(out)])
    preds = pd.read_csv(out, keep_default_na=False)
    assert preds["error"].tolist() == ["", "", "RDKit cannot parse"]
    for row, rings_value in ((0, 0.0), (1, np.nan)):  # a missing feature cell is predicted as the training mean
        smiles = new["smiles"][row]
        features = np.append(normalised_descriptors(Chem.MolFromSmiles(smiles), tails="extend"), rings_value)
        with torch.no_grad():
            expected = task(collate_graphs([record_of(smiles, features)]))[0]
        predicted = preds.loc[row, ["gap_ev", "mu_debye"]].to_numpy(float)
        np.testing.assert_allclose(predicted, expected.numpy(), **rounding_tolerance(expected))

    new.drop(columns="rings").to_csv(tmp_path / "no_rings.csv", index=False)
    with pytest.raises(TableError, match="no column 'rings' \\(a feature column the model was trained with"):
        predict_checkpoint(ckpt, tmp_path / "no_rings.csv", out)  # the command prints it, exit code 2
