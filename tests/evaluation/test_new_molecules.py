"""predict (``evaluate.py --predict`` in a checkout): new molecules through the training pipeline, one output row per
input row, the input's own columns kept beside the predictions."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import evaluate
import train
from graphormer_urpe.data.batch import GraphRecord, collate_graphs
from graphormer_urpe.data.sources.featurize import molecule_graph
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.errors import DataError
from graphormer_urpe.evaluation.new_molecules import model_of, predict_checkpoint
from graphormer_urpe.run.cli import RUN_DIR_ENV
from graphormer_urpe.tasks import Classification, GraphRegression
from graphormer_urpe.testing.directories import read_only_directory
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
NEW = ["CCO", "not a molecule", "c1ccccc1O", "", "CCO", "  C1CC1  ", "C1CC(=O"]


def trained(tmp: Path, config: str, *overrides: str) -> tuple[Path, Path]:
    """Checkpoint and run directory of a tiny run of ``config``."""
    os.environ.pop(RUN_DIR_ENV, None)  # module fixtures run before the per-test reset of conftest
    metrics = train.main(
        [
            "--config",
            config,
            *TINY,
            *overrides,
            "--data.root",
            str(tmp / "data"),
            "--run_root",
            str(tmp / "runs"),
            "--run_name",
            "run",
        ]
    )
    return Path(metrics["best_checkpoint"]), tmp / "runs" / "run"


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return trained(tmp_path_factory.mktemp("regression"), "smiles_csv_example")


def expected_prediction(task: torch.nn.Module, smiles: str) -> torch.Tensor:
    """The model's output for one molecule, featurised and structured by hand."""
    graph = molecule_graph(smiles, np.zeros(0))
    structure = graph_structure(len(graph.x), graph.edge_index)
    record = GraphRecord(
        x=graph.x,
        edge_index=graph.edge_index,
        edge_attr=graph.edge_attr,
        spd=structure.spd,
        first_edge=structure.first_edge,
        in_degree=structure.in_degree,
        out_degree=structure.out_degree,
        y=np.zeros(0, np.float32),
        index=0,
    )
    with torch.no_grad():
        return task.eval()(collate_graphs([record]))[0]


def test_predictions_keep_every_row_in_order_with_reasons_for_failures(regression_run, tmp_path: Path) -> None:
    ckpt, run_dir = regression_run
    pd.DataFrame({"name": [f"m{k}" for k in range(len(NEW))], "smiles": NEW}).to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "out" / "preds.csv"
    # the command of docs/own-data.md: the run's own config file, the checkpoint, the new table
    result = evaluate.main(
        [
            "--config",
            str(run_dir / "config.yaml"),
            "--ckpt",
            str(ckpt),
            "--predict",
            str(tmp_path / "new.csv"),
            "--out",
            str(out),
        ]
    )
    assert (result.rows, result.predicted, result.failed) == (7, 4, 3)
    preds = pd.read_csv(out, keep_default_na=False)
    assert list(preds.columns) == ["row", "name", "smiles", "gap_ev", "mu_debye", "error"]  # the input's, then ours
    assert preds["row"].tolist() == list(range(7))
    assert preds["name"].tolist() == [f"m{k}" for k in range(len(NEW))]
    assert preds["smiles"].tolist() == NEW  # as the table holds them
    spaced = "whitespace inside the SMILES 'not a molecule' (RDKit would read only 'not')"
    assert preds["error"].tolist() == ["", spaced, "", "empty SMILES", "", "", "RDKit cannot parse"]
    assert (preds.loc[[1, 3, 6], ["gap_ev", "mu_debye"]] == "").all().all()  # empty, not a number
    task = GraphRegression.from_checkpoint(ckpt)
    for row in (0, 2, 5):
        expected = expected_prediction(task, NEW[row].strip())  # data units: normalisation undone
        # alone here, padded in a batch of 7 there: other summation orders
        predicted = preds.loc[row, ["gap_ev", "mu_debye"]].to_numpy(float)
        np.testing.assert_allclose(predicted, expected.numpy(), **rounding_tolerance(expected))
    assert preds.loc[0, "gap_ev"] == preds.loc[4, "gap_ev"]  # a repeated molecule is predicted again
    embedded = evaluate.main(
        ["--ckpt", str(ckpt), "--predict", str(tmp_path / "new.csv"), "--out", str(tmp_path / "again.csv")]
    )  # the config stored in the checkpoint
    assert embedded.rows == 7 and (tmp_path / "again.csv").read_text() == out.read_text()


