"""Results carry their identity (issue 20): every checkpoint records its data; evaluate.py and resumes compare
the data they rebuild with it (an edited table is refused, or evaluated under ``--allow-other-data`` and said
so); configs compare without the keys that only name or place a run."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

import evaluate
from graphormer_urpe.run.checkpoints import (
    DATA_IDENTITY_KEY,
    EXECUTION_KEYS,
    PLACEMENT_KEYS,
    config_identity,
    data_identity,
    differences,
    flatten,
)
from graphormer_urpe.run.cli import GraphormerCLI
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.directories import files_of
from graphormer_urpe.testing.runs import small_run_args, train_in_process

#: Rows appended to the probe table after training, as in issue 20 (30 more molecules).
APPENDED_ROWS = 30


def sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def edited_copy(table: Path, directory: Path) -> Path:
    """``table`` with 30 more molecules of the example file appended."""
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / table.name
    extra = (REPO_DIR / "examples" / "qm9_sample.csv").read_text().splitlines(keepends=True)[61 : 61 + APPENDED_ROWS]
    copy.write_text(table.read_text() + "".join(extra))
    return copy


def test_differences_name_each_differing_key_in_one_line() -> None:
    recorded = {"sha1": "aa", "split": {"seed": 0, "fractions": [0.8, 0.1, 0.1]}, "gone": 1}
    current = {"sha1": "bb", "split": {"seed": 0, "fractions": [0.7, 0.2, 0.1]}, "new": 0}
    assert differences(recorded, current, "checkpoint", "now") == (
        "gone: 1 (checkpoint) vs absent (now); new: absent (checkpoint) vs 0 (now); "
        "sha1: 'aa' (checkpoint) vs 'bb' (now); split.fractions: [0.8, 0.1, 0.1] (checkpoint) vs [0.7, 0.2, 0.1] (now)"
    )
    assert differences(recorded, dict(recorded), "a", "b") == ""


def test_an_option_added_since_at_its_default_null_is_no_difference() -> None:
    """A run recorded before ``data.source.fingerprints`` existed: its config lacks the key, today's holds null, and
    it is the same configuration (a sweep reuses its seeds, a resume continues it); a value set is a difference."""
    before = {"data": {"source": {"descriptors": "rdkit2d"}}}
    assert differences(before, {"data": {"source": {"descriptors": "rdkit2d", "fingerprints": None}}}, "a", "b") == ""
    assert differences({"data": {"source": {"descriptors": "rdkit2d", "fingerprints": None}}}, before, "a", "b") == ""
    assert differences(before, {"data": {"source": {"descriptors": "rdkit2d", "fingerprints": "ecfp"}}}, "a", "b") == (
        "data.source.fingerprints: absent (a) vs 'ecfp' (b)"
    )
    many = {f"k{i}": i for i in range(8)}
    assert differences(many, {}, "a", "b").endswith("k4: 4 (a) vs absent (b); +3 more")


def test_config_identity_leaves_out_only_what_names_places_or_executes_a_run() -> None:
    config = {
        "seed_everything": 3,
        "run_name": "x",
        "run_root": "runs",
        "ckpt_path": "auto",
        "model": {"a": 1},
        "data": {"init_args": {"root": "data", "num_workers": 8, "preprocess_workers": None}},
        "trainer": {
            "devices": 4,
            "strategy": "ddp",
            "accelerator": "gpu",
            "num_nodes": 2,
            "precision": "32",
            "enable_progress_bar": False,
            "enable_model_summary": None,
            "log_every_n_steps": 50,
        },
        "logger": "wandb",
        "wandb": {"project": "p"},
        "checkpoint": {"every_n_steps": 1000},
    }
    computes = {"model": {"a": 1}, "data": {"init_args": {"root": "data"}}, "trainer": {"precision": "32"}}
    assert config_identity(config) == {"seed_everything": 3, **computes}
    assert config_identity(config, ignore=("seed_everything",)) == computes


def test_every_key_left_out_of_a_configs_identity_is_a_key_of_the_resolved_config(
    small_table: Path, tmp_path: Path
) -> None:
    """The lists are hand-written: a renamed option would silently stay in the identity (and refuse resumes that
    only move a run). Each listed key names an option that the command line resolves."""
    cli = GraphormerCLI(small_run_args(small_table, tmp_path / "data", tmp_path / "runs", "--logger", "none"))
    resolved = flatten(yaml.safe_load(cli.config_yaml))
    for key in (*PLACEMENT_KEYS, *EXECUTION_KEYS):
        assert key in resolved or any(name.startswith(f"{key}.") for name in resolved), key


def test_a_cached_dataset_is_its_cache_key_and_others_their_data_options(
    small_run: Path, small_table: Path, tmp_path: Path
) -> None:
    """Each datamodule declares its identity (``RunData.identity``); those without a cache give their class and
    the options that decide the examples, as checkpoints written before the declaration recorded them."""
    cli = GraphormerCLI(small_run_args(small_table, tmp_path / "data", tmp_path / "runs", "--logger", "none"))
    identity = data_identity(cli.datamodule)
    assert identity == json.loads(json.dumps(cli.datamodule.cache_key)) and identity["sha1"] == sha1(small_table)
    assert identity["split"] == "scaffold" and identity["split_fractions"] == [0.8, 0.1, 0.1]
    checkpoint = torch.load(small_run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint[DATA_IDENTITY_KEY] == identity  # what training recorded
    synthetic = GraphormerCLI(["--config", "synthetic_graph", "--data.batch_size", "32", "--logger", "none"])
    assert data_identity(synthetic.datamodule) == {
        "datamodule": "graphormer_urpe.data.synthetic.graphs.SyntheticGraphDataModule",
        "degree": 3,
        "min_nodes": 12,
        "max_nodes": 24,
        "distance": 2,
        "train_graphs": 2000,
        "val_graphs": 250,
        "test_graphs": 250,
        "seed": 0,
    }
    sequences = GraphormerCLI(["--config", "synthetic_pi", "--data.batch_size", "32", "--logger", "none"])
    assert data_identity(sequences.datamodule) == {
        "datamodule": "graphormer_urpe.data.synthetic.sequences.SyntheticSequenceDataModule",
        "task": "position",
        "length": 32,
        "vocab_size": 10,
        "val_size": 1024,
        "test_size": 1024,
        "seed": 0,
    }
    mag = GraphormerCLI(
        [
            "--config",
            "mag240m",
            "--data.root",
            str(tmp_path / "mag"),
            "--data.batch_size",
            "64",
            "--data.eval_batch_size",
            "32",
            "--data.num_workers",
            "2",
            "--logger",
            "none",
        ]
    )
    assert data_identity(mag.datamodule) == {
        "datamodule": "graphormer_urpe.data.mag240m.datamodule.MAG240MDataModule",
        "fanouts": [25, 15],
        "seed": 0,
        "num_classes": 153,
    }


def test_evaluate_refuses_an_edited_table_unless_allowed_and_then_says_so(
    small_run: Path, small_table: Path, tmp_path: Path, package_log
) -> None:
    """Issue 20: 30 rows appended after training re-split the table; the test MAE would cover other molecules."""
    best = json.loads((small_run / "metrics.json").read_text())["best_checkpoint"]
    same = tmp_path / "same" / small_table.name
    same.parent.mkdir()
    shutil.copy(small_table, same)  # the same bytes elsewhere: the same data
    result = evaluate.main(["--ckpt", best, "--split", "test", "--data.source.path", str(same)])
    assert result.same_data_as_training is True and result.data_differences is None
    assert result.metrics["test/mae"] == json.loads((small_run / "metrics.json").read_text())["test"]["test/mae"]
    edited = edited_copy(small_table, tmp_path / "edited")
    data_root = tmp_path / "data"  # what --allow-other-data builds stays out of the shared data root
    args = ["--ckpt", best, "--split", "test", "--data.source.path", str(edited), "--data.root", str(data_root)]
    with pytest.raises(SystemExit) as stop:
        evaluate.main(args)
    assert stop.value.code == 2
    difference = f"sha1: '{sha1(small_table)}' (checkpoint) vs '{sha1(edited)}' (now)"
    assert [r.getMessage() for r in package_log.records if r.levelname == "ERROR"] == [
        f"{best} was trained on other data than these: {difference}; evaluate on the checkpoint's data, or pass "
        "--allow_other_data to evaluate on these anyway"
    ]
    assert not data_root.exists()  # refused before anything was built
    out = tmp_path / "other.json"
    result = evaluate.main([*args, "--allow-other-data", "--out", str(out)])
    assert result.same_data_as_training is False and result.data_differences == difference
    written = json.loads(out.read_text())
    assert written["same_data_as_training"] is False and written["data_differences"] == difference
    assert f"evaluating on OTHER data than {best} was trained on (--allow_other_data): {difference}" in [
        r.getMessage() for r in package_log.records if r.levelname == "WARNING"
    ]


def test_a_resume_on_an_edited_table_is_refused_leaving_the_run_byte_for_byte(
    small_run: Path, small_table: Path, tmp_path: Path, package_log
) -> None:
    run_dir = tmp_path / "runs" / "t2"
    shutil.copytree(small_run, run_dir)
    before = files_of(run_dir)
    edited = edited_copy(small_table, tmp_path / "edited")
    args = small_run_args(
        edited,
        tmp_path / "data",
        tmp_path / "runs",
        "--run_name",
        "t2",
        "--trainer.max_steps",
        "300",
        "--ckpt_path",
        "last",
    )
    assert train_in_process(args) == 2
    last = run_dir / "checkpoints" / "last.ckpt"
    assert [r.getMessage() for r in package_log.records if r.levelname == "ERROR"] == [
        f"{last} was trained on other data than this run has: sha1: '{sha1(small_table)}' (checkpoint) vs "
        f"'{sha1(edited)}' (now); a resume continues on its run's data (start a new run, or take the weights with "
        "--init_from)"
    ]
    assert files_of(run_dir) == before
