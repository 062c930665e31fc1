"""Molecule-level features (``data.source.descriptors``, ``data.source.feature_columns``): computed with the
graphs, cached, collated as ``GraphBatch.molecule_features``, standardised with the training split's statistics and
added to the graph token through a zero-initialised projection."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from rdkit import Chem

from graphormer_urpe.data.batch import GraphRecord, collate_graphs
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import SmilesTable, SmilesToPredict, molecule_features
from graphormer_urpe.data.sources.descriptors import descriptor_features, descriptor_reference, normalised_descriptors
from graphormer_urpe.data.sources.molecule_features import MoleculeFeatures, feature_statistics
from graphormer_urpe.data.sources.tables import TableError
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import ConfigError
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.tasks import GraphRegression
from graphormer_urpe.testing.graphs import make_record
from graphormer_urpe.testing.runs import start_from

#: Small molecules of different sizes and chemistry; 'logp' misses a value in row 3, 'mw' in row 0.
ROWS = [
    ("CCO", 0.1, 46.1, ""),
    ("c1ccccc1O", 0.5, 94.1, "1.5"),
    ("CC(=O)Nc1ccc(O)cc1", 0.9, 151.2, "0.5"),
    ("CCN(CC)CC", 1.2, "", "1.4"),
    ("OC(=O)c1ccccc1", 0.3, 122.1, "1.9"),
    ("CCCCCCCC", 2.0, 114.2, "5.2"),
    ("c1ccncc1", 0.7, 79.1, "0.7"),
    ("CC(C)O", 0.2, 60.1, "0.05"),
    ("ClCCl", 0.4, 84.9, "1.25"),
    ("NCC(=O)O", 0.6, 75.1, "-3.2"),
]
SPLIT = ["train"] * 6 + ["valid", "valid", "test", "test"]


def write_table(tmp_path: Path, name: str = "mols.csv", **replace: list) -> Path:
    frame = pd.DataFrame(ROWS, columns=["smiles", "y", "mw", "logp"]).assign(split=SPLIT)
    for column, values in replace.items():
        frame[column] = values
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def datamodule(tmp_path: Path, path: Path, **features: object) -> GraphDataModule:
    source = SmilesTable(str(path), targets=["y"], split="column", **features)
    data = GraphDataModule(source, root=str(tmp_path / "data"), batch_size=4, num_workers=0, preprocess_workers=0)
    data.prepare_data()
    data.setup()
    return data


def all_features(data: GraphDataModule, split: str) -> np.ndarray:
    dataset = data.datasets[split]
    return np.stack([dataset[k].molecule_features for k in range(len(dataset))])


# ----------------------------------------------------------------------------- data: computed, cached, collated
def test_descriptor_features_are_the_normalised_descriptors_in_the_cache(tmp_path: Path) -> None:
    data = datamodule(tmp_path, write_table(tmp_path), descriptors="rdkit2d", feature_columns=["mw", "logp"])
    names = descriptor_reference().names
    assert data.spec.molecule_features == (*[f"rdkit2d/{name}" for name in names], "mw", "logp")
    train = all_features(data, "train")  # rows 0..5 in order
    assert train.shape == (6, len(names) + 2) and train.dtype == np.float32
    for row, (smiles, _, mw, logp) in enumerate(ROWS[:6]):
        expected = normalised_descriptors(Chem.MolFromSmiles(smiles), tails="extend")
        np.testing.assert_array_equal(train[row, : len(names)], expected)  # bit for bit: the same function
        np.testing.assert_array_equal(train[row, len(names) :], np.array([mw or "nan", logp or "nan"], np.float32))
    assert np.isnan(train[0, -1]) and np.isnan(train[3, -2])  # missing cells are NaN in the cache
    # ethanol weighs less than every MOSES molecule: below -1 on the tail, lighter molecules further below
    weight = names.index("MolWt")
    assert train[0, weight] < train[1, weight] < -1.0 and train[5, weight] < -1.0

    batch = collate_graphs([data.datasets["train"][k] for k in range(4)])
    assert batch.molecule_features.dtype == torch.float32 and batch.molecule_features.shape == (4, len(names) + 2)
    torch.testing.assert_close(batch.molecule_features, torch.from_numpy(train[:4]), equal_nan=True, rtol=0, atol=0)


def test_a_molecule_above_max_nodes_is_skipped_before_its_descriptors_are_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38: ``evaluate.py --predict`` of a table holding a 1,000-atom chain was silent for 130 s (RDKit's
    descriptors of the chain), then skipped it as "1000 nodes > max_nodes=512". The size is checked first: no
    descriptor is computed for a molecule the cache skips, and the reason is the cache's."""
    described: list[int] = []

    def recorded(mol: Chem.Mol) -> np.ndarray:
        described.append(mol.GetNumAtoms())
        return descriptor_features(mol)

    monkeypatch.setattr(molecule_features, "descriptor_features", recorded)
    path = tmp_path / "new.csv"
    pd.DataFrame({"smiles": ["CCO", "C" * 40, "c1ccccc1O"]}).to_csv(path, index=False)
    data = GraphDataModule(
        SmilesToPredict(str(path), descriptors="rdkit2d"),
        root=str(tmp_path / "data"),
        num_workers=0,
        preprocess_workers=0,
        max_nodes=30,
    )
    data.prepare_data()
    assert data.build_summary.skipped == [[1, "40 nodes > max_nodes=30"]]
    assert described == [3, 7]


