"""``--init_from``: a checkpoint of any dataset or task starts a run; the checkpoint decides the
architecture, the data decides the head and the feature tables must fit; RPE -> URPE predicts
exactly what the RPE model predicted; every refusal is one line; the run records where its weights
came from."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

import pytest
import torch
import yaml

from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.data.spec import DataSpec, SequenceSpec
from graphormer_urpe.errors import CheckpointError
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.model.sequence import SequenceConfig
from graphormer_urpe.run.finetune import config_as_recorded, describe, listed, read_source, take_architecture
from graphormer_urpe.tasks import Classification, GraphRegression
from graphormer_urpe.testing.graphs import make_record
from graphormer_urpe.testing.runs import start_from, train

ENCODER = GraphormerConfig(
    node_vocab=[28],
    edge_vocab=[4],
    num_layers=2,
    hidden_dim=16,
    ffn_dim=16,
    num_heads=4,
    attention="rpe",
    dropout=0.0,
    attention_dropout=0.0,
)
#: The data ENCODER was trained on: ZINC-like, one regression target named ``y``.
ZINC_LIKE = DataSpec(node_vocab=(28,), edge_vocab=(4,), num_targets=1, num_outputs=1)


def trained_like(task: torch.nn.Module, seed: int) -> None:
    """Random weights far from the init (as after training), target statistics included."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in task.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(
                    torch.randn(tensor.shape, generator=generator).abs()
                    if tensor.ndim == 1
                    else torch.randn(tensor.shape, generator=generator)
                )


def save_checkpoint(task: torch.nn.Module, path: Path) -> Path:
    """What Lightning writes, as far as ``--init_from`` reads it."""
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams)}, path)
    return path


def source_task(path: Path, seed: int = 0, **encoder: object) -> GraphRegression:
    """A trained-like ZINC-like regression saved at ``path``."""
    task = GraphRegression(dataclasses.replace(ENCODER, **encoder), data=ZINC_LIKE).eval()
    trained_like(task, seed)
    save_checkpoint(task, path)
    return task


# ----------------------------------------------------------------------------- RPE -> URPE on the same data
@pytest.mark.parametrize("seed", [0, 1])
def test_rpe_checkpoint_becomes_an_equal_urpe_model(tmp_path: Path, rng, seed: int) -> None:
    rpe = source_task(tmp_path / "rpe.ckpt", seed)
    batch = collate_graphs([make_record(rng, n, index=i) for i, n in enumerate((7, 4, 12))])

    urpe = GraphRegression(dataclasses.replace(ENCODER, attention="urpe"), data=ZINC_LIKE).eval()
    with torch.no_grad():
        urpe.model.relative_scale.weight.uniform_(0.5, 1.5)  # must be reset, not kept
    record = start_from(urpe, tmp_path / "rpe.ckpt", ZINC_LIKE)

    assert record["reset_to_ones"] == ["model.relative_scale.weight"] and record["head"] == "kept"
    scale = urpe.model.relative_scale.weight
    assert torch.equal(scale[1:], torch.ones_like(scale[1:])) and torch.equal(scale[0], torch.zeros_like(scale[0]))
    assert torch.equal(urpe(batch), rpe(batch))
    assert torch.equal(urpe.target_std, rpe.target_std) and urpe.head_from_checkpoint


def test_urpe_checkpoint_keeps_its_scale(tmp_path: Path) -> None:
    source = source_task(tmp_path / "urpe.ckpt", attention="urpe")
    target = GraphRegression(dataclasses.replace(ENCODER, attention="urpe"), data=ZINC_LIKE)
    assert start_from(target, tmp_path / "urpe.ckpt", ZINC_LIKE)["reset_to_ones"] == []
    assert torch.equal(target.model.relative_scale.weight, source.model.relative_scale.weight)


# ----------------------------------------------------------------------------- the head follows the data
#: (task class, the new data, why the head is rebuilt): other outputs, another kind, another level, other names.
NEW_TARGETS = [
    (
        GraphRegression,
        DataSpec((28,), (4,), num_targets=2, num_outputs=2, target_names=("a", "b")),
        "num_outputs 1 -> 2; target_names ['y'] -> ['a', 'b']",
    ),
    (
        Classification,
        DataSpec((28,), (4,), num_targets=1, num_outputs=1, target_kind="binary"),
        "target_kind regression -> binary",
    ),
    (
        Classification,
        DataSpec((28,), (4,), num_targets=1, num_outputs=3, target_level="node", target_kind="multiclass"),
        "num_outputs 1 -> 3; readout 'graph_token' -> 'nodes'; target_kind regression -> multiclass",
    ),
    (
        GraphRegression,
        DataSpec((28,), (4,), num_targets=1, num_outputs=1, target_names=("logp",)),
        "target_names ['y'] -> ['logp']",
    ),
]


