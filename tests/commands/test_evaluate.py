"""``graphormer-urpe evaluate``: refusals before any work (outputs it would overwrite, splits the checkpoint's data do
not have, an ensemble where a checkpoint is needed), ``--ckpt`` as ``--model``'s earlier name; and on PCQM4Mv2 ogb's
validation MAE, a full-size test-dev submission, and DDP inference.

One fixture in ogb's layout serves the PCQM4Mv2 tests: a small train/valid split, a test-dev split of the official
size (147,037 rows; tiny SMILES keep preprocessing and inference short) and a small test-challenge split, each with
SMILES RDKit cannot parse.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ogb.lsc import PCQM4Mv2Evaluator

from graphormer_urpe.commands import evaluate
from graphormer_urpe.commands.__main__ import main
from graphormer_urpe.evaluation.submission import check_submission
from graphormer_urpe.run.cli import RUN_DIR_ENV
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.ogb_layouts import write_pcqm4mv2
from graphormer_urpe.testing.runs import train
from graphormer_urpe.testing.tolerance import rounding_tolerance


def test_help_prints_the_options_and_exits_zero(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert "--model CKPT" in shown and "--submission_dir" in shown and "changes the checkpoint's own config" in shown
    assert "--ckpt" not in shown.split("\n\n")[0]  # the usage names today's spelling only


def refusal(argv: list[str]) -> str:
    """The one line with which ``graphormer-urpe evaluate ARGV`` stops (exit code 2)."""
    with pytest.raises(SystemExit) as refused:
        main(["evaluate", *argv])
    assert refused.value.code == 2 and "\n" not in str(refused.value)
    return str(refused.value)


def test_out_never_overwrites_a_file(tmp_path: Path) -> None:
    """An earlier result is never replaced. (The refusal is read from the exception: ``capsys`` would close the
    stream the package's log handler keeps.)"""
    (tmp_path / "any.ckpt").write_bytes(b"")
    out = tmp_path / "metrics.json"
    out.write_text('{"earlier": "result"}\n')
    assert refusal(["--model", str(tmp_path / "any.ckpt"), "--split", "valid", "--out", str(out)]) == (
        f"--out {out} exists; choose another output path (nothing is overwritten)"
    )
    assert out.read_text() == '{"earlier": "result"}\n'


def test_the_model_is_one_checkpoint_and_ckpt_its_earlier_name(
    tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "any.ckpt").write_bytes(b"not a checkpoint")
    assert refusal(["--ckpt", str(tmp_path / "any.ckpt")]).endswith("), not a checkpoint")
    assert "--ckpt is now spelled --model (graphormer-urpe evaluate --model CKPT)" in package_log.text
    assert refusal(["--ckpt", "a.ckpt", "--model", "b.ckpt"]) == "--ckpt is --model's earlier name: give one of them"
    assert refusal(["--split", "test"]) == "--model CKPT is required (or --check_submission FILE)"
    assert refusal(["--model", str(tmp_path)]).startswith(
        f"--model {tmp_path} is a directory: evaluate takes one run's checkpoint"
    )


def test_a_hidden_test_split_of_a_table_is_named_as_missing(small_run: Path) -> None:
    """``--split test-dev`` exists for OGB-LSC datasets only: a table's checkpoint is told so, not asked for a
    ``--submission_dir`` it could never use."""
    best = json.loads((small_run / "metrics.json").read_text())["best_checkpoint"]
    for split in ("test-dev", "test-challenge"):
        assert refusal(["--model", best, "--split", split]) == (
            f"{best}'s data have no split '{split}': test-dev and test-challenge are the hidden test splits of "
            "OGB-LSC datasets (PCQM4Mv2, MAG240M); evaluate it with --split valid or test"
        )


SIZES = {"train": 60, "valid": 21, "test-dev": 147_037, "test-challenge": 13}
TINY_SMILES = ["C", "CC", "O", "N", "CO", "CN", "C=O", "C#N", "CCO", "OO", "CC=O", "NC=O", "OCO", "CCN"]
TINY_MODEL = [
    "--config",
    "pcqm4mv2",
    "--model.encoder.num_layers",
    "1",
    "--model.encoder.hidden_dim",
    "16",
    "--model.encoder.ffn_dim",
    "16",
    "--model.encoder.num_heads",
    "4",
    "--model.optim.warmup_steps",
    "2",
    "--data.num_workers",
    "0",
    "--trainer.enable_progress_bar",
    "false",
]


@pytest.fixture(scope="module")
def pcqm_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The dataset written, a tiny model trained for 6 steps, and where everything is."""
    tmp = tmp_path_factory.mktemp("ogb")
    root = tmp / "data"
    n = sum(SIZES.values())
    rng = np.random.default_rng(0)
    smiles = [TINY_SMILES[i] for i in rng.integers(0, len(TINY_SMILES), n)]
    starts = dict(zip(SIZES, np.cumsum([0, *SIZES.values()])))
    bad = {
        "train": [starts["train"] + 4],
        "valid": [starts["valid"] + 2],
        "test-dev": [starts["test-dev"] + 17, starts["test-dev"] + 90_001],
        "test-challenge": [starts["test-challenge"] + 6],
    }
    for rows in bad.values():
        for row in rows:
            smiles[row] = "C1CC"
    gaps = rng.uniform(3.0, 9.0, n)
    gaps[starts["test-dev"] :] = np.nan
    splits = {name: np.arange(starts[name], starts[name] + size) for name, size in SIZES.items()}
    write_pcqm4mv2(root, smiles, gaps, splits)
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(RUN_DIR_ENV, raising=False)
        metrics = train(
            [
                *TINY_MODEL,
                "--data.root",
                str(root),
                "--data.batch_size",
                "16",
                "--data.preprocess_workers",
                "2",
                "--trainer.max_steps",
                "6",
                "--trainer.val_check_interval",
                "3",
                "--run_root",
                str(tmp / "runs"),
                "--run_name",
                "t",
            ]
        )
    kept_train = [r for r in splits["train"] if r not in bad["train"]]
    return {
        "root": root,
        "tmp": tmp,
        "metrics": metrics,
        "ckpt": metrics["best_checkpoint"],
        "splits": splits,
        "bad": bad,
        "gaps": gaps,
        "train_mean": float(np.mean(gaps[kept_train].astype(np.float32).astype(np.float64))),
    }


def run_evaluate(pcqm_run: dict, *args: str) -> dict:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(RUN_DIR_ENV, raising=False)
        return evaluate.main(
            [
                "--model",
                pcqm_run["ckpt"],
                "--data.root",
                str(pcqm_run["root"]),
                "--trainer.enable_progress_bar",
                "false",
                *args,
            ]
        )


@pytest.mark.slow
def test_training_reports_no_test_metric_for_hidden_labels(pcqm_run: dict) -> None:
    assert pcqm_run["metrics"]["test"] is None and "val/mae" in pcqm_run["metrics"]["validation"]


@pytest.mark.slow
def test_valid_prints_ogbs_mae(pcqm_run: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    saved = tmp_path / "valid.npz"
    result = run_evaluate(pcqm_run, "--split", "valid", "--predictions", str(saved))
    assert result.leaderboard == {"evaluator": "PCQM4Mv2Evaluator", "scored": 20, "skipped": 1}
    with np.load(saved) as predictions:
        rows, y_pred = predictions["rows"], predictions["prediction"]
    np.testing.assert_array_equal(rows, pcqm_run["splits"]["valid"])
    assert np.isnan(y_pred[2]) and np.isfinite(np.delete(y_pred, 2)).all()
    scored = np.delete(np.arange(len(rows)), 2)
    expected = PCQM4Mv2Evaluator().eval(
        {"y_true": pcqm_run["gaps"][rows[scored]].astype(np.float32), "y_pred": y_pred[scored]}
    )["mae"]
    assert result.metrics["mae"] == expected  # ogb's evaluator on these very arrays
    # training's torchmetrics MAE sums the same 20 float32 errors per batch: within one ulp per term
    rel = len(scored) * float(np.finfo(np.float32).eps)
    assert result.metrics["mae"] == pytest.approx(pcqm_run["metrics"]["validation"]["val/mae"], rel=rel)
    assert (
        f"pcqm4m-v2 valid: MAE {result.metrics['mae']:.6f} (PCQM4Mv2Evaluator, 20 molecules)" in capsys.readouterr().out
    )


@pytest.mark.slow
def test_full_size_test_dev_submission(pcqm_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """147,037 rows in split order; the two unparsable rows get the training mean, are warned about
    and listed in the log; the file passes the official shape check and --check-submission."""
    subs, saved = tmp_path / "subs", tmp_path / "test-dev.npz"
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        record = run_evaluate(
            pcqm_run,
            "--split",
            "test-dev",
            "--submission_dir",
            str(subs),
            "--predictions",
            str(saved),
            "--data.batch_size",
            "4096",
        )
    path = subs / "y_pred_pcqm4m-v2_test-dev.npz"
    y_pred = check_submission(path, SIZES["test-dev"])
    assert y_pred.shape == (147_037,) and y_pred.dtype == np.float32
    with np.load(saved) as predictions:
        model = predictions["prediction"]
        np.testing.assert_array_equal(predictions["rows"], pcqm_run["splits"]["test-dev"])
    bad_positions = [int(r - pcqm_run["splits"]["test-dev"][0]) for r in pcqm_run["bad"]["test-dev"]]
    filled = np.zeros(len(y_pred), dtype=bool)
    filled[bad_positions] = True
    np.testing.assert_array_equal(y_pred[~filled], model[~filled])  # the model's predictions, in split order
    # the float64 mean of the float32 training targets, rounded once to float32
    np.testing.assert_allclose(y_pred[filled], pcqm_run["train_mean"], rtol=float(np.finfo(np.float32).eps))
    assert len(np.unique(model[~filled])) > 5  # the order matters: predictions differ between molecules

    log = json.loads((subs / "y_pred_pcqm4m-v2_test-dev.log.json").read_text())
    assert log == {**record.leaderboard, "checkpoint": record.checkpoint, "same_data_as_training": True}
    assert log["rows"] == 147_037 and log["mode"] == "test-dev" and record.metrics == {}  # nothing scored here
    assert log["same_data_as_training"] is True  # the data identity recorded in the checkpoint was compared
    assert log["filled_with_train_mean"] == [
        {"row": int(r), "position": p, "reason": "RDKit cannot parse"}
        for r, p in zip(pcqm_run["bad"]["test-dev"], bad_positions)
    ]
    assert "2 of 147037 test-dev rows could not be featurised" in caplog.text
    assert "wall time SMILES -> file" in caplog.text and "inference" in caplog.text

    assert evaluate.main(["--check_submission", str(path), "--data_root", str(pcqm_run["root"])])["valid"]
    broken = tmp_path / "broken" / path.name
    broken.parent.mkdir()
    np.savez(broken, y_pred=np.where(np.arange(147_037) == 5, np.nan, y_pred).astype(np.float32))
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(["--check_submission", str(broken), "--data_root", str(pcqm_run["root"])])
    assert exit_info.value.code == 1 and "1 non-finite values (NaN or inf), first at positions [5]" in caplog.text
    # without the dataset on disk: ogb's official size, and said so
    official = evaluate.main(["--check_submission", str(path), "--data_root", str(tmp_path / "nowhere")])
    assert official["valid"] and official["rows"] == 147_037 and official["expected_rows_from"] == "official"
    assert "the expected row count comes from the dataset's split file" in caplog.text
    assert "checking against the official pcqm4m-v2 test-dev size instead, 147037 rows" in caplog.text


@pytest.mark.slow
def test_a_non_official_split_or_missing_directory_fails_clearly(
    pcqm_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(SystemExit, match="pass --submission_dir DIR"):
        run_evaluate(pcqm_run, "--split", "test-challenge")
    with pytest.raises(SystemExit, match="writes test-dev or test-challenge submissions, not 'valid'"):
        run_evaluate(pcqm_run, "--split", "valid", "--submission_dir", str(tmp_path))
    with caplog.at_level(logging.ERROR, logger="graphormer_urpe"), pytest.raises(SystemExit) as exit_info:
        run_evaluate(pcqm_run, "--split", "test-challenge", "--submission_dir", str(tmp_path))
    assert exit_info.value.code == 1
    assert "refused 13 test-challenge predictions: the split in split_dict.pt has 13 rows" in caplog.text
    with pytest.raises(SystemExit, match="pcqm4m-v2 has no split 'test'; its splits are train, valid, test-dev"):
        run_evaluate(pcqm_run, "--split", "test")


@pytest.mark.slow
def test_two_processes_predict_exactly_what_one_does(pcqm_run: dict, tmp_path: Path) -> None:
    """DDP over 2 CPU processes (gloo): 12 graphs of test-challenge in batches of 2 per process,
    shards of 6 and 6 in interleaved order, one unparsable row; same rows, same order, same values."""
    one = tmp_path / "one.npz"
    run_evaluate(pcqm_run, "--split", "test-challenge", "--predictions", str(one), "--data.batch_size", "4")
    two = tmp_path / "two.npz"
    env = {k: v for k, v in os.environ.items() if k != RUN_DIR_ENV}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphormer_urpe.commands",
            "evaluate",
            "--model",
            pcqm_run["ckpt"],
            "--split",
            "test-challenge",
            "--predictions",
            str(two),
            "--data.root",
            str(pcqm_run["root"]),
            "--data.batch_size",
            "4",
            "--trainer.accelerator",
            "cpu",
            "--trainer.devices",
            "2",
            "--trainer.strategy",
            "ddp",
            "--trainer.enable_progress_bar",
            "false",
        ],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Starting with 2 processes" in done.stderr + done.stdout
    with np.load(one) as a, np.load(two) as b:
        np.testing.assert_array_equal(a["rows"], b["rows"])
        # batches of 4 on one process, of 2 on each of two: other padding, other summation orders
        finite = a["prediction"][np.isfinite(a["prediction"])]
        np.testing.assert_allclose(a["prediction"], b["prediction"], **rounding_tolerance(finite))  # NaN where NaN
        assert np.isnan(a["prediction"]).sum() == 1 and len(np.unique(a["prediction"][~np.isnan(a["prediction"])])) > 3