def test_a_graph_without_molecule_features_collates_to_zero_width() -> None:
    rng = np.random.default_rng(0)
    batch = collate_graphs([make_record(rng, 3), make_record(rng, 5)])
    assert batch.molecule_features.shape == (2, 0) and batch.molecule_features.dtype == torch.float32


def test_the_cache_key_and_the_spec_record_the_options(tmp_path: Path) -> None:
    path = write_table(tmp_path)
    plain = SmilesTable(str(path), targets=["y"], split="column")
    keys = {"descriptors", "descriptor_reference_sha1", "feature_columns"}
    assert not keys & set(plain.cache_key({})[1]) and plain.spec.molecule_features == ()  # off: old keys stay
    names = set()
    for features in (
        {"descriptors": "rdkit2d"},
        {"feature_columns": ["mw"]},
        {"feature_columns": ["logp"]},
        {"descriptors": "rdkit2d", "feature_columns": ["mw"]},
    ):
        source = SmilesTable(str(path), targets=["y"], split="column", **features)
        name, key = source.cache_key({})
        names.add(name)
        assert key.get("feature_columns", []) == features.get("feature_columns", [])
        assert key.get("descriptor_reference_sha1") == (
            descriptor_reference().sha1 if "descriptors" in features else None
        )
        assert len(source.spec.molecule_features) == 217 * ("descriptors" in features) + len(
            features.get("feature_columns", [])
        )
    assert len(names | {plain.cache_key({})[0]}) == 5  # every option its own cache


@pytest.mark.parametrize("cell, shown", [("abc", "'abc'"), ("1e39", "'1e39'"), ("inf", "'inf'")])
def test_bad_feature_cells_are_refused_naming_row_and_line(tmp_path: Path, cell: str, shown: str) -> None:
    logp = [row[3] for row in ROWS]
    logp[4] = cell
    source = SmilesTable(str(write_table(tmp_path, logp=logp)), targets=["y"], split="column", feature_columns=["logp"])
    with pytest.raises(TableError, match=rf"column 'logp' holds 1 value\(s\) .* at row 4 \(line 6\): {shown}"):
        source.open(Path("."))


@pytest.mark.parametrize(
    "features, message",
    [
        ({"descriptors": "mordred"}, "data.source.descriptors"),
        ({"feature_columns": ["mw", "mw"]}, "distinct"),
        ({"feature_columns": ["y"]}, "both a feature column"),
        ({"feature_columns": ["nope"]}, "no column 'nope' \\(data.source.feature_columns\\)"),
    ],
)
def test_impossible_feature_options_are_refused_before_any_work(tmp_path: Path, features: dict, message: str) -> None:
    with pytest.raises((ConfigError, TableError), match=message):
        SmilesTable(str(write_table(tmp_path)), targets=["y"], split="column", **features).spec  # noqa: B018


