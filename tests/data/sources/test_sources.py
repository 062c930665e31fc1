"""Dataset sources on fixtures written in the real on-disk layouts, and the embedded QM9 data."""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np
import pytest

from graphormer_urpe.constants import HARTREE_TO_EV
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import QM9, ZINC
from graphormer_urpe.data.sources import base as sources_base
from graphormer_urpe.data.sources import zinc as zinc_module
from graphormer_urpe.data.sources.base import seeded_split
from graphormer_urpe.data.sources.molecules import QM9_TARGETS, qm9pack_csvs
from graphormer_urpe.errors import ConfigError, DatasetMissing
from graphormer_urpe.testing.runs import TINY_MOLECULES
from graphormer_urpe.testing.zinc_raw import write_zinc_raw


@pytest.fixture
def zinc_root(tmp_path: Path) -> tuple[Path, dict]:
    mols = write_zinc_raw(
        tmp_path / "ZINC" / "raw", {"train": 30, "val": 8, "test": 6}, {"train": 10, "val": 4, "test": 3}
    )
    return tmp_path, mols


@pytest.mark.parametrize("subset", [True, False])
def test_zinc_from_raw_layout(zinc_root, subset: bool, caplog: pytest.LogCaptureFixture) -> None:
    root, mols = zinc_root
    data = GraphDataModule(ZINC(subset=subset), root=str(root), batch_size=4, num_workers=0, preprocess_workers=0)
    data.prepare_data()
    with caplog.at_level(logging.WARNING):
        data.setup()
    expected = {"train": 10, "valid": 4, "test": 3} if subset else {"train": 30, "valid": 8, "test": 6}
    assert data.split_sizes == expected
    assert "differ from the published" in caplog.text  # a 30-graph ZINC is not the published one
    first = mols["train"][0][mols["train"][1][0] if subset else 0]
    record = data.datasets["train"][0]
    np.testing.assert_array_equal(record.x[:, 0], first["atom_type"].numpy())
    adjacency = first["bond_type"].numpy()
    np.testing.assert_array_equal(record.edge_attr[:, 0], adjacency[tuple(record.edge_index)])
    np.testing.assert_array_equal(record.y, first["logP_SA_cycle_normalized"].numpy())  # float32 kept as is
    batch = next(iter(data.train_dataloader()))
    assert batch.num_graphs == 4 and batch.x.shape[-1] == 1


def test_zinc_split_sizes_match_the_papers() -> None:
    assert ZINC(subset=True).published_split_sizes == {"train": 10_000, "valid": 1_000, "test": 1_000}
    assert ZINC(subset=False).published_split_sizes == {"train": 220_011, "valid": 24_445, "test": 5_000}


def test_missing_zinc_stops_at_once_with_instructions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zinc_module, "network_reachable", lambda url: False)
    data = GraphDataModule(ZINC(), root=str(tmp_path), num_workers=0)
    with pytest.raises(DatasetMissing) as error:
        data.prepare_data()
    message = str(error.value)
    assert str(tmp_path / "ZINC" / "raw") in message and "train.pickle" in message and "dropbox" in message


def test_unreachable_network_is_detected_quickly() -> None:
    started = time.perf_counter()
    assert not sources_base.network_reachable("https://192.0.2.1:9/", timeout=0.5)  # TEST-NET-1, never routed
    assert time.perf_counter() - started < 5


def test_qm9_slice(tmp_path: Path) -> None:
    data = GraphDataModule(
        QM9(max_molecules=300), root=str(tmp_path), batch_size=8, num_workers=0, preprocess_workers=2, chunk_size=100
    )
    data.prepare_data()
    data.setup()
    assert data.split_sizes == {"train": 240, "valid": 30, "test": 30}
    store = data.datasets["train"].store
    assert store.source_row[0] == 0 and store.record(0).x.tolist() == [[5, 0, 4, 5, 4, 0, 2, 0, 0]]  # methane
    # stored in float32
    assert store.record(0).y[0] == pytest.approx(0.5048 * HARTREE_TO_EV, rel=float(np.finfo(np.float32).eps))
    assert (data.cache_dir / "splits.npz").is_file()
    mean, std = data.target_statistics()
    assert 5 < mean[0] < 9 and 0.5 < std[0] < 3  # gaps in eV


