"""DataSpec and SequenceSpec: every shipped config declares the data it reads and builds the model it built
before the spec existed; the data decides its fields of the encoder and of the task, and says so."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

import evaluate
import train
from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.lsc_formats import MAG240M, PCQM4MV2
from graphormer_urpe.data.sources import QM9
from graphormer_urpe.data.sources.descriptors import descriptor_reference
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.data.spec import DataSpec, SequenceSpec
from graphormer_urpe.errors import DataError
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.model.sequence import SequenceConfig
from graphormer_urpe.run.checkpoints import CONFIG_KEY
from graphormer_urpe.run.cli import GraphormerCLI
from graphormer_urpe.tasks import Classification, GraphRegression, SequenceTagging
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.moses_layout import write_moses_package
from graphormer_urpe.testing.ogb_layouts import write_pcqm4mv2
from graphormer_urpe.testing.runs import TINY_MOLECULES, tiny_run_args
from graphormer_urpe.testing.zinc_raw import write_zinc_raw


@dataclass(frozen=True)
class Expected:
    """What a config resolves to.

    Args:
        spec: the data's declaration, written out by hand.
        parameters: trainable parameters of the task.
        layout: first 16 hex digits of the SHA-256 of the task's state dict, one ``name (shape)`` line
            per tensor in name order (:func:`layout_digest`).
    """

    spec: DataSpec | SequenceSpec
    parameters: int
    layout: str


MOLECULES = dict(node_vocab=ATOM_VOCAB, edge_vocab=BOND_VOCAB)
DESCRIPTORS = descriptor_reference()
#: Parameter counts and state-dict layouts are those main built at 42a5948 (before the DataSpec), with
#: the 11 name-matched links: the same models.
EXPECTED = {
    "mag240m": Expected(
        DataSpec(
            node_vocab=(3,),
            edge_vocab=(6,),
            num_targets=1,
            num_outputs=153,
            continuous_node_dim=768,
            target_level="target_node",
            target_kind="multiclass",
            target_names=("y",),
            submission=MAG240M,
        ),
        10_033_145,
        "4cfb0f43e0a469d7",
    ),
    # the shipped pretraining: the descriptors that vary over MOSES as targets, already on one scale
    "pretrain_moses": Expected(
        DataSpec(
            **MOLECULES,
            num_targets=len(DESCRIPTORS.informative),
            num_outputs=len(DESCRIPTORS.informative),
            target_names=tuple(DESCRIPTORS.names[k] for k in DESCRIPTORS.informative),
        ),
        594_378,
        "d6f42cebf0dfe8c2",
    ),
    "pcqm4mv2": Expected(
        DataSpec(**MOLECULES, num_targets=1, num_outputs=1, target_names=("homolumogap",), submission=PCQM4MV2),
        9_649_217,
        "937d6c5e2a291781",
    ),
    "pyg_tu_example": Expected(
        DataSpec(
            node_vocab=(1,),
            edge_vocab=(1,),
            num_targets=1,
            num_outputs=1,
            continuous_node_dim=5,
            continuous_edge_dim=5,
            target_names=("gap_ev",),
        ),
        110_817,
        "e28e25d9cdab054e",
    ),
    "qm9_gap": Expected(
        DataSpec(**MOLECULES, num_targets=1, num_outputs=1, target_names=("gap_ev",)), 638_097, "969e502f587c018c"
    ),
    "qm9_pretrain": Expected(
        DataSpec(
            **MOLECULES,
            num_targets=12,
            num_outputs=12,
            target_names=(
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
            ),
        ),
        639_516,
        "412ef8d1df850bb3",
    ),  # the qm9_gap model with 12 outputs
    # the recipe, as its config alone builds it (the encoder defaults, 12 layers of width 80, and the descriptors'
    # block at the readout); a training start takes the shipped checkpoint's architecture instead (tests/pretrained)
    "small_molecules": Expected(
        DataSpec(
            **MOLECULES,
            num_targets=1,
            num_outputs=1,
            target_names=("gap_ev",),
            molecule_features=tuple(f"rdkit2d/{name}" for name in DESCRIPTORS.names),
        ),
        526_385,
        "4f6c86ae0dc37167",
    ),
    "small_molecules_classification": Expected(
        DataSpec(
            **MOLECULES,
            num_targets=1,
            num_outputs=1,
            target_kind="binary",
            target_names=("polar",),
            molecule_features=tuple(f"rdkit2d/{name}" for name in DESCRIPTORS.names),
        ),
        526_385,
        "77999700b24266a5",
    ),
    "smiles_csv_classification": Expected(
        DataSpec(**MOLECULES, num_targets=1, num_outputs=1, target_kind="binary", target_names=("polar",)),
        121_553,
        "b2b60ce8e9bbe782",
    ),
    "smiles_csv_example": Expected(
        DataSpec(**MOLECULES, num_targets=2, num_outputs=2, target_names=("gap_ev", "mu_debye")),
        121_618,
        "32fc24cc2ed454ea",
    ),
    "synthetic_etp": Expected(SequenceSpec(vocab_size=10, num_classes=11, length=32), 152_211, "2ad3251d21f7c2ed"),
    "synthetic_graph": Expected(
        DataSpec(
            node_vocab=(1,),
            edge_vocab=(1,),
            num_targets=1,
            num_outputs=7,
            target_level="node",
            target_kind="multiclass",
            target_names=("y",),
        ),
        110_711,
        "8703924dfd083793",
    ),
    "synthetic_pi": Expected(SequenceSpec(vocab_size=10, num_classes=32, length=32), 153_576, "be6bbd6890b44dd6"),
    "zinc_full": Expected(
        DataSpec(node_vocab=(28,), edge_vocab=(4,), num_targets=1, num_outputs=1, target_names=("y",)),
        484_633,
        "6371cf7f06eb3287",
    ),
    "zinc_subset": Expected(
        DataSpec(node_vocab=(28,), edge_vocab=(4,), num_targets=1, num_outputs=1, target_names=("y",)),
        484_633,
        "6371cf7f06eb3287",
    ),
}


def layout_digest(module: torch.nn.Module) -> str:
    """First 16 hex digits of the SHA-256 of ``name (shape)`` lines of the state dict, in name order."""
    listing = "\n".join(f"{name} {tuple(tensor.shape)}" for name, tensor in sorted(module.state_dict().items()))
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def cli(config: str, tmp_path: Path, *extra: str) -> GraphormerCLI:
    return GraphormerCLI(["--config", config, "--run_root", str(tmp_path / "runs"), "--logger", "none", *extra])


def test_every_shipped_config_has_an_expectation() -> None:
    assert sorted(EXPECTED) == sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


@pytest.mark.parametrize("config", sorted(EXPECTED))
def test_every_config_resolves_to_its_data_and_to_the_model_it_built_before(config: str, tmp_path: Path) -> None:
    """Nothing is read but the shipped examples (the PyG example, the SMILES tables): the other specs are declared."""
    expected = EXPECTED[config]
    built = cli(config, tmp_path, *([] if config.startswith("synthetic") else ["--data.root", str(tmp_path / "data")]))
    assert built.datamodule.spec == expected.spec
    encoder = built.model.model.config
    assert {key: getattr(encoder, key) for key in expected.spec.encoder_fields()} == expected.spec.encoder_fields()
    assert sum(p.numel() for p in built.model.parameters()) == expected.parameters
    assert layout_digest(built.model) == expected.layout
    assert (built.model.hparams.get("target_kind", "multiclass"), built.model.target_names) == (
        expected.spec.target_kind,
        list(expected.spec.target_names),
    )
    assert not (tmp_path / "data").exists()  # describing the data builds nothing


# ----------------------------------------------------------------------------- the data matches its spec


def qm9_sample_smiles(count: int) -> list[str]:
    return pd.read_csv(REPO_DIR / "examples" / "qm9_sample.csv")["smiles"].head(count).tolist()


def fixture_arguments(config: str, root: Path, synthetic_mag: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Command-line arguments that point ``config`` at small data: generated in the real on-disk layout
    where the real dataset is absent, the embedded and shipped data otherwise."""
    graphs = ["--data.root", str(root), "--data.batch_size", "8", "--data.num_workers", "0"]
    if config == "pretrain_moses":  # the molsets wheel's layout, with 120 of the example table's molecules
        write_moses_package(root / "site", qm9_sample_smiles(120))
        monkeypatch.syspath_prepend(str(root / "site"))
        return [
            *graphs,
            "--data.preprocess_workers",
            "0",
            "--data.source.molecules",
            "100",
            "--data.source.valid_fraction",
            "0.1",
        ]
    if config.startswith("zinc"):
        write_zinc_raw(root / "ZINC" / "raw", {"train": 12, "val": 8, "test": 6}, {"train": 8, "val": 8, "test": 4})
        return [*graphs, "--data.preprocess_workers", "0"]
    if config == "pcqm4mv2":
        starts = [0, 20, 30, 35, 40]
        splits = {name: np.arange(starts[k], starts[k + 1]) for k, name in enumerate(PCQM4MV2.splits)}
        gaps = np.where(np.arange(40) < 30, np.linspace(3.0, 9.0, 40), np.nan)
        write_pcqm4mv2(root, qm9_sample_smiles(40), gaps, splits)
        return [*graphs, "--data.preprocess_workers", "0"]
    if config.startswith("qm9"):
        return [*graphs, "--data.preprocess_workers", "0", "--data.source.max_molecules", "50"]
    if config.startswith(("smiles", "pyg", "small")):
        return [*graphs, "--data.preprocess_workers", "0"]
    if config == "mag240m":
        return [
            "--data.root",
            str(synthetic_mag),
            "--data.num_classes",
            "8",
            "--data.batch_size",
            "8",
            "--data.fanouts",
            "[3, 2]",
            "--data.num_workers",
            "0",
        ]
    if config == "synthetic_graph":
        return [
            "--data.train_graphs",
            "4",
            "--data.val_graphs",
            "4",
            "--data.test_graphs",
            "4",
            "--data.batch_size",
            "4",
        ]
    return ["--data.val_size", "8", "--data.test_size", "8", "--data.batch_size", "4"]  # sequences