# ----------------------------------------------------------------------------- statistics
def test_feature_columns_are_standardised_with_the_training_rows(tmp_path: Path) -> None:
    data = datamodule(tmp_path, write_table(tmp_path), descriptors="rdkit2d", feature_columns=["mw", "logp"])
    mean, std = data.molecule_feature_statistics()
    train_mw = np.array([46.1, 94.1, 151.2, 122.1, 114.2], np.float32).astype(np.float64)  # row 3 missing
    train_logp = np.array([1.5, 0.5, 1.4, 1.9, 5.2], np.float32).astype(np.float64)  # row 0 missing
    np.testing.assert_allclose(mean[-2:], [train_mw.mean(), train_logp.mean()], rtol=1e-12)
    np.testing.assert_allclose(std[-2:], [train_mw.std(), train_logp.std()], rtol=1e-12)
    assert (mean[:-2] == 0).all() and (std[:-2] == 1).all()  # descriptors are already on one scale

    encoder = GraphormerConfig(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2)
    task = GraphRegression(encoder, data=data.spec)
    task.trainer = type("Trainer", (), {"datamodule": data})()
    task.on_fit_start()
    molecule = task.model.molecule
    features = torch.from_numpy(all_features(data, "valid"))  # rows 6, 7
    z = molecule.standardised(features)
    expected = (np.array([[79.1, 0.7], [60.1, 0.05]], np.float32) - mean[-2:].astype(np.float32)) / std[-2:].astype(
        np.float32
    )
    torch.testing.assert_close(z[:, -2:], torch.from_numpy(expected.astype(np.float32)))
    assert torch.equal(z[:, :-2], features[:, :-2])  # descriptors unchanged (mean 0, std 1)


def test_missing_values_are_zero_after_standardisation() -> None:
    model = Graphormer(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2, molecule_features=["a", "b", "c"])
    model.molecule.set_statistics(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 0.5]))
    z = model.molecule.standardised(torch.tensor([[float("nan"), 4.0, 2.0], [5.0, float("nan"), float("nan")]]))
    assert z.tolist() == [[0.0, 0.5, -2.0], [2.0, 0.0, 0.0]]


def test_a_feature_column_without_a_training_value_is_refused() -> None:
    with pytest.raises(ValueError, match="feature column 'b' has no value in the training split"):
        feature_statistics(["rdkit2d/x", "b"], np.array([[np.nan, np.nan], [0.5, np.nan]]))


# ----------------------------------------------------------------------------- the model
def records_with_features(rng: np.random.Generator, values: np.ndarray) -> list[GraphRecord]:
    return [
        make_record(rng, n, index=k)._replace(molecule_features=row)
        for k, (n, row) in enumerate(zip([4, 6, 3], values))
    ]


MODEL = dict(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, dropout=0.0, attention_dropout=0.0)


@pytest.mark.parametrize(
    "readout, into", [("graph_token", "graph_token"), ("nodes", "graph_token"), ("graph_token", "readout")]
)
def test_a_zero_projection_computes_bit_for_bit_what_the_model_without_features_does(readout: str, into: str) -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=(3, 5)).astype(np.float32)
    values[1, 2] = np.nan
    records = records_with_features(rng, values)
    torch.manual_seed(0)
    plain = Graphormer(readout=readout, **MODEL).eval()
    torch.manual_seed(1)
    featured = Graphormer(readout=readout, molecule_features=list("abcde"), molecule_features_into=into, **MODEL).eval()
    width = 5 if into == "graph_token" else 16
    assert torch.equal(featured.molecule.projection.weight, torch.zeros(16, width))
    featured.load_state_dict(plain.state_dict(), strict=False)  # the same weights, the projection left at zero
    featured.molecule.set_statistics(torch.full((5,), 0.3), torch.full((5,), 2.0))
    without = collate_graphs([r._replace(molecule_features=None) for r in records])
    with torch.no_grad():
        assert torch.equal(featured(collate_graphs(records)), plain(without))