def test_every_line_comes_back_blank_lines_and_smiles_with_whitespace_with_a_reason(
    regression_run, tmp_path: Path
) -> None:
    """A one-column table: a blank line is a row (pandas would drop it and shift the rows below), and RDKit would
    read ``CCO<tab>CC`` as ethanol named CC."""
    ckpt, _ = regression_run
    (tmp_path / "new.csv").write_text("smiles\nCCO\n   \nCC\nCCO\tCC\nC C\n\n")
    result = predict_checkpoint(ckpt, tmp_path / "new.csv", tmp_path / "preds.csv")
    assert (result.rows, result.predicted, result.failed) == (6, 2, 4)
    preds = pd.read_csv(tmp_path / "preds.csv", keep_default_na=False)
    assert preds["row"].tolist() == list(range(6))  # row r is line r + 2
    assert [text.strip() for text in preds["smiles"]] == ["CCO", "", "CC", "CCO\tCC", "C C", ""]
    assert preds["error"].tolist() == [
        "",
        "empty SMILES",
        "",
        "whitespace inside the SMILES 'CCO\\tCC' (RDKit would read only 'CCO')",
        "whitespace inside the SMILES 'C C' (RDKit would read only 'C')",
        "empty SMILES",
    ]
    task = GraphRegression.from_checkpoint(ckpt)
    for row, smiles in ((0, "CCO"), (2, "CC")):
        expected = expected_prediction(task, smiles)
        predicted = preds.loc[row, ["gap_ev", "mu_debye"]].to_numpy(float)
        np.testing.assert_allclose(predicted, expected.numpy(), **rounding_tolerance(expected))


def test_parquet_tables_and_other_smiles_columns(regression_run, tmp_path: Path) -> None:
    ckpt, _ = regression_run
    pd.DataFrame({"SMILES": NEW}).to_parquet(tmp_path / "new.parquet")
    evaluate.main(
        [
            "--ckpt",
            str(ckpt),
            "--predict",
            str(tmp_path / "new.parquet"),
            "--smiles-column",
            "SMILES",
            "--out",
            str(tmp_path / "p.csv"),
        ]
    )
    assert pd.read_csv(tmp_path / "p.csv")["row"].tolist() == list(range(7))
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["--ckpt", str(ckpt), "--predict", str(tmp_path / "new.parquet"), "--out", "x.csv"])
    assert stop.value.code == 2  # the training column 'smiles' is not in this table; the log names the columns


def test_classification_predictions_hold_labels_and_probabilities(tmp_path: Path) -> None:
    ckpt, _ = trained(
        tmp_path, "smiles_csv_classification", "--data.source.targets", "[rings]", "--data.source.task", "multiclass"
    )
    pd.DataFrame({"smiles": NEW}).to_csv(tmp_path / "new.csv", index=False)
    evaluate.main(["--ckpt", str(ckpt), "--predict", str(tmp_path / "new.csv"), "--out", str(tmp_path / "p.csv")])
    preds = pd.read_csv(tmp_path / "p.csv")
    probabilities = preds[[f"rings_probability_{k}" for k in range(4)]]
    task = Classification.from_checkpoint(ckpt)
    expected = torch.softmax(expected_prediction(task, "c1ccccc1O"), dim=-1).numpy()
    np.testing.assert_allclose(probabilities.loc[2], expected, **rounding_tolerance(expected))
    assert preds.loc[2, "rings"] == int(np.argmax(expected)) and np.isnan(preds.loc[1, "rings"])
    # a float32 softmax of 4 classes: each probability is (4 + 2) roundings off at most (exp, the sum of 4,
    # the division), relative to itself, so their sum is within (4 + 2) ulps of 1; twice that
    np.testing.assert_allclose(
        probabilities.dropna().sum(axis=1), 1.0, rtol=0, atol=2 * (4 + 2) * float(np.finfo(np.float32).eps)
    )


def test_only_molecular_checkpoints_predict_smiles(regression_run, tmp_path: Path) -> None:
    ckpt, run_dir = regression_run
    config = (
        (run_dir / "config.yaml")
        .read_text()
        .replace("graphormer_urpe.data.sources.SmilesTable", "graphormer_urpe.data.sources.PygDataset")
    )
    with pytest.raises(DataError, match="predict reads SMILES, but .* was trained on PygDataset"):
        model_of(ckpt, config)
    with pytest.raises(SystemExit) as refused:  # no --out: argparse names it
        evaluate.main(["--ckpt", str(ckpt), "--predict", "new.csv"])
    assert refused.value.code == 2


def test_outputs_that_cannot_be_written_or_would_overwrite_the_table_are_refused_before_any_work(
    regression_run, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    ckpt, _ = regression_run
    table = tmp_path / "new.csv"
    table.write_text("smiles\nCCO\n")
    read_only = read_only_directory(tmp_path)
    (tmp_path / "earlier.csv").write_text("kept\n")
    for out, message in [
        (table, f"--out {table} exists; choose another output path (nothing is overwritten)"),
        (
            tmp_path / "earlier.csv",
            f"--out {tmp_path / 'earlier.csv'} exists; choose another output path (nothing is overwritten)",
        ),
        (tmp_path, f"--out {tmp_path} is a directory; name the CSV file to write"),
        (read_only / "p.csv", f"--out {read_only / 'p.csv'}: {read_only} is not writable"),
    ]:
        with pytest.raises(SystemExit) as refused:
            evaluate.main(["--ckpt", str(ckpt), "--predict", str(table), "--out", str(out)])
        assert refused.value.code == 2 and str(refused.value) == message  # logged in one line
    assert table.read_text() == "smiles\nCCO\n" and (tmp_path / "earlier.csv").read_text() == "kept\n"
    with pytest.raises(SystemExit) as refused:  # evaluating a split: refused before the model is built
        evaluate.main(["--ckpt", str(ckpt), "--split", "test", "--out", str(read_only / "m.json")])
    assert refused.value.code == 2
    assert str(refused.value) == f"--out {read_only / 'm.json'}: {read_only} is not writable"