def test_a_long_list_of_target_names_is_cut_in_the_heads_reason() -> None:
    """A descriptor pretraining has 186 targets: the log line and run.json name twelve (QM9's all) and count
    the rest."""
    assert listed(["y"]) == "['y']" and listed(PRETRAINED_NAMES) == repr(PRETRAINED_NAMES)
    names = [f"d{k}" for k in range(186)]
    assert listed(names) == repr(names[:12])[:-1] + ", +174 more]"


@pytest.mark.parametrize("task_class, data, reason", NEW_TARGETS, ids=["outputs", "kind", "level", "names"])
def test_the_head_is_rebuilt_for_other_targets(tmp_path: Path, task_class: type, data: DataSpec, reason: str) -> None:
    source = source_task(tmp_path / "source.ckpt")
    task = task_class(dataclasses.replace(ENCODER, attention="urpe"), data=data)
    fresh = {k: v.clone() for k, v in task.state_dict().items()}
    record = start_from(task, tmp_path / "source.ckpt", data)

    assert (record["head"], record["head_reason"]) == ("rebuilt", reason)
    state, trained = task.state_dict(), source.state_dict()
    head = [key for key in state if key.startswith("model.head.") or not key.startswith("model.")]
    assert record["rebuilt"] == head and set(head) >= {"model.head.weight", "model.head.bias"}
    assert all(torch.equal(state[key], fresh[key]) for key in head)  # a new head: the task's own initialisation
    encoder = [key for key in state if key not in head and key != "model.relative_scale.weight"]
    assert encoder and all(torch.equal(state[key], trained[key]) for key in encoder)
    assert record["loaded"] == len(encoder) and not task.head_from_checkpoint


def test_the_head_and_its_statistics_are_kept_for_the_same_targets(tmp_path: Path) -> None:
    source = source_task(tmp_path / "source.ckpt")
    task = GraphRegression(ENCODER, normalize_targets=True, data=ZINC_LIKE)
    record = start_from(task, tmp_path / "source.ckpt", ZINC_LIKE)
    assert (record["head"], record["head_reason"], record["rebuilt"]) == (
        "kept",
        "the data's targets are the checkpoint's",
        [],
    )
    assert torch.equal(task.target_mean, source.target_mean) and torch.equal(task.target_std, source.target_std)
    assert task.head_from_checkpoint  # on_fit_start leaves these statistics alone


# ----------------------------------------------------------------------------- refusals, one line each
def test_another_featuriser_is_refused_naming_both(tmp_path: Path) -> None:
    source_task(tmp_path / "zinc.ckpt")
    molecules = DataSpec(node_vocab=(119, 5), edge_vocab=(5, 6, 2), num_targets=1, num_outputs=1, continuous_node_dim=3)
    task = GraphRegression(ENCODER, data=molecules)
    with pytest.raises(CheckpointError) as refused:
        start_from(task, tmp_path / "zinc.ckpt", molecules)
    assert str(refused.value) == (
        f"--init_from {tmp_path / 'zinc.ckpt'}: its feature tables were trained on other input features than this "
        "run's data has: checkpoint (unknown data) node_vocab [28], edge_vocab [4]; data (Data) node_vocab [119, 5], "
        "edge_vocab [5, 6, 2], continuous_node_dim 3; fine-tune it on data featurised the same way"
    )


def test_a_urpe_checkpoint_is_not_cut_down_to_rpe(tmp_path: Path) -> None:
    source_task(tmp_path / "urpe.ckpt", attention="urpe")
    with pytest.raises(CheckpointError) as refused:
        start_from(GraphRegression(ENCODER, data=ZINC_LIKE), tmp_path / "urpe.ckpt", ZINC_LIKE)
    assert str(refused.value) == (
        f"--init_from {tmp_path / 'urpe.ckpt'}: its attention is URPE, with a learned C "
        "that model.encoder.attention=rpe would drop; fine-tune it with "
        "--model.encoder.attention urpe"
    )