def test_a_trained_projection_conditions_the_graph_token_and_keeps_permutation_invariance() -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(size=(3, 4)).astype(np.float32)
    records = records_with_features(rng, values)
    torch.manual_seed(0)
    model = Graphormer(molecule_features=list("abcd"), **MODEL).eval()
    torch.nn.init.normal_(model.molecule.projection.weight)
    batch = collate_graphs(records)
    with torch.no_grad():
        out = model(batch)
        other = model(collate_graphs([r._replace(molecule_features=-r.molecule_features) for r in records]))
        # permuting every graph's nodes (and thus its edges' ends) changes nothing
        permuted = []
        for r in records:
            order = rng.permutation(len(r.x))
            inverse = np.argsort(order)
            permuted.append(
                GraphRecord.from_graph(r.x[order], inverse[r.edge_index], r.edge_attr, r.y, r.index)._replace(
                    molecule_features=r.molecule_features
                )
            )
        shuffled = model(collate_graphs(permuted))
    assert not torch.allclose(out, other, atol=1e-4)  # the features reach the prediction
    torch.testing.assert_close(shuffled, out, rtol=1e-5, atol=1e-5)
    # the features enter in one place: before the layers, only the graph token differs from a model without them
    with torch.no_grad():
        model.molecule.projection.weight.zero_()
        model.molecule.projection.bias.fill_(1.0)
        tokens = []
        model.input_dropout.register_forward_hook(lambda module, args, output: tokens.append(output))
        model(batch)
        model.molecule.projection.bias.zero_()
        model(batch)
    assert torch.equal(tokens[0][:, 1:], tokens[1][:, 1:]) and torch.equal(tokens[0][:, 0], tokens[1][:, 0] + 1.0)


def test_features_at_the_readout_join_the_final_state_through_a_residual_block() -> None:
    rng = np.random.default_rng(2)
    values = rng.normal(size=(3, 4)).astype(np.float32)
    records = records_with_features(rng, values)
    torch.manual_seed(0)
    model = Graphormer(molecule_features=list("abcd"), molecule_features_into="readout", **MODEL).eval()
    block = model.molecule
    torch.nn.init.normal_(block.projection.weight)
    block.set_statistics(torch.full((4,), 0.5), torch.full((4,), 2.0))
    batch = collate_graphs(records)
    states = []
    model.final_norm.register_forward_hook(lambda module, args, output: states.append(output))
    with torch.no_grad():
        out = model(batch)
        # by hand: h' = h + W_out GELU(W_in [h ; (f - 0.5) / 2] + b_in) + b_out, the head reads h'
        h = states[0][:, 0]  # (B, H*D): the graph token's final state
        joined = torch.cat([h, (torch.from_numpy(values) - 0.5) / 2.0], dim=1)
        expected = model.head(h + block.projection(torch.nn.functional.gelu(block.inner(joined))))
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
        # the encoder never sees the features: the tokens entering the layers are those of a model without them
        tokens = []
        model.input_dropout.register_forward_hook(lambda module, args, output: tokens.append(output))
        again = model(batch)
        negated = model(collate_graphs([r._replace(molecule_features=-r.molecule_features) for r in records]))
    assert torch.equal(tokens[0], tokens[1]) and torch.equal(states[1], states[2])
    assert torch.equal(again, out) and not torch.allclose(negated, out, atol=1e-4)  # only the head's input moved
    with pytest.raises(ConfigError, match="molecule_features_into.*this data reads nodes; use graph_token"):
        Graphormer(readout="nodes", molecule_features=["a"], molecule_features_into="readout", **MODEL)


def test_an_unknown_place_for_the_features_is_refused() -> None:
    with pytest.raises(ConfigError, match="model.encoder.molecule_features_into"):
        GraphormerConfig(molecule_features=["a"], molecule_features_into="head", **MODEL)  # type: ignore[arg-type]


def test_features_at_the_readout_train_at_the_heads_rate() -> None:
    from graphormer_urpe.tasks.optimiser import OptimConfig, parameter_groups

    encoder = GraphormerConfig(molecule_features=["a", "b"], **MODEL)
    optim = OptimConfig(lr=1e-3, head_lr=5e-3, layer_lr_decay=0.5)
    for into, group in (("graph_token", "embeddings"), ("readout", "head")):
        task = GraphRegression(dataclasses.replace(encoder, molecule_features_into=into))
        groups = {id(p): g["name"] for g in parameter_groups(task, optim) for p in g["params"]}
        assert {groups[id(p)] for p in task.model.molecule.parameters()} == {group}