def test_qm9_targets_are_the_standard_properties_in_their_units(tmp_path: Path) -> None:
    """Methane's 12 properties as qm9pack stores them (the first row of qm9_part1.csv), each converted
    in float64 and stored as float32; the gap column and the split are those of the gap-only data."""
    every = GraphDataModule(
        QM9(targets=list(QM9_TARGETS), max_molecules=40), root=str(tmp_path), num_workers=0, preprocess_workers=0
    )
    gap = GraphDataModule(QM9(max_molecules=40), root=str(tmp_path), num_workers=0, preprocess_workers=0)
    for data in (every, gap):
        data.prepare_data()
        data.setup()
    assert every.spec.target_names == tuple(QM9_TARGETS) and gap.spec.target_names == ("gap_ev",)
    assert every.cache_dir != gap.cache_dir and every.cache_dir.parent == tmp_path / "qm9" / "graphormer"
    stored = {
        "mu_debye": 0.0,
        "alpha_bohr3": 13.21,
        "homo_ev": -0.3877,
        "lumo_ev": 0.1171,
        "gap_ev": 0.5048,
        "r2_bohr2": 35.3641,
        "zpve_ev": 0.044749,
        "u0_ev": -40.47893,
        "u298_ev": -40.476062,
        "h298_ev": -40.475117,
        "g298_ev": -40.498597,
        "cv_cal_mol_k": 6.469,
    }
    factor = {name: HARTREE_TO_EV if name.endswith("_ev") else 1.0 for name in stored}
    methane = every.datasets["train"].store.record(0)
    assert every.datasets["train"].store.source_row[0] == 0
    assert methane.y.tolist() == np.float32([stored[n] * factor[n] for n in QM9_TARGETS]).tolist()
    for split in ("train", "valid", "test"):
        many, one = every.datasets[split].store, gap.datasets[split].store
        assert np.array_equal(many.source_row, one.source_row)
        assert all(np.array_equal(many.record(k).y[4:5], one.record(k).y) for k in range(len(many.source_row)))


def test_the_gap_data_are_those_qm9gap_wrote(qm9_root: Path) -> None:
    """``QM9`` with its default ``[gap_ev]`` (``configs/qm9_gap.yaml``) caches the bytes that the ``QM9Gap``
    source it replaced cached (main at 60ef84f, the first 50 molecules): every array of every chunk, and the
    splits. Only the directory's name changed: the cache key names the source class and its targets."""
    data = GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(qm9_root))
    digest = hashlib.sha256()
    for path in sorted(data.cache_dir.rglob("*.npy")):
        digest.update(path.relative_to(data.cache_dir).as_posix().encode())
        digest.update(np.load(path).tobytes())
    splits = np.load(data.cache_dir / "splits.npz")
    for name in sorted(splits.files):
        digest.update(name.encode())
        digest.update(splits[name].tobytes())
    assert digest.hexdigest() == "c3419aedf850253339a6cda60cda257b9dd56b6109e60d4c903a70b867a0b3cb"
    assert data.cache_dir.parent == qm9_root / "qm9" / "graphormer"


@pytest.mark.parametrize("targets", [[], ["gap_ev", "gap_ev"], ["gap"], "gap_ev"])
def test_qm9_refuses_targets_it_does_not_have(targets: object) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^data.source.targets=.*: must be a list of distinct QM9 properties from "
        r"mu_debye, alpha_bohr3, homo_ev, .*, cv_cal_mol_k$",
    ):
        QM9(targets=targets)


def test_qm9_is_read_without_importing_qm9pack() -> None:
    files = qm9pack_csvs()
    assert [f.name for f in files] == ["qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv"]


def test_seeded_split_is_fixed_and_disjoint() -> None:
    a, b = seeded_split(1000, seed=3), seeded_split(1000, seed=3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert sorted(np.concatenate(list(a.values())).tolist()) == list(range(1000))
    assert [len(v) for v in a.values()] == [800, 100, 100]