def _without_encoder(path: Path) -> None:
    torch.save({"state_dict": {}, "hyper_parameters": {"optim": {}}}, path)


def _with_encoder(path: Path, **fields: object) -> None:
    task = GraphRegression(ENCODER)
    torch.save(
        {"state_dict": task.state_dict(), "hyper_parameters": {"encoder": {**dataclasses.asdict(ENCODER), **fields}}},
        path,
    )


UNREADABLE = [  # (how the file is made, the message or its start)
    (lambda path: None, "--init_from: checkpoint {path} does not exist"),
    (
        lambda path: torch.save({"weights": {}}, path),
        "--init_from: {path} is a torch file but not a Lightning checkpoint (no 'state_dict')",
    ),
    (
        lambda path: path.write_bytes(b"PK\x03\x04 truncated"),
        "--init_from: {path} (14 bytes) is not a readable checkpoint: probably truncated or corrupted (",
    ),
    # issue 38: torch's advice to load the file with weights_only=False (that is, to let it run code) is not passed on
    (
        lambda path: path.write_bytes(bytes(range(132, 256)) * 10),
        "--init_from: {path} (1,240 bytes) is not a readable checkpoint: neither a torch.save archive nor a legacy "
        "torch file (the weights reader stops at pickle opcode 132): not a checkpoint, or a damaged one",
    ),
    (
        lambda path: torch.save({"state_dict": {}, "hyper_parameters": {"encoder": {}, "lr": 1e-3}}, path),
        "{path} was written before the task family was merged (lr outside optim): convert it once with graphormer-urpe "
        "convert upgrade {path} NEW.ckpt",
    ),
    (
        _without_encoder,
        "--init_from {path}: the checkpoint records no encoder settings (hyper_parameters['encoder']); "
        "take one written by graphormer-urpe train or by graphormer-urpe convert",
    ),
    (
        lambda path: _with_encoder(path, num_expert=4, rotary=True),
        "--init_from {path}: its encoder has settings that GraphormerConfig does not know: num_expert, rotary (a "
        "checkpoint of another network, or of a newer version?)",
    ),
    (
        lambda path: _with_encoder(path, num_heads=3),
        "--init_from {path}: its encoder settings are not valid: model.encoder.num_heads=3: must divide "
        "model.encoder.hidden_dim=16 (each head gets hidden_dim / num_heads dimensions)",
    ),
]


@pytest.mark.parametrize(
    "make, message",
    UNREADABLE,
    ids=[
        "missing",
        "not-lightning",
        "truncated",
        "random-bytes",
        "old-layout",
        "no-encoder",
        "unknown-field",
        "invalid",
    ],
)
def test_unusable_checkpoints_are_refused_in_one_line(tmp_path: Path, make, message: str) -> None:
    path = tmp_path / "source.ckpt"
    make(path)
    with pytest.raises(CheckpointError) as refused:
        read_source(str(path), GraphRegression)
    assert str(refused.value).startswith(message.format(path=path)) and "\n" not in str(refused.value)
    assert "weights_only" not in str(refused.value)


