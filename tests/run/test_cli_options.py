"""Every option of the shipped configs with an impossible value stops before any work: one line
naming the key as the command line writes it, exit code 2, no run directory, no data directory, no
traceback; and ``null`` is accepted on the command line wherever a config accepts it."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
import yaml

from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.errors import ConfigError
from graphormer_urpe.run.cli import GraphormerCLI, parse_error_line
from graphormer_urpe.run.tracking import WandbOptions
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.directories import read_only_directory
from graphormer_urpe.testing.runs import train

#: (config, bad option(s), fragment of the one error line). Every option that a shipped config sets
#: appears at least once, in a config that sets it, plus the options the issue names.
CASES = [
    # the trainer (checked right after parsing)
    ("smiles_csv_example", ["--trainer.max_steps", "-5"], "trainer.max_steps=-5: must be an integer >= -1"),
    ("smiles_csv_example", ["--trainer.val_check_interval", "0"], "trainer.val_check_interval=0: must be an integer"),
    (
        "smiles_csv_example",
        ["--trainer.val_check_interval", "1.5"],
        "trainer.val_check_interval=1.5: must be a number in (0, 1]",
    ),
    ("zinc_subset", ["--trainer.check_val_every_n_epoch", "0"], "trainer.check_val_every_n_epoch=0: must be an"),
    ("qm9_gap", ["--trainer.gradient_clip_val", "-1"], "trainer.gradient_clip_val=-1: must be a number >= 0"),
    ("qm9_gap", ["--trainer.accumulate_grad_batches", "0"], "trainer.accumulate_grad_batches=0: must be an integer"),
    ("qm9_gap", ["--trainer.accelerator", "quantum"], "trainer: You selected an invalid accelerator name"),
    ("qm9_gap", ["--trainer.devices", "0"], "`Trainer(devices='0')` value is not a valid input"),
    ("qm9_gap", ["--trainer.precision", "17"], "trainer.precision: Expected a typing.Literal"),
    (
        "qm9_gap",
        ["--trainer.limit_val_batches", "2.0"],  # a float is a fraction: 2 batches are written 2
        "trainer.limit_val_batches=2.0: must be a number in [0, 1] (a fraction), or an integer number of batches",
    ),
    ("qm9_gap", ["--trainer.limit_train_batches", "-1"], "trainer.limit_train_batches=-1: must be an integer >= 0"),
    ("qm9_gap", ["--seed_everything", "-1"], "seed_everything=-1: must be an integer from 0 to 4294967295"),
    (
        "qm9_gap",
        [
            "--trainer.devices",
            "2",
            "--trainer.accelerator",
            "cpu",
            "--trainer.strategy",
            "ddp",
            "--data.batch_size",
            "33",
        ],
        "data.batch_size=33: is the global batch and must divide by the 2 processes",
    ),
    # the encoder
    ("qm9_gap", ["--model.encoder.hidden_dim", "0"], "model.encoder.hidden_dim=0: must be an integer >= 1"),
    (
        "qm9_gap",
        ["--model.encoder.hidden_dim", "abc"],
        "model.encoder.hidden_dim: Expected a <class 'int'>. Got value: abc",
    ),
    # an option that may be null echoes the value as the others do
    ("qm9_gap", ["--model.optim.head_lr", "abc"], "model.optim.head_lr: Expected a <class 'float'>. Got value: abc"),
    ("qm9_gap", ["--model.encoder.num_layers", "0"], "model.encoder.num_layers=0: must be an integer >= 1"),
    ("qm9_gap", ["--model.encoder.ffn_dim", "-4"], "model.encoder.ffn_dim=-4: must be an integer >= 1"),
    ("qm9_gap", ["--model.encoder.num_heads", "7"], "model.encoder.num_heads=7: must divide model.encoder.hidden_dim"),
    ("qm9_gap", ["--model.encoder.num_heads", "0"], "model.encoder.num_heads=0: must be an integer >= 1"),
    ("qm9_gap", ["--model.encoder.attention", "abs"], "model.encoder.attention: Expected a typing.Literal"),
    (
        "qm9_gap",
        ["--model.encoder.molecule_features_into", "head"],
        "model.encoder.molecule_features_into: Expected a typing.Literal",
    ),
    ("qm9_gap", ["--model.encoder.num_layerz", "3"], "model.encoder.num_layerz: no such option"),
    ("zinc_subset", ["--model.encoder.max_degree", "-1"], "model.encoder.max_degree=-1: must be an integer >= 0"),
    (
        "qm9_gap",
        ["--model.encoder.spatial_pos_max", "300"],
        "model.encoder.spatial_pos_max=300: must be an integer from 1 to 255",
    ),
    (
        "qm9_gap",
        ["--model.encoder.spatial_pos_max", "null"],
        "model.encoder.max_distance=null: model.encoder.spatial_pos_max is null (no masking), so set max_distance",
    ),
    (
        "zinc_subset",
        ["--model.encoder.max_distance", "255"],
        "model.encoder.max_distance=255: must be an integer from 0 to 254",
    ),
    ("zinc_subset", ["--model.encoder.edge_encoding", "multihop"], "model.encoder.edge_encoding: Expected a typing"),
    ("zinc_subset", ["--model.encoder.multi_hop_max_dist", "0"], "model.encoder.multi_hop_max_dist=0: must be an"),
    (
        "zinc_subset",
        ["--model.encoder.input_dropout", "-0.1"],
        "model.encoder.input_dropout=-0.1: must be a number in [0, 1)",
    ),
    ("qm9_gap", ["--model.encoder.dropout", "1.5"], "model.encoder.dropout=1.5: must be a number in [0, 1)"),
    ("qm9_gap", ["--model.encoder.attention_dropout", "1"], "model.encoder.attention_dropout=1.0: must be a number"),
    ("zinc_subset", ["--model.encoder.activation_dropout", "2"], "model.encoder.activation_dropout=2.0: must be"),
    ("mag240m", ["--model.encoder.drop_path", "1"], "model.encoder.drop_path=1.0: must be a number in [0, 1)"),
    ("synthetic_graph", ["--model.encoder.graph_token", "maybe"], "model.encoder.graph_token: Expected a <class"),
    ("synthetic_pi", ["--model.encoder.num_buckets", "3"], "model.encoder.num_buckets=3: must be an integer >= 4"),
    ("synthetic_etp", ["--model.encoder.max_distance", "4"], "model.encoder.max_distance=4: must be an integer >= 9"),
    ("synthetic_pi", ["--model.encoder.hidden_dim", "60"], "model.encoder.num_heads=8: must divide model.encoder"),
    # the optimiser and the task
    ("zinc_subset", ["--model.optim.lr", "-1"], "model.optim.lr=-1.0: must be a number > 0"),
    ("qm9_gap", ["--model.optim.lr", "0"], "model.optim.lr=0.0: must be a number > 0"),
    ("qm9_gap", ["--model.optim.warmup_steps", "-1"], "model.optim.warmup_steps=-1: must be an integer >= 0"),
    ("pcqm4mv2", ["--model.optim.end_lr=-1e-9"], "model.optim.end_lr=-1e-09: must be a number >= 0"),
    ("zinc_subset", ["--model.optim.weight_decay", "-0.01"], "model.optim.weight_decay=-0.01: must be a number >= 0"),
    ("zinc_subset", ["--model.optim.adam_eps", "0"], "model.optim.adam_eps=0.0: must be a number > 0"),
    ("qm9_pretrain", ["--model.optim.head_lr", "0"], "model.optim.head_lr=0.0: must be a number > 0, or null (lr)"),
    (
        "smiles_csv_example",
        ["--model.optim.layer_lr_decay", "1.5"],
        "model.optim.layer_lr_decay=1.5: must be a number in (0, 1] (1: every layer at lr)",
    ),
    ("smiles_csv_example", ["--model.optim.layer_lr_decay", "0"], "model.optim.layer_lr_decay=0.0: must be a number"),
    (
        "smiles_csv_classification",
        ["--model.optim.freeze_encoder_steps", "-2"],
        "model.optim.freeze_encoder_steps=-2: must be an integer >= -1 (optimiser steps; -1: the encoder never trains)",
    ),
    (
        "small_molecules",
        ["--model.optim.weight_average", "1"],
        "model.optim.weight_average=1.0: must be a number in (0, 1) (the average's decay per optimiser step, e.g. "
        "0.99), or null (no average)",
    ),
    ("qm9_gap", ["--model.optim.weight_average", "0"], "model.optim.weight_average=0.0: must be a number in (0, 1)"),
    ("qm9_gap", ["--model.normalize_targets", "maybe"], "model.normalize_targets: Expected a <class 'bool'>"),
    ("pcqm4mv2", ["--model.loss", "l3"], "model.loss: Expected a typing.Literal['l1', 'mse']"),
    ("qm9_gap", ["--model.compile", "fast"], "model.compile='fast': expected one of false, true, 'cuda_graphs'"),
    (
        "smiles_csv_classification",
        ["--model.evaluator", "ogb.lsc.MAG240MEvaluator"],
        "evaluator ogb.lsc.MAG240MEvaluator computes multi-class accuracy, the data's targets are binary",
    ),
    # the data
    ("smiles_csv_example", ["--data.batch_size", "0"], "data.batch_size=0: must be an integer >= 1"),
    ("smiles_csv_example", ["--data.batch_size", "-1"], "data.batch_size=-1: must be an integer >= 1"),
    ("qm9_gap", ["--data.num_workers", "-1"], "data.num_workers=-1: must be an integer >= 0"),
    ("zinc_subset", ["--data.bucket_window", "-1"], "data.bucket_window=-1: must be an integer >= 0"),
    ("zinc_subset", ["--data.pad_nodes_to", "0"], "data.pad_nodes_to=0: must be an integer from 1 to 512 (1: off"),
    # a multiple above the largest graph the data may hold pads every batch beyond it (74.5 GiB for the first batch)
    (
        "qm9_gap",
        ["--data.pad_nodes_to", "100000"],
        "data.pad_nodes_to=100000: must be an integer from 1 to 512 (1: off, else a node count such as 8; at most "
        "data.max_nodes, the largest graph the data may hold)",
    ),
    (
        "zinc_subset",
        ["--data.max_nodes", "64", "--data.pad_nodes_to", "65"],
        "data.pad_nodes_to=65: must be an integer from 1 to 64",
    ),
    ("qm9_gap", ["--data.chunk_size", "0"], "data.chunk_size=0: must be an integer >= 1"),
    ("qm9_gap", ["--data.max_nodes", "40000"], "data.max_nodes=40000: must be an integer from 1 to 32767"),
    ("qm9_gap", ["--data.path_order", "shortest"], "data.path_order: Expected a typing.Literal"),
    ("qm9_gap", ["--data.source.max_molecules", "0"], "data.source.max_molecules=0: must be an integer >= 1"),
    ("qm9_gap", ["--data.source.seed", "x"], "data.source.seed: Expected a <class 'int'>"),
    (
        "qm9_pretrain",
        ["--data.source.targets", "[gap_ev, gap]"],
        "data.source.targets=['gap_ev', 'gap']: must be a list of distinct QM9 properties from mu_debye, alpha_bohr3",
    ),
    ("zinc_subset", ["--data.source.subset", "maybe"], "data.source.subset: Expected a <class 'bool'>"),
    ("smiles_csv_example", ["--data.source.targets", "[]"], "name at least one target column (data.source.targets)"),
    (
        "smiles_csv_example",
        ["--data.source.descriptors", "mordred"],
        "data.source.descriptors: Expected a typing.Literal['rdkit2d']. Got value: mordred",
    ),
    ("small_molecules", ["--trainer.max_epochs", "-2"], "trainer.max_epochs=-2: must be an integer >= -1"),
    ("small_molecules", ["--trainer.callbacks", "[{class_path:nope.Nope}]"], "trainer.callbacks: Expected a path"),
    (
        "pretrain_moses",
        ["--data.source.molecules", "10"],
        "data.source.molecules=10: must be an integer from 100 to 1584663, or null (every molecule)",
    ),
    (
        "pretrain_moses",
        ["--data.source.valid_fraction", "0.5"],
        "data.source.valid_fraction=0.5: must be a share in (0, 0.25), e.g. 0.02",
    ),
    ("pretrain_moses", ["--data.preprocess_workers", "-1"], "data.preprocess_workers=-1: must be an integer >= 0"),
    (
        "pretrain_moses",
        ["--data.source.fragments", "-1"],
        "data.source.fragments=-1: must be an integer from 0 to 1584663",
    ),
    ("pretrain_moses", ["--data.source.seed", "-1"], "data.source.seed=-1: must be an integer >= 0"),
    ("smiles_csv_example", ["--data.source.task", "ranking"], "data.source.task: Expected a typing.Literal"),
    ("smiles_csv_example", ["--data.source.split", "kfold"], "data.source.split: Expected a typing.Literal"),
    (
        "smiles_csv_example",
        ["--data.source.split", "scaffold_balanced", "--data.source.seed", "-1"],
        "data.source.seed=-1: must be an integer >= 0",
    ),
    ("pyg_tu_example", ["--data.source.seed", "-1"], "data.source.seed=-1: must be an integer >= 0"),
    (
        "smiles_csv_example",
        ["--data.source.split_fractions", "[0.5, 0.6, 0.1]"],
        "data.source.split_fractions=[0.5, 0.6, 0.1]: must be three shares (train, valid, test), each >= 0, "
        "summing to 1",
    ),
    (
        "smiles_csv_example",
        ["--data.source.split_fractions", "null"],
        "data.source.split_fractions=null: must be three shares (train, valid, test), each >= 0, summing to 1",
    ),
    ("smiles_csv_classification", ["--data.source.path", "nowhere.csv"], "the table nowhere.csv does not exist"),
    ("pyg_tu_example", ["--data.source.task", "ranking"], "data.source.task: Expected a typing.Literal"),
    ("pyg_tu_example", ["--data.source.target_names", "[gap, mu]"], "data.source.target_names has 2 names for the 1"),
    ("pyg_tu_example", ["--data.source.seed", "x"], "data.source.seed: Expected a <class 'int'>"),
    ("synthetic_pi", ["--data.seed", "x"], "data.seed: Expected a <class 'int'>"),
    (
        "pyg_tu_example",
        ["--data.source.dataset", "torch_geometric.datasets.Nope"],
        "data.source.dataset='torch_geometric.datasets.Nope': cannot be imported",
    ),
    ("pyg_tu_example", ["--data.source.split", "instances"], "split: instances needs data.source.split_args"),
    ("mag240m", ["--data.fanouts", "[25, 0]"], "data.fanouts[1]=0: must be an integer >= 1"),
    ("mag240m", ["--data.batch_size", "0"], "data.batch_size=0: must be an integer >= 1"),
    ("mag240m", ["--data.num_workers", "-2"], "data.num_workers=-2: must be an integer >= 0"),
    ("mag240m", ["--data.num_classes", "1"], "data.num_classes=1: must be an integer >= 2"),
    ("synthetic_pi", ["--data.task", "sort"], "data.task: Expected a typing.Literal"),
    ("synthetic_etp", ["--data.length", "31"], "data.length=31: even_token needs an even length"),
    ("synthetic_pi", ["--data.length", "0"], "data.length=0: must be an integer >= 1"),
    ("synthetic_pi", ["--data.vocab_size", "0"], "data.vocab_size=0: must be an integer >= 1"),
    ("synthetic_pi", ["--data.batch_size", "0"], "data.batch_size=0: must be an integer >= 1"),
    ("synthetic_etp", ["--data.val_size", "0"], "data.val_size=0: must be an integer >= 1"),
    ("synthetic_etp", ["--data.test_size", "-1"], "data.test_size=-1: must be an integer >= 1"),
    ("synthetic_graph", ["--data.degree", "1"], "data.degree=1: must be an integer >= 2"),
    ("synthetic_graph", ["--data.min_nodes", "3"], "data.min_nodes=3: must be an integer >= 4"),
    ("synthetic_graph", ["--data.max_nodes", "10"], "data.max_nodes=10: must be an integer >= 12"),
    ("synthetic_graph", ["--data.distance", "0"], "data.distance=0: must be an integer >= 1"),
    ("synthetic_graph", ["--data.train_graphs", "0"], "data.train_graphs=0: must be an integer >= 1"),
    ("synthetic_graph", ["--data.val_graphs", "0"], "data.val_graphs=0: must be an integer >= 1"),
    ("synthetic_graph", ["--data.test_graphs", "0"], "data.test_graphs=0: must be an integer >= 1"),
    # the run
    ("qm9_gap", ["--threads", "0"], "threads=0: must be an integer >= 1 (torch threads of this process), or null"),
    (
        "qm9_gap",
        ["--run_name", ""],  # an unset variable in a SLURM script: not a new directory per requeue
        "run_name='': must name one directory under run_root (not empty, '.' or '..', no '/'), or be null (a new "
        "directory per start)",
    ),
    ("qm9_gap", ["--run_name", "a/b"], "run_name='a/b': must name one directory under run_root"),
    ("qm9_gap", ["--run_name", "../elsewhere"], "run_name='../elsewhere': must name one directory under run_root"),
    ("qm9_gap", ["--checkpoint.every_n_steps", "-1"], "checkpoint.every_n_steps=-1: must be an integer >= 0"),
    ("smiles_csv_example", ["--init_from", "nowhere.ckpt"], "--init_from: checkpoint nowhere.ckpt does not exist"),
    (
        "smiles_csv_example",
        ["--init_from", ""],
        "init_from='': must name a checkpoint file, or be null (the config's own initialisation)",
    ),  # what an unset $CKPT in a script gives
    (
        "smiles_csv_example",
        ["--ckpt_path", ""],
        "ckpt_path='': must name a checkpoint file, 'last' or 'auto', or be null (a new run)",
    ),
    # learning rates AdamW cannot apply to float32 weights: its first step moves them by rate / (1 - 0.9)
    (
        "qm9_pretrain",
        ["--model.optim.head_lr", "1e300"],
        "model.optim.head_lr=1e+300: is above 3.403e+37, the largest learning rate AdamW can apply to float32 weights",
    ),
    ("qm9_gap", ["--model.optim.lr", "1e38"], "model.optim.lr=1e+38: is above 3.403e+37"),
    ("pcqm4mv2", ["--model.optim.end_lr", "1e38"], "model.optim.end_lr=1e+38: is above 3.403e+37"),
    (
        "qm9_gap",
        ["--model.optim.lr", "1e-3", "--model.optim.head_lr", "1", "--model.optim.end_lr", "1e35"],
        "model.optim.end_lr=1e+35: takes the head's rate to 1e+38 (head_lr x end_lr / lr), above 3.403e+37",
    ),
    (
        "zinc_subset",
        ["--model.optim.lr", "1e37", "--model.optim.weight_decay", "150.5"],
        "model.optim.weight_decay=150.5: times the highest learning rate (1e+37) is above 3.403e+38",
    ),
    ("qm9_gap", ["--checkpoint.signals", "[SIGFOO]"], "checkpoint.signals='SIGFOO': is not a signal this process"),
    ("qm9_gap", ["--wandb.mode", "sometimes"], "wandb.mode: Expected a typing.Literal"),
    ("qm9_gap", ["--wandb.plot_every_n_validations", "-1"], "wandb.plot_every_n_validations=-1: must be an integer"),
    ("qm9_gap", ["--logger", "tensorboard"], "logger: Expected a typing.Literal"),
]


def has_root(config: str) -> bool:
    """Whether the config's datamodule stores data under ``data.root`` (the synthetic ones build in memory)."""
    return "root" in yaml.safe_load((CONFIG_DIR / f"{config}.yaml").read_text())["data"]["init_args"]


