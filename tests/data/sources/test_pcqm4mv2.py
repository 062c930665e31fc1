"""PCQM4Mv2 from ogb's on-disk layout: loading, bad rows, resume, corruption, cache key, config."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.data.cache import GraphStore
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import PCQM4Mv2
from graphormer_urpe.data.sources import molecules as molecules_module
from graphormer_urpe.data.sources import pcqm4mv2 as pcqm_module
from graphormer_urpe.data.sources.featurize import FEATURIZER_VERSION, molecule_graph
from graphormer_urpe.data.sources.molecules import qm9pack_csvs
from graphormer_urpe.errors import DatasetMissing
from graphormer_urpe.run.cli import GraphormerCLI
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.ogb_layouts import write_pcqm4mv2

SIZES = {"train": 180, "valid": 60, "test-dev": 40, "test-challenge": 40}
#: Rows whose SMILES cannot be used: unparsable, an empty cell, a ring never closed; in every split.
BAD_ROWS = {5: "C1CC", 190: "", 250: "not a smiles", 299: "C(", 310: "c1cc"}


def pcqm_fixture(root: Path) -> tuple[list[str], np.ndarray, dict[str, np.ndarray]]:
    """A 320-molecule PCQM4Mv2 in ogb's layout: QM9 SMILES, invalid ones at BAD_ROWS, NaN targets
    in the test splits, numpy int64 arrays in a numpy-1.x-pickled split_dict.pt."""
    n = sum(SIZES.values())
    smiles = pd.read_csv(qm9pack_csvs()[0], usecols=["SMILES"], nrows=n)["SMILES"].tolist()
    for row, text in BAD_ROWS.items():
        smiles[row] = text
    gaps = np.random.default_rng(0).uniform(2.0, 12.0, n)
    starts = np.cumsum([0, *SIZES.values()])
    splits = {name: np.arange(starts[i], starts[i + 1]) for i, name in enumerate(SIZES)}
    gaps[starts[2] :] = np.nan
    write_pcqm4mv2(root, smiles, gaps, splits)
    return smiles, gaps, splits


def datamodule(root: Path, **kwargs) -> GraphDataModule:
    options = {"batch_size": 16, "num_workers": 0, "preprocess_workers": 2, "chunk_size": 50, **kwargs}
    return GraphDataModule(PCQM4Mv2(), root=str(root), **options)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GraphDataModule, tuple]:
    root = tmp_path_factory.mktemp("pcqm")
    written = pcqm_fixture(root)
    data = datamodule(root)
    data.prepare_data()
    data.setup()
    return root, data, written


def test_rows_splits_and_targets_come_from_the_layout(prepared) -> None:
    root, data, (smiles, gaps, splits) = prepared
    assert data.split_sizes == {"train": 179, "valid": 59, "test-dev": 39, "test-challenge": 38}
    store = data.datasets["train"].store
    for split, rows in splits.items():
        kept = [r for r in rows if r not in BAD_ROWS]
        np.testing.assert_array_equal(store.source_row[data.datasets[split].indices], kept)
    record = data.datasets["valid"][3]
    row = int(store.source_row[record.index])
    expected = molecule_graph(smiles[row], np.zeros(1, np.float32))
    np.testing.assert_array_equal(record.x, expected.x)
    np.testing.assert_array_equal(record.edge_index, expected.edge_index)
    assert record.y[0] == pytest.approx(gaps[row], rel=float(np.finfo(np.float32).eps))  # eV, stored in float32
    assert np.isnan(store.targets()[data.datasets["test-dev"].indices]).all()
    assert np.isfinite(store.targets()[data.datasets["train"].indices]).all()


def test_bad_rows_are_skipped_counted_and_named(prepared) -> None:
    _, data, _ = prepared
    manifest = data.datasets["train"].store.manifest
    assert manifest["skipped"] == len(BAD_ROWS)
    assert manifest["skipped_by_split"] == {"train": 1, "valid": 1, "test-dev": 1, "test-challenge": 2}
    skipped = data.datasets["train"].store.skipped_rows()
    assert skipped == {
        5: "RDKit cannot parse",
        190: "empty SMILES",
        250: "RDKit cannot parse",
        299: "RDKit cannot parse",
        310: "RDKit cannot parse",
    }
    assert (
        data.build_summary is not None
        and "(train 1, valid 1, test-dev 1, test-challenge 2; first: row 5: RDKit cannot parse; row 190: empty SMILES"
        in data.build_summary.describe()
    )


def test_cache_key_holds_the_featurizer_and_rdkit_versions(prepared, monkeypatch: pytest.MonkeyPatch) -> None:
    root, data, _ = prepared
    assert data.cache_key["featurizer"] == FEATURIZER_VERSION and "rdkit-20" in FEATURIZER_VERSION
    monkeypatch.setattr(molecules_module, "FEATURIZER_VERSION", "ogb-smiles2graph/rdkit-2099.01.1")
    assert datamodule(root).cache_dir != data.cache_dir  # another RDKit release: another cache


def test_missing_files_stop_at_once_naming_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pcqm_module, "network_reachable", lambda url: False)
    started = time.perf_counter()
    with pytest.raises(DatasetMissing) as error:
        datamodule(tmp_path).prepare_data()
    assert time.perf_counter() - started < 5
    message = str(error.value)
    assert "raw/data.csv.gz" in message and "split_dict.pt" in message and pcqm_module.URL in message
    assert str(tmp_path / "pcqm4m-v2") in message


def test_download_unpacks_the_release_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the network up, the archive at ogb's URL is fetched (here: handed over) and unpacked."""
    release = tmp_path / "release"
    pcqm_fixture(release)
    archive = tmp_path / "pcqm4m-v2.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for file in (release / "pcqm4m-v2").rglob("*"):
            z.write(file, file.relative_to(release))

    def fake_download(url: str, folder: str) -> str:
        assert url == pcqm_module.URL
        Path(folder).mkdir(parents=True, exist_ok=True)
        target = Path(folder) / "pcqm4m-v2.zip"
        target.write_bytes(archive.read_bytes())
        return str(target)

    monkeypatch.setattr(pcqm_module, "network_reachable", lambda url: True)
    monkeypatch.setattr(pcqm_module, "download_url", fake_download)
    root = tmp_path / "data"
    PCQM4Mv2().ensure_raw(root)
    assert (root / "pcqm4m-v2" / "raw" / "data.csv.gz").is_file() and (root / "pcqm4m-v2" / "split_dict.pt").is_file()
    assert not (root / "pcqm4m-v2.zip").exists()


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        (
            {
                "train": np.arange(5),
                "valid": np.array([400]),
                "test-dev": np.arange(5, 8),
                "test-challenge": np.arange(8, 9),
            },
            "split 'valid' refers to row 400, but data.csv.gz has 10 rows",
        ),
        (
            {
                "train": np.array([0, 1, 1]),
                "valid": np.arange(3, 5),
                "test-dev": np.arange(5, 8),
                "test-challenge": np.arange(8, 9),
            },
            "split 'train' lists 1 rows twice",
        ),
    ],
)
def test_inconsistent_split_files_stop_before_any_work(tmp_path: Path, splits: dict, message: str) -> None:
    write_pcqm4mv2(tmp_path, ["C"] * 10, np.ones(10), splits)
    data = datamodule(tmp_path)
    with pytest.raises(ValueError, match=message):
        data.prepare_data()
    assert not data.cache_dir.exists()