def assert_batch_fits(batch: object, spec: DataSpec | SequenceSpec) -> None:
    """Every feature column, value and target of ``batch`` is what ``spec`` declares."""
    if isinstance(spec, SequenceSpec):
        assert batch.tokens.shape[1] == spec.length and int(batch.tokens.max()) < spec.vocab_size
        assert int(batch.labels.min()) >= 0 and int(batch.labels.max()) < spec.num_classes
        return
    x = batch.x[batch.node_mask]  # (V, F) real nodes
    assert x.shape[1] == len(spec.node_vocab) and (x < torch.tensor(spec.node_vocab)).all() and (x >= 0).all()
    assert batch.edge_attr.shape[1] == len(spec.edge_vocab)
    assert (batch.edge_attr < torch.tensor(spec.edge_vocab)).all() and (batch.edge_attr >= 0).all()
    assert batch.x_continuous.shape[-1] == spec.continuous_node_dim
    assert batch.edge_continuous.shape[-1] == spec.continuous_edge_dim
    y = batch.y[batch.node_mask] if spec.target_level == "node" else batch.y  # (K, Y)
    assert y.dim() == 2 and y.shape[1] == spec.num_targets
    labels = y[~torch.isnan(y)]
    assert len(labels)
    if spec.target_kind == "binary":
        assert set(labels.tolist()) <= {0.0, 1.0}
    if spec.target_kind == "multiclass":
        assert ((labels >= 0) & (labels < spec.num_outputs) & (labels == labels.round())).all()


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(EXPECTED))
def test_every_configs_data_is_what_its_spec_declares(
    config: str, tmp_path: Path, synthetic_mag: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built on small data, each datamodule's batches fit its spec, and the model built from the spec reads
    them into predictions of the declared width."""
    built = cli(config, tmp_path, *fixture_arguments(config, tmp_path / "data", synthetic_mag, monkeypatch))
    data, spec = built.datamodule, built.datamodule.spec
    expected = EXPECTED[config].spec
    assert spec == (dataclasses.replace(expected, num_outputs=8) if config == "mag240m" else expected)
    data.trainer = built.trainer
    data.prepare_data()
    data.setup("fit")
    batch = data.on_after_batch_transfer(next(iter(data.val_dataloader())), 0)
    assert_batch_fits(batch, spec)
    with torch.no_grad():
        output = built.model.eval()(batch)
    if isinstance(spec, SequenceSpec):
        assert output.shape == (*batch.tokens.shape, spec.num_classes)
    elif spec.target_level == "node":
        assert output.shape == (*batch.node_mask.shape, spec.num_outputs)
    else:
        assert output.shape == (batch.num_graphs, spec.num_outputs)


# ----------------------------------------------------------------------------- the declaration itself


def test_readout_and_default_names_follow_from_the_declaration() -> None:
    graphs = DataSpec(node_vocab=[28], edge_vocab=[4], num_targets=3, num_outputs=3)
    assert graphs.node_vocab == (28,) and graphs.target_names == ("y0", "y1", "y2") and graphs.readout == "graph_token"
    nodes = DataSpec(
        node_vocab=(1,), edge_vocab=(1,), num_targets=1, num_outputs=5, target_level="node", target_kind="multiclass"
    )
    assert nodes.target_names == ("y",) and nodes.readout == "nodes"
    assert nodes.encoder_fields() == {
        "node_vocab": [1],
        "edge_vocab": [1],
        "num_outputs": 5,
        "continuous_node_dim": 0,
        "continuous_edge_dim": 0,
        "readout": "nodes",
        "molecule_features": [],
    }
    assert SequenceSpec(10, 11, 32).encoder_fields() == {"vocab_size": 10, "num_classes": 11, "length": 32}


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"num_targets": 2, "num_outputs": 1},
            r"regression targets have one output each, got num_targets=2, num_outputs=1",
        ),
        (
            {"num_targets": 2, "num_outputs": 4, "target_kind": "multiclass"},
            r"a multi-class target is one column with at least 2 classes, got num_targets=2, num_outputs=4",
        ),
        ({"num_targets": 1, "num_outputs": 1, "target_kind": "multiclass"}, r"at least 2 classes"),
        ({"num_targets": 2, "num_outputs": 2, "target_names": ("a",)}, r"1 target names \('a',\) for num_targets=2"),
        (
            {"num_targets": 1, "num_outputs": 1, "node_vocab": (3, 0)},
            r"DataSpec.node_vocab=\(3, 0\): one entry of at least 1",
        ),
        ({"num_targets": 1, "num_outputs": 1, "target_level": "edge"}, r"target_level='edge'"),
    ],
)
def test_a_contradictory_declaration_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DataSpec(**{"node_vocab": (2,), "edge_vocab": (2,), **fields})


# ----------------------------------------------------------------------------- what the data decides


TINY = dict(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2)


def test_the_task_takes_the_encoder_fields_and_targets_from_the_spec() -> None:
    spec = DataSpec(
        node_vocab=(5, 3),
        edge_vocab=(2,),
        num_targets=1,
        num_outputs=4,
        continuous_node_dim=6,
        target_level="node",
        target_kind="multiclass",
        target_names=("label",),
    )
    task = Classification(GraphormerConfig(**TINY), data=spec)
    config = task.model.config
    assert (
        list(config.node_vocab),
        list(config.edge_vocab),
        config.num_outputs,
        config.continuous_node_dim,
        config.readout,
    ) == ([5, 3], [2], 4, 6, "nodes")
    assert task.hparams["target_kind"] == "multiclass" and task.hparams["target_names"] == ["label"]
    assert task.hparams["encoder"]["node_vocab"] == [5, 3] and "data" not in task.hparams
    sequence = SequenceTagging(SequenceConfig(**TINY), data=SequenceSpec(7, 9, 12))
    assert (sequence.model.config.vocab_size, sequence.model.config.num_classes, sequence.model.config.length) == (
        7,
        9,
        12,
    )
    assert "target_kind" not in sequence.hparams


@pytest.mark.parametrize(
    "task, settings, message",
    [
        (
            GraphRegression,
            {"encoder": {"num_outputs": 3}},
            r"model.encoder.num_outputs=3 but the data has 2: the data decides this setting; remove it from the config",
        ),
        (
            GraphRegression,
            {"encoder": {"node_vocab": [119]}},
            r"model.encoder.node_vocab=\[119\] but the data has \[119, 5",
        ),
        (
            GraphRegression,
            {"encoder": {"readout": "nodes"}},
            r"model.encoder.readout='nodes' but the data has 'graph_token'",
        ),
        (
            GraphRegression,
            {"target_names": ["a", "b"]},
            r"model.target_names=\['a', 'b'\] but the data has \['gap_ev', 'mu",
        ),
        (
            Classification,
            {"target_kind": "multiclass"},
            r"model.target_kind='multiclass' but the data has 'regression'",
        ),
    ],
)
def test_a_setting_the_data_decides_is_never_replaced_silently(task: type, settings: dict, message: str) -> None:
    spec = EXPECTED["smiles_csv_example"].spec
    encoder = GraphormerConfig(**TINY, **settings.pop("encoder", {}))
    with pytest.raises(DataError, match=message):
        task(encoder, data=spec, **settings)


def test_the_datas_own_values_may_be_written_in_a_config(tmp_path: Path) -> None:
    built = cli(
        "smiles_csv_example",
        tmp_path,
        "--model.encoder.num_outputs",
        "2",
        "--model.target_names",
        "[gap_ev, mu_debye]",
        "--model.encoder.readout",
        "graph_token",
    )
    assert built.model.model.config.num_outputs == 2 and built.model.target_names == ["gap_ev", "mu_debye"]


def test_a_conflicting_setting_stops_train_py_with_one_line(
    tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(SystemExit) as stop:
        train.main(
            [
                "--config",
                "smiles_csv_example",
                "--model.encoder.num_outputs",
                "5",
                "--run_root",
                str(tmp_path / "runs"),
                "--data.root",
                str(tmp_path / "data"),
            ]
        )
    assert stop.value.code == 2 and not (tmp_path / "runs").exists()
    assert [r.getMessage() for r in package_log.records if r.levelname == "ERROR"] == [
        "model.encoder.num_outputs=5 but the data has 2: the data decides this setting; remove it from the config"
    ]


def test_a_task_refuses_a_spec_of_the_other_family() -> None:
    with pytest.raises(
        DataError,
        match="SequenceTagging trains on data described by a SequenceSpec, the data gives a "
        "DataSpec: choose the task for this data",
    ):
        SequenceTagging(SequenceConfig(**TINY), data=EXPECTED["qm9_gap"].spec)


# ----------------------------------------------------------------------------- checkpoints written before the spec


#: Keys main's task config held before the DataSpec: the encoder fields and task arguments the data
#: decides were link targets, absent from the saved config.
DECIDED_KEYS = ("node_vocab", "edge_vocab", "num_outputs", "continuous_node_dim", "continuous_edge_dim", "readout")


def test_a_checkpoint_in_the_layout_main_wrote_loads_evaluates_and_predicts_identically(
    qm9_root: Path, tmp_path: Path
) -> None:
    metrics = train.main(tiny_run_args(qm9_root, tmp_path / "runs", "--run_name", "tiny"))
    checkpoint = torch.load(metrics["best_checkpoint"], weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    assert sorted(hparams) == [
        "_class_path",
        "_instantiator",
        "encoder",
        "loss",
        "normalize_targets",
        "optim",
        "target_kind",
        "target_names",
    ]  # main's layout, unchanged
    assert (hparams["encoder"]["node_vocab"], hparams["target_kind"], hparams["target_names"]) == (
        [119, 5, 12, 12, 10, 6, 6, 2, 2],
        "regression",
        ["gap_ev"],
    )
    config = yaml.safe_load(checkpoint[CONFIG_KEY])
    for key in DECIDED_KEYS:
        del config["model"]["init_args"]["encoder"][key]
    for key in ("target_kind", "target_names"):
        del config["model"]["init_args"][key]
    checkpoint[CONFIG_KEY] = yaml.safe_dump(config, sort_keys=False)
    torch.save(checkpoint, tmp_path / "main.ckpt")

    result = evaluate.main(["--ckpt", str(tmp_path / "main.ckpt"), "--split", "valid", "--data.root", str(qm9_root)])
    assert result.metrics["val/mae"] == metrics["validation"]["val/mae"]  # exactly, on CPU
    old = GraphRegression.from_checkpoint(tmp_path / "main.ckpt").eval()
    new = GraphRegression.from_checkpoint(metrics["best_checkpoint"]).eval()
    assert old.hparams == new.hparams
    data = GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(qm9_root), batch_size=8, num_workers=0)
    data.setup()
    with torch.no_grad():
        for batch in data.val_dataloader():
            assert torch.equal(old(batch), new(batch))