# ----------------------------------------------------------------------------- the architecture and the record
def test_the_checkpoint_decides_the_architecture_and_the_warning_names_what_it_replaced(
    tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    source_task(tmp_path / "source.ckpt", max_degree=12, multi_hop_max_dist=3, layer_norm="post")
    config = dataclasses.asdict(
        GraphormerConfig(
            num_layers=4, hidden_dim=16, ffn_dim=32, num_heads=4, attention="urpe", dropout=0.3, drop_path=0.2
        )
    )
    overridden = take_architecture(config, read_source(str(tmp_path / "source.ckpt"), GraphRegression))

    assert {field: config[field] for field in GraphormerConfig.ARCHITECTURE} == {
        field: getattr(dataclasses.replace(ENCODER, max_degree=12, multi_hop_max_dist=3, layer_norm="post"), field)
        for field in GraphormerConfig.ARCHITECTURE
    }
    assert (config["attention"], config["dropout"], config["drop_path"]) == ("urpe", 0.3, 0.2)  # the run's own
    assert overridden == {
        "num_layers": {"config": 4, "checkpoint": 2},
        "ffn_dim": {"config": 32, "checkpoint": 16},
        "max_degree": {"config": 64, "checkpoint": 12},
        "multi_hop_max_dist": {"config": 5, "checkpoint": 3},
        "layer_norm": {"config": "pre", "checkpoint": "post"},
    }
    assert [r.getMessage() for r in package_log.records] == [
        f"--init_from {tmp_path / 'source.ckpt'} decides the encoder's architecture; replaced in the config: "
        "num_layers 4 -> 2, ffn_dim 32 -> 16, max_degree 64 -> 12, multi_hop_max_dist 5 -> 3, layer_norm 'pre' -> "
        "'post'"
    ]


def test_a_config_as_its_run_records_it_has_the_checkpoints_architecture(
    tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    """What ``seeds.py`` compares with a seed's ``config.yaml`` (issue 38): the printed config with ``--init_from``'s
    architecture, everything else as it was; no checkpoint, no change; an unreadable one, one line."""
    source_task(tmp_path / "source.ckpt", layer_norm="post")
    encoder = dataclasses.asdict(GraphormerConfig(num_layers=4, hidden_dim=16, ffn_dim=32, num_heads=4, dropout=0.3))
    printed = {
        "seed_everything": 1,
        "init_from": str(tmp_path / "source.ckpt"),
        "model": {
            "class_path": "graphormer_urpe.tasks.GraphRegression",
            "init_args": {"encoder": encoder, "loss": "l1"},
        },
    }
    recorded = config_as_recorded(printed)
    expected = {
        **encoder,
        **{field: getattr(ENCODER, field) for field in GraphormerConfig.ARCHITECTURE},
        "layer_norm": "post",
    }
    assert recorded == {**printed, "model": {**printed["model"], "init_args": {"encoder": expected, "loss": "l1"}}}
    assert printed["model"]["init_args"]["encoder"] == encoder  # the printed config stays as it was
    assert config_as_recorded({**printed, "init_from": None}) == {**printed, "init_from": None}
    assert not package_log.records  # no warning: the sweep's seed warns when it runs
    (tmp_path / "random.bin").write_bytes(bytes(range(132, 256)) * 10)
    with pytest.raises(CheckpointError, match="^--init_from: .*random.bin .*is not a readable checkpoint: [^\n]*$"):
        config_as_recorded({**printed, "init_from": str(tmp_path / "random.bin")})


def test_the_record_says_where_the_weights_came_from(tmp_path: Path) -> None:
    source_task(tmp_path / "source.ckpt")
    task = GraphRegression(dataclasses.replace(ENCODER, attention="urpe"), data=NEW_TARGETS[0][1])
    record = start_from(task, tmp_path / "source.ckpt", NEW_TARGETS[0][1])
    assert task.initialised_from is record
    assert record["path"] == str(tmp_path / "source.ckpt")
    assert record["sha256"] == hashlib.sha256((tmp_path / "source.ckpt").read_bytes()).hexdigest()
    assert record["source"] == {
        "data": {
            "node_vocab": [28],
            "edge_vocab": [4],
            "continuous_node_dim": 0,
            "continuous_edge_dim": 0,
            "num_outputs": 1,
            "readout": "graph_token",
            "molecule_features": [],
            "target_kind": "regression",
            "target_names": ["y"],
            "name": "unknown data",
        },
        "converted_from": None,
        "config": None,
        "initialised_from": None,
        "global_step": None,
    }
    assert record["architecture"] == {field: getattr(ENCODER, field) for field in GraphormerConfig.ARCHITECTURE}
    assert record["reset_to_ones"] == ["model.relative_scale.weight"] and record["molecule_features"] == "none"


@pytest.mark.parametrize(
    "config_class, spec_class, own",
    [
        (
            GraphormerConfig,
            DataSpec,
            {
                "attention",
                "input_dropout",
                "dropout",
                "attention_dropout",
                "activation_dropout",
                "drop_path",
                "molecule_features_into",
            },
        ),
        (SequenceConfig, SequenceSpec, {"attention", "dropout", "attention_dropout"}),
    ],
)
def test_every_encoder_field_is_the_checkpoints_the_datas_or_the_runs(
    config_class: type, spec_class: type, own: set[str]
) -> None:
    """A new field must be sorted into one of the four, or ``--init_from`` would silently take the config's."""
    parts = [
        set(config_class.ARCHITECTURE),
        set(spec_class.FEATURE_FIELDS),
        set(spec_class.OUTPUT_FIELDS),
        set(spec_class.MOLECULE_FIELDS),
        own,
    ]
    assert sum(len(part) for part in parts) == len(set().union(*parts))  # disjoint
    assert set().union(*parts) == {f.name for f in dataclasses.fields(config_class)}


def test_a_sequence_checkpoint_starts_a_sequence_run(tmp_path: Path) -> None:
    from graphormer_urpe.tasks import SequenceTagging

    spec = SequenceSpec(vocab_size=10, num_classes=4, length=8)
    encoder = SequenceConfig(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2, attention="rpe")
    source = SequenceTagging(encoder, data=spec)
    trained_like(source, 0)
    save_checkpoint(source, tmp_path / "rpe.ckpt")
    task = SequenceTagging(dataclasses.replace(encoder, attention="urpe"), data=spec)
    record = start_from(task, tmp_path / "rpe.ckpt", spec)
    assert record["head"] == "kept" and record["reset_to_ones"] == ["model.relative_scale.weight"]
    tokens = torch.randint(0, 10, (3, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(task.eval().model(tokens), source.eval().model(tokens))


def test_a_graph_task_refuses_a_sequence_checkpoint(tmp_path: Path) -> None:
    from graphormer_urpe.tasks import SequenceTagging

    spec = SequenceSpec(vocab_size=10, num_classes=4, length=8)
    save_checkpoint(
        SequenceTagging(SequenceConfig(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2), data=spec),
        tmp_path / "sequence.ckpt",
    )
    with pytest.raises(
        CheckpointError,
        match=(
            r"its encoder has settings that GraphormerConfig does not know: length, num_buckets, num_classes, "
            r"vocab_size \(a checkpoint of another network"
        ),
    ):
        read_source(str(tmp_path / "sequence.ckpt"), GraphRegression)


# ----------------------------------------------------------------------------- train.py end to end
QUIET = [
    "--data.num_workers",
    "0",
    "--data.preprocess_workers",
    "0",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]
#: A tiny model (the fine-tuning runs take it from the checkpoint).
TINY_MODEL = [
    "--model.encoder.num_layers",
    "2",
    "--model.encoder.hidden_dim",
    "16",
    "--model.encoder.ffn_dim",
    "16",
    "--model.encoder.num_heads",
    "4",
]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny ``qm9_pretrain`` run on 300 QM9 molecules: (its best checkpoint, the data root)."""
    base = tmp_path_factory.mktemp("pretrain")
    metrics = train(
        [
            "--config",
            "qm9_pretrain",
            "--data.source.max_molecules",
            "300",
            "--data.root",
            str(base / "data"),
            "--run_root",
            str(base / "runs"),
            "--run_name",
            "pre",
            *TINY_MODEL,
            "--trainer.max_steps",
            "6",
            "--trainer.val_check_interval",
            "3",
            *QUIET,
        ]
    )
    return Path(metrics["best_checkpoint"]), base / "data"


def fine_tune(config: str, source: Path, data_root: Path, runs: Path, name: str, *extra: str) -> Path:
    """``train.py --config CONFIG --init_from SOURCE``: one step (at the warm-up's first learning rate, 0, so
    the loaded weights stay as they are); returns the run directory."""
    train(
        [
            "--config",
            config,
            "--init_from",
            str(source),
            "--data.root",
            str(data_root),
            "--run_root",
            str(runs),
            "--run_name",
            name,
            "--trainer.max_steps",
            "1",
            *QUIET,
            *extra,
        ]
    )
    return runs / name


def saved(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


PRETRAINED_NAMES = [
    "mu_debye",
    "alpha_bohr3",
    "homo_ev",
    "lumo_ev",
    "gap_ev",
    "r2_bohr2",
    "zpve_ev",
    "u0_ev",
    "u298_ev",
    "h298_ev",
    "g298_ev",
    "cv_cal_mol_k",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "config, reason",
    [
        ("smiles_csv_example", f"num_outputs 12 -> 2; target_names {PRETRAINED_NAMES} -> ['gap_ev', 'mu_debye']"),
        (
            "smiles_csv_classification",
            f"num_outputs 12 -> 1; target_kind regression -> binary; target_names {PRETRAINED_NAMES} -> ['polar']",
        ),
    ],
)
def test_the_qm9_pretraining_starts_a_table_of_molecules(
    pretrained: tuple[Path, Path], tmp_path: Path, config: str, reason: str
) -> None:
    import evaluate
    from graphormer_urpe.run.checkpoints import CONFIG_KEY
    from graphormer_urpe.tasks.base import INITIALISED_FROM

    source, data_root = pretrained
    run_dir = fine_tune(config, source, data_root, tmp_path, "tuned")
    before, after = saved(source), saved(run_dir / "checkpoints" / "last.ckpt")
    encoder = [key for key in before["state_dict"] if key.startswith("model.") and not key.startswith("model.head.")]
    assert all(torch.equal(after["state_dict"][key], before["state_dict"][key]) for key in encoder)
    assert after["state_dict"]["model.head.weight"].shape[0] < 12  # the data's outputs: a new head
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["init_args"]["encoder"]
    assert (resolved["num_layers"], resolved["hidden_dim"], resolved["num_heads"]) == (2, 16, 4)  # the checkpoint's
    assert resolved == yaml.safe_load(after[CONFIG_KEY])["model"]["init_args"]["encoder"]

    run = json.loads((run_dir / "run.json").read_text())
    record = run["segments"][0]["initialised_from"]  # the segment that loaded it holds the whole record
    assert record == after[INITIALISED_FROM] and run["initialised_from"] == describe(record)
    assert (record["path"], record["sha256"]) == (str(source), hashlib.sha256(source.read_bytes()).hexdigest())
    assert (record["head"], record["head_reason"]) == ("rebuilt", reason)
    assert record["overridden"] == {
        "num_layers": {"config": 4, "checkpoint": 2},
        "hidden_dim": {"config": 64, "checkpoint": 16},
        "ffn_dim": {"config": 64, "checkpoint": 16},
        "num_heads": {"config": 8, "checkpoint": 4},
    }
    assert record["source"]["data"]["name"] == "QM9" and record["source"]["global_step"] == before["global_step"]
    assert record["source"]["config"] == before[CONFIG_KEY] and record["source"]["converted_from"] is None

    metrics = json.loads((run_dir / "metrics.json").read_text())
    result = evaluate.main(["--ckpt", str(run_dir / "checkpoints" / "last.ckpt"), "--split", "valid"])
    assert result.metrics == metrics["validation"]  # the same weights, the same architecture
    assert (
        result.initialised_from == f"{source} (sha256 {record['sha256'][:12]}; QM9, step "
        f"{before['global_step']}): head rebuilt ({reason})"
    )


@pytest.mark.slow
def test_a_fine_tuned_run_starts_another_and_keeps_its_head_and_the_chain(
    pretrained: tuple[Path, Path], tmp_path: Path
) -> None:
    source, data_root = pretrained
    first = fine_tune("smiles_csv_example", source, data_root, tmp_path, "first")
    second = fine_tune(
        "smiles_csv_example",
        first / "checkpoints" / "last.ckpt",
        data_root,
        tmp_path,
        "second",
        "--model.encoder.attention",
        "urpe",
    )
    one, two = saved(first / "checkpoints" / "last.ckpt"), saved(second / "checkpoints" / "last.ckpt")
    assert two["state_dict"].keys() == one["state_dict"].keys()
    assert all(torch.equal(two["state_dict"][key], one["state_dict"][key]) for key in one["state_dict"])
    record = two["initialised_from"]
    assert (record["head"], record["rebuilt"]) == ("kept", [])
    assert record["overridden"] == one["initialised_from"]["overridden"]  # the config's 4 x 64 again
    assert record["source"]["initialised_from"]["path"] == str(source)  # the chain back to the pretraining
    assert record["source"]["data"]["name"] == "SmilesTable"


@pytest.mark.slow
def test_a_resume_wins_over_init_from(
    pretrained: tuple[Path, Path], tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    source, data_root = pretrained
    run_dir = fine_tune("smiles_csv_example", source, data_root, tmp_path, "run")
    last = run_dir / "checkpoints" / "last.ckpt"
    first = saved(last)
    package_log.clear()
    train(
        [
            "--config",
            "smiles_csv_example",
            "--init_from",
            str(source),
            "--data.root",
            str(data_root),
            "--run_root",
            str(tmp_path),
            "--run_name",
            "run",
            "--ckpt_path",
            "last",
            "--trainer.max_steps",
            "3",
            *QUIET,
        ]
    )
    messages = [r.getMessage() for r in package_log.records]
    assert f"resuming from {last}: --init_from {source} only starts new runs (it decided the architecture)" in messages
    assert not any(m.startswith("initialised from") for m in messages)
    again = saved(last)
    assert again["global_step"] == 3 and again["initialised_from"] == first["initialised_from"]
    run = json.loads((run_dir / "run.json").read_text())
    assert [segment["initialised_from"] for segment in run["segments"]] == [first["initialised_from"], None]
    assert run["initialised_from"] == describe(first["initialised_from"])  # the run's weights, after the resume


@pytest.mark.slow
def test_failures_are_one_line_before_any_work(
    pretrained: tuple[Path, Path], tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    """Another featuriser, an unknown architecture field: exit code 2, one line, no run directory."""
    source, data_root = pretrained
    odd = saved(source)
    odd["hyper_parameters"]["encoder"]["sparse_attention"] = True
    torch.save(odd, tmp_path / "odd.ckpt")
    cases = [
        (
            ["--config", "pyg_tu_example", "--init_from", str(source)],
            f"--init_from {source}: its feature tables were trained on other input features than this run's data has: "
            "checkpoint (QM9) node_vocab [119, 5, 12, 12, 10, 6, 6, 2, 2], edge_vocab [5, 6, 2]; data (PygDataset) "
            "node_vocab [1], edge_vocab [1], continuous_node_dim 5, continuous_edge_dim 5; fine-tune it on data "
            "featurised the same way",
        ),
        (
            ["--config", "smiles_csv_example", "--init_from", str(tmp_path / "odd.ckpt")],
            f"--init_from {tmp_path / 'odd.ckpt'}: its encoder has settings that GraphormerConfig does not know: "
            "sparse_attention (a checkpoint of another network, or of a newer version?)",
        ),
    ]
    for args, message in cases:
        package_log.clear()
        with pytest.raises(SystemExit) as stop:
            train([*args, "--data.root", str(data_root), "--run_root", str(tmp_path / "runs"), *QUIET])
        assert stop.value.code == 2
        assert [r.getMessage() for r in package_log.records if r.levelno >= logging.ERROR] == [message]
        assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "config, reason",
    [
        ("smiles_csv_example", "num_outputs 1 -> 2"),
        ("smiles_csv_classification", "target_kind regression -> binary"),
    ],
)
def test_an_official_pcqm4mv2_model_fine_tunes_on_a_table(
    tmp_path: Path, config: str, reason: str, package_log: pytest.LogCaptureFixture
) -> None:
    """``graphormer-urpe convert official``, then the same command as from our pretraining; the
    converted checkpoint records no target names, so its head goes with the number, kind and level of outputs."""
    from graphormer_urpe.commands.__main__ import main
    from graphormer_urpe.testing.official_checkpoints import official_weights, save_official

    official = save_official(tmp_path / "pcqm4mv2_v2.pt", "fairseq", official_weights("v2"))
    assert main(["convert", "official", str(official), str(tmp_path / "pcqm4mv2_v2.ckpt")]) == 0
    run_dir = fine_tune(config, tmp_path / "pcqm4mv2_v2.ckpt", tmp_path / "data", tmp_path / "runs", "tuned")
    before, after = saved(tmp_path / "pcqm4mv2_v2.ckpt"), saved(run_dir / "checkpoints" / "last.ckpt")
    encoder = [key for key in before["state_dict"] if key.startswith("model.") and not key.startswith("model.head.")]
    assert all(torch.equal(after["state_dict"][key], before["state_dict"][key]) for key in encoder)
    scale = after["state_dict"]["model.relative_scale.weight"]  # the config's URPE, from the RPE import
    assert torch.equal(scale[1:], torch.ones_like(scale[1:]))
    record = after["initialised_from"]
    assert (record["head"], record["head_reason"]) == ("rebuilt", reason)
    assert record["source"]["converted_from"] == before["converted_from"]
    assert record["source"]["data"]["name"] == "official v2 checkpoint"
    architecture = yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["init_args"]["encoder"]
    assert (architecture["layer_norm"], architecture["head"], architecture["spatial_pos_max"]) == ("post", "v2", None)
    messages = [r.getMessage() for r in package_log.records]
    assert (
        f"--init_from {tmp_path / 'pcqm4mv2_v2.ckpt'} learned its edge encoding on shortest paths in the order "
        "official, this run's data follows smallest_next: set data.path_order official to give it exactly those "
        "paths"
    ) in messages