def test_csv_rows_out_of_idx_order_are_refused(tmp_path: Path) -> None:
    folder = write_pcqm4mv2(
        tmp_path,
        ["C", "CC", "O"],
        np.ones(3),
        {"train": np.arange(3), "valid": np.arange(0), "test-dev": np.arange(0), "test-challenge": np.arange(0)},
    )
    frame = pd.read_csv(folder / "raw" / "data.csv.gz")
    frame.iloc[::-1].to_csv(folder / "raw" / "data.csv.gz", index=False)
    with pytest.raises(ValueError, match="row 0 has idx 2"):
        PCQM4Mv2().open(tmp_path)


@pytest.mark.slow
def test_interrupted_preprocessing_resumes_where_it_stopped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A process killed (SIGKILL) while writing its fourth chunk leaves three complete chunks and a
    half-written temporary; the next run keeps the three, and the result equals a clean build."""
    root = tmp_path / "data"
    pcqm_fixture(root)
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(REPO_DIR)!r})
from graphormer_urpe.data import cache
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import PCQM4Mv2
renamed = []
def replace_then_die(src, dst):
    if len(renamed) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    os.rename(src, dst)
    renamed.append(dst)
cache.os.replace = replace_then_die
GraphDataModule(PCQM4Mv2(), root={str(root)!r}, preprocess_workers=0, chunk_size=50).prepare_data()
"""
    killed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    data = datamodule(root, preprocess_workers=0)
    complete = sorted(p.name for p in data.cache_dir.glob("chunk_*"))
    assert complete == ["chunk_00000", "chunk_00001", "chunk_00002"]
    assert list(data.cache_dir.glob(".chunk_00003.tmp-*")) and not (data.cache_dir / "manifest.json").exists()
    kept = {name: (data.cache_dir / name / "spd.npy").stat().st_mtime_ns for name in complete}

    with caplog.at_level(logging.INFO):
        data.prepare_data()
    assert "150 of 320 rows already preprocessed" in caplog.text
    assert data.build_summary.processed_rows == 170 and data.build_summary.rebuilt_chunks == 0
    assert {name: (data.cache_dir / name / "spd.npy").stat().st_mtime_ns for name in complete} == kept
    assert not list(data.cache_dir.glob(".chunk_*.tmp-*"))
    assert_same_cache(data.cache_dir, _clean_build(tmp_path))