def stop_of(args: list[str], package_log: pytest.LogCaptureFixture) -> tuple[int, list[str]]:
    """Exit code of a start of ``args`` (what ``train.py ARGS`` does) and the package's error lines."""
    package_log.clear()
    with pytest.raises(SystemExit) as stop:
        train(args)
    return stop.value.code, [r.getMessage() for r in package_log.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("config, options, message", CASES, ids=[f"{c}:{' '.join(o)}" for c, o, _ in CASES])
def test_an_impossible_option_stops_before_any_work(
    config: str,
    options: list[str],
    message: str,
    tmp_path: Path,
    package_log: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    runs, data = tmp_path / "runs", tmp_path / "data"
    args = ["--config", config, "--run_root", str(runs), *(["--data.root", str(data)] if has_root(config) else [])]
    code, errors = stop_of([*args, *options], package_log)
    assert code == 2
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0], errors
    assert not runs.exists() and not data.exists()
    assert "Traceback" not in capsys.readouterr().err


def test_every_option_a_shipped_config_sets_is_in_the_matrix() -> None:
    def keys(tree: dict, prefix: str = "") -> set[str]:
        found = set()
        for key, value in tree.items():
            if key == "init_args":
                found |= keys(value, prefix)
            elif isinstance(value, dict) and key != "args":
                found |= keys(value, f"{prefix}{key}.")
            elif key != "class_path":
                found.add(prefix + key)
        return found

    shipped = set().union(*(keys(yaml.safe_load(p.read_text())) for p in CONFIG_DIR.glob("*.yaml")))
    covered = {option[2:].split("=")[0] for _, options, _ in CASES for option in options if option.startswith("--")}
    elsewhere = {"data.root"}  # test_a_read_only_run_root_or_data_root_is_named
    # read with the table, when the cache is built: the spec branch's table reading checks them
    read_with_the_data = {"data.source.smiles_column", "data.source.args"}
    assert sorted(shipped - covered - elsewhere - read_with_the_data) == []


def test_a_read_only_run_root_or_data_root_is_named(tmp_path: Path, package_log: pytest.LogCaptureFixture) -> None:
    (tmp_path / "afile").write_text("")
    code, errors = stop_of(["--config", "smiles_csv_example", "--run_root", str(tmp_path / "afile")], package_log)
    assert code == 2 and errors == [
        f"run_root='{tmp_path / 'afile'}': is a file; run_root is the directory that holds the runs"
    ]
    read_only = read_only_directory(tmp_path)
    code, errors = stop_of(["--config", "smiles_csv_example", "--run_root", str(read_only / "runs")], package_log)
    assert code == 2 and errors == [
        f"run_root='{read_only / 'runs'}': {read_only} is not writable, so no run "
        "directory can be made there; choose a writable run_root"
    ]
    code, errors = stop_of(
        [
            "--config",
            "smiles_csv_example",
            "--run_root",
            str(tmp_path / "runs"),
            "--data.root",
            str(read_only / "data"),
        ],
        package_log,
    )
    assert code == 2 and errors == [
        f"data.root='{read_only / 'data'}': {read_only} is not writable, and the cache "
        "must be built there (choose a writable data.root, or build the cache once where "
        "it is writable)"
    ]
    assert not (tmp_path / "runs").exists()
    # MAG240M builds its derived files under the release (data.root) or in data.cache_dir
    mag = ["--config", "mag240m", "--run_root", str(tmp_path / "runs")]
    code, errors = stop_of([*mag, "--data.root", str(read_only / "data")], package_log)
    assert code == 2 and errors == [
        f"data.root='{read_only / 'data'}': {read_only} is not writable, and MAG240M's "
        "derived files must be built in "
        f"{read_only / 'data' / 'mag240m_kddcup2021' / 'graphormer'} (set data.cache_dir "
        "to a writable directory, or build them once where it is writable)"
    ]
    code, errors = stop_of(
        [*mag, "--data.root", str(tmp_path / "data"), "--data.cache_dir", str(read_only / "mag")], package_log
    )
    assert code == 2 and errors == [
        f"data.cache_dir='{read_only / 'mag'}': {read_only} is not writable, and "
        f"MAG240M's derived files must be built in {read_only / 'mag'} (set data.cache_dir "
        "to a writable directory, or build them once where it is writable)"
    ]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()


def optional_keys() -> list[tuple[str, str]]:
    """(config, dotted key) of every ``X | None`` option of the classes the shipped configs name, each
    in the first config (in name order) that uses its class; the key linked from the data is left out."""
    linked = {"data"}
    found: dict[str, str] = {}
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        groups = [("model", config["model"]), ("data", config["data"])]
        if "source" in config["data"]["init_args"]:
            groups.append(("data.source", config["data"]["init_args"]["source"]))
        for prefix, spec in groups:
            cls = _import(spec["class_path"])
            hints = typing.get_type_hints(cls.__init__)
            for name in inspect.signature(cls.__init__).parameters:
                if name in linked or name not in hints:
                    continue
                if _accepts_none(hints[name]):
                    found.setdefault(f"{prefix}.{name}", path.stem)
                elif dataclasses.is_dataclass(hints[name]):
                    for fld in dataclasses.fields(hints[name]):
                        if _accepts_none(typing.get_type_hints(hints[name])[fld.name]):
                            found.setdefault(f"{prefix}.{name}.{fld.name}", path.stem)
    for fld in dataclasses.fields(WandbOptions):
        if _accepts_none(typing.get_type_hints(WandbOptions)[fld.name]):
            found[f"wandb.{fld.name}"] = "qm9_gap"
    for key in ("run_name", "ckpt_path", "init_from", "trainer.gradient_clip_val", "trainer.max_epochs"):
        found[key] = "qm9_gap"
    return sorted((config, key) for key, config in found.items())


def _import(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)


def _accepts_none(hint: object) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


NULLABLE = optional_keys()


def test_the_null_matrix_covers_the_keys_of_the_issue() -> None:
    keys = {key for _, key in NULLABLE}
    assert {
        "model.encoder.spatial_pos_max",
        "model.encoder.max_distance",
        "model.evaluator",
        "data.preprocess_workers",
        "data.source.max_molecules",
        "data.source.num_classes",
        "data.cache_dir",
        "data.eval_batch_size",
        "wandb.entity",
        "run_name",
    } <= keys


class ParsedOnly(GraphormerCLI):
    """The CLI up to the parsed config: nothing is built."""

    def instantiate_classes(self) -> None:
        pass


@pytest.mark.parametrize("config, key", NULLABLE, ids=[f"{c}:{k}" for c, k in NULLABLE])
def test_null_is_accepted_on_the_command_line_wherever_a_config_accepts_it(
    config: str, key: str, tmp_path: Path
) -> None:
    parsed = ParsedOnly(["--config", config, "--run_root", str(tmp_path / "runs"), f"--{key}", "null"])
    dotted = key.replace("model.", "model.init_args.", 1).replace("data.", "data.init_args.", 1)
    dotted = dotted.replace("data.init_args.source.", "data.init_args.source.init_args.")
    assert parsed.config[dotted] is None


@pytest.mark.parametrize(
    "key, other",
    [
        ("spatial_pos_max", ["--model.encoder.max_distance", "38"]),
        ("max_distance", ["--model.encoder.spatial_pos_max", "20"]),
    ],
)
def test_a_null_distance_option_reaches_the_model(key: str, other: list[str], tmp_path: Path) -> None:
    cli = GraphormerCLI(
        [
            "--config",
            "smiles_csv_example",
            "--run_root",
            str(tmp_path / "runs"),
            "--logger",
            "none",
            "--data.root",
            str(tmp_path / "data"),
            *other,
            f"--model.encoder.{key}",
            "null",
        ]
    )
    assert getattr(cli.model.model.config, key) is None


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "is empty: a config is a mapping of options (trainer:, model:, data:, ...)"),
        ("# nothing but a comment\n", "is empty: a config is a mapping of options (trainer:, model:, data:, ...)"),
        ("- a\n- b\n", "holds a list, not a mapping of options (trainer:, model:, data:, ...)"),
        ("just a string\n", "holds a string, not a mapping of options (trainer:, model:, data:, ...)"),
        (
            "trainer: {max_steps: 3\n",
            "is not valid YAML: expected ',' or '}', but got '<stream end>' (line 2, column 1)",
        ),
        (
            "trainer:\n  max_steps: 3\n nope: 1\n",
            "is not valid YAML: expected <block end>, but found '<block mapping start>' (line 3, column 2)",
        ),
    ],
    ids=["empty", "a comment", "a list", "a string", "an open brace", "a bad indent"],
)
def test_a_config_that_is_not_a_mapping_of_options_is_named_in_one_line(
    text: str, problem: str, tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    """An empty, list-shaped or broken YAML config stops in one line naming the file and what is wrong (an empty one
    printed only ``Unexpected config:``), also when it follows a good one."""
    config = tmp_path / "mine.yaml"
    config.write_text(text)
    for args in (["--config", str(config)], ["--config", "synthetic_pi", f"--config={config}"]):
        code, errors = stop_of([*args, "--run_root", str(tmp_path / "runs")], package_log)
        assert code == 2 and errors == [f"config={str(config)!r}: {problem}"]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("given, limit", [("2", 2), ("0", 0), ("0.5", 0.5), ("1.0", 1.0), ("1", 1)])
def test_an_integer_batch_limit_is_a_number_of_batches_and_a_float_a_fraction(
    given: str, limit: int | float, tmp_path: Path
) -> None:
    """Lightning's meaning of ``limit_*_batches``: ``2`` is 2 batches, ``0.5`` half of them, ``1.0`` all of them and
    ``1`` one batch; the command line and a config keep an integer an integer (the Trainer's annotation, float
    first, made jsonargparse read ``2`` as ``2.0``, which then had to be refused)."""
    names = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")
    config = tmp_path / "limits.yaml"
    config.write_text(yaml.safe_dump({"trainer": {names[0]: yaml.safe_load(given)}}))
    cli = GraphormerCLI(
        [
            "--config",
            "synthetic_pi",
            "--config",
            str(config),
            "--logger",
            "none",
            *[option for name in names[1:] for option in (f"--trainer.{name}", given)],
        ]
    )
    for name in names:
        assert type(cli.config["trainer"][name]) is type(limit) and cli.config["trainer"][name] == limit, name
        assert type(getattr(cli.trainer, name)) is type(limit) and getattr(cli.trainer, name) == limit, name


def test_a_nested_jsonargparse_report_becomes_one_line_naming_the_key() -> None:
    report = (
        'Parser key "data":\n  Does not validate against any of the Union subtypes\n  Subtypes: [...]\n'
        "  Errors:\n    - Problem with given class_path 'graphormer_urpe.data.datamodule.GraphDataModule':\n"
        "        Parser key \"source.init_args.seed\":\n          Expected a <class 'int'>. Got value: x\n"
        "    - Expected a <class 'NoneType'>\n  Given value type: <class 'str'>"
    )
    assert parse_error_line(report) == "data.source.seed: Expected a <class 'int'>. Got value: x"
    unknown = (
        'Parser key "model":\n  Does not validate against any of the Union subtypes\n  Subtypes: [...]\n'
        "  Errors:\n    - Problem with given class_path 'graphormer_urpe.tasks.GraphRegression':\n"
        "        unrecognized arguments: --encoder.num_layerz=3\n    - Expected a <class 'NoneType'>\n"
        "  Given value: NestedArg(key='encoder.num_layerz', val='3')"
    )
    assert parse_error_line(unknown) == "model.encoder.num_layerz: no such option"
    assert parse_error_line("unrecognized arguments: --nope 3") == "unrecognized arguments: --nope 3"


def test_config_error_shows_values_as_yaml_writes_them() -> None:
    assert str(ConfigError("a.b", None, "x")) == "a.b=null: x"
    assert str(ConfigError("a.b", True, "x")) == "a.b=true: x"
    assert str(ConfigError("a.b", "s", "x")) == "a.b='s': x"


# The messages are the in-process matrix's (CASES); the process adds its plumbing: the error line on stderr, exit
# code 2, no usage text or traceback. One case per kind of refusal: a config check and a parser's type check.
@pytest.mark.slow
@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--model.encoder.spatial_pos_max", "300"],
            "model.encoder.spatial_pos_max=300: must be an integer from 1 to 255",
        ),
        (["--model.optim.head_lr", "abc"], "model.optim.head_lr: Expected a <class 'float'>. Got value: abc"),
    ],
)
def test_the_real_command_line_prints_one_error_line_and_exits_2(
    options: list[str], message: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO_DIR / "train.py"),
            "--config",
            "smiles_csv_example",
            "--run_root",
            str(tmp_path / "runs"),
            "--data.root",
            str(tmp_path / "data"),
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_DIR,
        stdin=subprocess.DEVNULL,
    )
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line or "error" in line.lower()]
    assert done.returncode == 2 and len(errors) == 1 and f"ERROR] {message}" in errors[0], done.stderr
    assert "Traceback" not in done.stderr and "usage:" not in done.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()