def test_molecule_features_without_the_graph_token_are_refused() -> None:
    with pytest.raises(ConfigError, match="model.encoder.graph_token.*enter through the graph token"):
        GraphormerConfig(graph_token=False, readout="nodes", molecule_features=["a"])


def test_pyg_batches_carry_graph_level_molecule_features() -> None:
    from torch_geometric.data import Batch, Data

    from graphormer_urpe import GraphormerStructure
    from graphormer_urpe.data.pyg_interop import to_graph_batch

    structure = GraphormerStructure()
    graphs = [
        structure(
            Data(
                x=torch.tensor([[1], [2]]),
                edge_index=torch.tensor([[0, 1], [1, 0]]),
                molecule_features=torch.tensor([[0.5, float(k)]]),
            )
        )
        for k in range(3)
    ]
    batch = to_graph_batch(Batch.from_data_list(graphs))
    assert batch.molecule_features.tolist() == [[0.5, 0.0], [0.5, 1.0], [0.5, 2.0]]
    spec = DataSpec((28,), (4,), 1, 1, molecule_features=("a", "b", "c"))
    with pytest.raises(ValueError, match=r"shape \(3, 2\) in a batch of 3 graphs; give each graph a \(1, 3\)"):
        to_graph_batch(Batch.from_data_list(graphs), spec)


# ----------------------------------------------------------------------------- --init_from and --predict
ENCODER = GraphormerConfig(node_vocab=[28], edge_vocab=[4], **MODEL)
PLAIN = DataSpec(node_vocab=(28,), edge_vocab=(4,), num_targets=1, num_outputs=1)
WITH = dataclasses.replace(PLAIN, molecule_features=("rdkit2d/qed", "mw"))


def saved_task(path: Path, data: DataSpec) -> GraphRegression:
    task = GraphRegression(ENCODER, data=data)
    with torch.no_grad():
        for tensor in task.state_dict().values():
            if tensor.is_floating_point():
                tensor.normal_()
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams)}, path)
    return task


@pytest.mark.parametrize(
    "source_data, kept",
    [(PLAIN, False), (WITH, True), (dataclasses.replace(PLAIN, molecule_features=("x", "y")), False)],
)
def test_init_from_loads_the_encoder_and_reuses_the_projection_only_for_the_same_features(
    tmp_path: Path, source_data: DataSpec, kept: bool, caplog
) -> None:
    source = saved_task(tmp_path / "source.ckpt", source_data)
    task = GraphRegression(ENCODER, data=WITH)
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        record = start_from(task, tmp_path / "source.ckpt", WITH)
    state, trained = task.state_dict(), source.state_dict()
    molecule = [key for key in state if key.startswith("model.molecule.")]
    assert molecule == [
        "model.molecule.mean",
        "model.molecule.std",
        "model.molecule.projection.weight",
        "model.molecule.projection.bias",
    ]
    encoder = [key for key in state if key not in molecule]
    assert all(torch.equal(state[key], trained[key]) for key in encoder)  # the encoder (and head) as before
    if kept:
        assert record["molecule_features"] == "kept" and task.molecule_features_from_checkpoint
        assert all(torch.equal(state[key], trained[key]) for key in molecule)
    else:
        assert record["molecule_features"].startswith("new zero projection") and "new zero projection" in caplog.text
        assert not task.molecule_features_from_checkpoint
        assert not state["model.molecule.projection.weight"].any() and not state["model.molecule.projection.bias"].any()


def test_init_from_starts_the_features_anew_when_they_enter_elsewhere(tmp_path: Path) -> None:
    source = saved_task(tmp_path / "source.ckpt", WITH)  # its features entered at the graph token
    task = GraphRegression(dataclasses.replace(ENCODER, molecule_features_into="readout"), data=WITH)
    record = start_from(task, tmp_path / "source.ckpt", WITH)
    assert record["molecule_features"] == (
        "new zero projection: the checkpoint's features entered at its graph_token, this model's at its readout"
    )
    state, trained = task.state_dict(), source.state_dict()
    assert not state["model.molecule.projection.weight"].any()
    assert all(torch.equal(state[key], trained[key]) for key in state if not key.startswith("model.molecule."))