def test_a_corrupted_cache_is_detected_and_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "data"
    pcqm_fixture(root)
    data = datamodule(root)
    data.prepare_data()
    spd = data.cache_dir / "chunk_00002" / "spd.npy"
    corrupted = bytearray(spd.read_bytes())
    corrupted[-1] ^= 0x01  # same size, one bit flipped
    spd.write_bytes(bytes(corrupted))
    x = data.cache_dir / "chunk_00004" / "x.npy"
    x.write_bytes(x.read_bytes()[:-10])  # truncated
    again = datamodule(root)
    with caplog.at_level(logging.WARNING):
        again.prepare_data()
    assert "chunk_00002: spd.npy does not match its checksum" in caplog.text
    assert "chunk_00004: x.npy has" in caplog.text and "(truncated?)" in caplog.text
    assert again.build_summary.rebuilt_chunks == 2 and again.build_summary.processed_rows == 100
    assert_same_cache(again.cache_dir, data.cache_dir)  # (the one rebuilt in place)
    assert_same_cache(again.cache_dir, _clean_build(tmp_path))


def _clean_build(tmp_path: Path) -> Path:
    root = tmp_path / "clean"
    pcqm_fixture(root)
    data = datamodule(root, preprocess_workers=0)
    data.prepare_data()
    return data.cache_dir


def assert_same_cache(a: Path, b: Path) -> None:
    """Two caches hold the same graphs, arrays and skipped rows."""
    first, second = GraphStore(a), GraphStore(b)
    assert len(first) == len(second) and first.skipped_rows() == second.skipped_rows()
    for ca, cb in zip(first.chunks, second.chunks):
        assert ca.arrays.keys() == cb.arrays.keys()
        for name in ca.arrays:
            np.testing.assert_array_equal(ca.arrays[name], cb.arrays[name], err_msg=name)
    assert json.loads((a / "manifest.json").read_text())["graphs"] == len(second)


#: Official Graphormer (PCQM4M): embedding tables of 512 rows per atom column (9) and bond column
#: (3), 512-row degree and spatial tables, 128 hop matrices, one virtual-distance row.
OFFICIAL_ROWS = {"atom": 512 * 9 + 1, "degree": 512, "edge": 512 * 3 + 1, "hops": 128, "spatial": 512, "virtual": 1}


@pytest.mark.parametrize("attention", ["urpe", "rpe"])
def test_config_has_the_paper_settings_and_accounted_parameters(attention: str, tmp_path: Path) -> None:
    cli = GraphormerCLI(
        [
            "--config",
            "pcqm4mv2",
            "--model.encoder.attention",
            attention,
            "--run_root",
            str(tmp_path),
            "--logger",
            "none",
        ]
    )
    encoder, task = cli.model.model.config, cli.model
    assert (encoder.num_layers, encoder.hidden_dim, encoder.ffn_dim, encoder.num_heads) == (6, 512, 512, 32)
    assert (encoder.attention_dropout, encoder.dropout, encoder.input_dropout) == (0.1, 0.0, 0.0)
    hp = task.optim
    assert (hp.lr, hp.warmup_steps, hp.weight_decay, hp.adam_eps) == (3e-4, 60_000, 0.0, 1e-8)
    assert task.hparams.optim == dataclasses.asdict(hp)
    assert cli.trainer.max_steps == 1_000_000 and cli.datamodule.batch_size == 512
    assert isinstance(cli.datamodule.source, PCQM4Mv2)

    ours = sum(p.numel() for p in task.parameters())
    assert ours == (9_649_217 if attention == "urpe" else 9_640_961)  # B and C: distances 0..254 + unreachable
    # the same layers with the official code's table sizes give the paper's ~12.5M
    model, hidden, heads = task.model, 512, 32
    official = (
        ours
        - model.nodes.features.weight.numel()
        + OFFICIAL_ROWS["atom"] * hidden
        - model.nodes.in_degree.weight.numel()
        - model.nodes.out_degree.weight.numel()
        + 2 * OFFICIAL_ROWS["degree"] * hidden
        - model.edge_bias.features.weight.numel()
        + OFFICIAL_ROWS["edge"] * heads
        - model.edge_bias.hop_weight.numel()
        + OFFICIAL_ROWS["hops"] * heads * heads
        - model.relative_bias.table.weight.numel()
        + (OFFICIAL_ROWS["spatial"] + OFFICIAL_ROWS["virtual"]) * heads
        - (model.relative_scale.weight.numel() if model.relative_scale is not None else 0)
    )
    assert official == 12_550_721


def test_config_file_names_the_rpe_switch() -> None:
    text = (CONFIG_DIR / "pcqm4mv2.yaml").read_text()
    assert "--model.encoder.attention rpe" in text and "9,649,217" in text