def test_predict_recomputes_the_features_and_names_missing_columns(tmp_path: Path) -> None:
    path = write_table(tmp_path)
    to_predict = SmilesToPredict(str(path), "smiles", "rdkit2d", ["logp"])
    assert to_predict.spec.molecule_features == MoleculeFeatures("rdkit2d", ("logp",)).names
    data = GraphDataModule(to_predict, root=str(tmp_path / "data"), batch_size=4, num_workers=0, preprocess_workers=0)
    data.prepare_data()
    data.setup()
    features = all_features(data, "predict")
    for row, (smiles, *_, logp) in enumerate(ROWS):
        np.testing.assert_array_equal(
            features[row, :-1], normalised_descriptors(Chem.MolFromSmiles(smiles), tails="extend")
        )
        np.testing.assert_array_equal(features[row, -1], np.float32(logp or "nan"))
    with pytest.raises(
        TableError,
        match=r"no column 'clogp' \(a feature column the model was trained with: "
        r"data.source.feature_columns \['logp', 'clogp'\]\)",
    ):
        SmilesToPredict(str(path), "smiles", None, ["logp", "clogp"]).table  # noqa: B018


# ----------------------------------------------------------------------------- fingerprints (data.source.fingerprints)
def hand_counted_ecfp(smiles: str) -> np.ndarray:
    """The count fingerprint counted here from RDKit's own bit info: each (atom, radius) environment adds one to its
    position. (2048,) int"""
    from rdkit.Chem import rdFingerprintGenerator

    info = rdFingerprintGenerator.AdditionalOutput()
    info.AllocateBitInfoMap()
    rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048).GetCountFingerprint(
        Chem.MolFromSmiles(smiles), additionalOutput=info
    )
    counts = np.zeros(2048, dtype=np.int64)
    for position, environments in info.GetBitInfoMap().items():
        counts[position] = len(environments)
    return counts


def test_fingerprint_features_are_log1p_of_the_morgan_counts_after_the_descriptors(tmp_path: Path) -> None:
    data = datamodule(
        tmp_path, write_table(tmp_path), descriptors="rdkit2d", fingerprints="ecfp", feature_columns=["mw"]
    )
    names = data.spec.molecule_features
    assert names[217] == "ecfp/0" and names[217 + 2047] == "ecfp/2047" and names[-1] == "mw" and len(names) == 2266
    train = all_features(data, "train")
    for row, (smiles, *_) in enumerate(ROWS[:6]):
        counts = hand_counted_ecfp(smiles)
        # octane: its 8 carbons are 2 CH3 and 6 CH2 environments at radius 0, so some position counts 6
        np.testing.assert_array_equal(train[row, 217 : 217 + 2048], np.log1p(counts.astype(np.float32)))
    assert hand_counted_ecfp("CCCCCCCC").max() == 6 and train[5, 217 : 217 + 2048].max() == np.log1p(np.float32(6))
    mean, std = feature_statistics(names, train)
    assert (mean[:2265] == 0).all() and (std[:2265] == 1).all()  # descriptors and counts: on their scale already
    assert mean[-1] == pytest.approx(np.nanmean(train[:, -1]))  # the column: standardised


def test_fingerprints_have_their_own_cache_and_are_recomputed_for_prediction(tmp_path: Path) -> None:
    path = write_table(tmp_path)
    plain = SmilesTable(str(path), targets=["y"], split="column", descriptors="rdkit2d")
    with_ecfp = SmilesTable(str(path), targets=["y"], split="column", descriptors="rdkit2d", fingerprints="ecfp")
    assert plain.cache_key({})[0] != with_ecfp.cache_key({})[0]
    assert "fingerprints" not in plain.cache_key({})[1]  # off: the descriptors' caches keep their keys
    assert with_ecfp.cache_key({})[1]["ecfp_bits"] == 2048
    to_predict = SmilesToPredict(str(path), "smiles", "rdkit2d", (), "ecfp")
    assert to_predict.spec.molecule_features == with_ecfp.spec.molecule_features
    with pytest.raises(ConfigError, match="data.source.fingerprints='maccs': must be ecfp"):
        SmilesTable(str(path), targets=["y"], split="column", fingerprints="maccs")
    with pytest.raises(ConfigError, match="none starting with rdkit2d/ or ecfp/"):
        SmilesTable(str(path), targets=["y"], split="column", feature_columns=["ecfp/3"])
