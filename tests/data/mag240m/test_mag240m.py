"""MAG240M release reader and derived files: layout, splits as ogb derives them, CSR, features,
checksums and resumption."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from graphormer_urpe.data.mag240m import derived as derived_files
from graphormer_urpe.data.mag240m.derived import FEATURE_FILES, csr_files, prepare_derived
from graphormer_urpe.data.mag240m.release import AFFILIATED, CITES, RELATIONS, WRITES, MAG240MRaw, NodeType
from graphormer_urpe.data.safe_load import numpy_safe_globals
from graphormer_urpe.errors import DataError, DatasetMissing
from graphormer_urpe.testing.mag240m_release import copy_release


@pytest.fixture
def package_log(caplog: pytest.LogCaptureFixture):
    """caplog that sees INFO records of this package even after the CLI stopped their propagation."""
    logger = logging.getLogger("graphormer_urpe")
    level = logger.level
    logger.addHandler(caplog.handler)
    logger.setLevel(logging.INFO)
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.setLevel(level)


def test_reads_the_layout_exactly_like_ogb(synthetic_mag) -> None:
    from ogb.lsc import MAG240MDataset

    raw = MAG240MRaw(synthetic_mag)
    raw.check()
    with torch.serialization.safe_globals(numpy_safe_globals()):  # ogb itself cannot load split_dict.pt
        reference = MAG240MDataset(str(synthetic_mag))
    assert raw.meta["paper"] == reference.num_papers and raw.meta["author"] == reference.num_authors
    assert raw.meta["institution"] == reference.num_institutions and raw.meta["num_classes"] == reference.num_classes
    ours, theirs = raw.splits(), reference.get_idx_split()
    assert ours.keys() == theirs.keys() == {"train", "valid", "test-whole", "test-dev", "test-challenge"}
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name])
    whole = ours["test-whole"]
    np.testing.assert_array_equal(ours["test-dev"], whole[np.arange(len(whole)) % 5 < 3])
    assert isinstance(raw.paper_features, np.memmap) and raw.paper_features.dtype == np.float16
    np.testing.assert_array_equal(raw.paper_features[:50], reference.paper_feat[:50])
    np.testing.assert_array_equal(raw.edge_index(CITES), reference.edge_index("paper", "cites", "paper"))


def test_missing_files_are_named(synthetic_mag, tmp_path) -> None:
    raw = copy_release(synthetic_mag, tmp_path)
    os.remove(raw.directory / "processed/paper/node_year.npy")
    os.remove(raw.directory / "split_dict.pt")
    with pytest.raises(DatasetMissing, match="split_dict.pt, processed/paper/node_year.npy") as error:
        raw.check()
    assert "MAG240MDataset" in str(error.value)  # says how to get the data


def test_wrong_feature_shape_is_named(synthetic_mag, tmp_path) -> None:
    raw = copy_release(synthetic_mag, tmp_path)
    np.save(raw.directory / "processed/paper/node_feat.npy", np.zeros((3, 768), np.float16))
    with pytest.raises(ValueError, match="node_feat.npy: shape \\(3, 768\\)"):
        raw.check()


def test_csr_matches_the_edge_arrays(synthetic_mag) -> None:
    raw = MAG240MRaw(synthetic_mag)
    derived = raw.directory / "graphormer"
    for relation in RELATIONS:
        indptr_name, indices_name = csr_files(relation)
        indptr, indices = np.load(derived / indptr_name), np.load(derived / indices_name)
        edges = np.asarray(raw.edge_index(relation.raw))
        src, dst = (edges[1], edges[0]) if relation.transposed else (edges[0], edges[1])
        assert indptr.shape == (raw.num_nodes(relation.source) + 1,) and indptr[0] == 0
        assert indptr[-1] == len(indices) == edges.shape[1] and indices.dtype == np.int32
        np.testing.assert_array_equal(np.diff(indptr), np.bincount(src, minlength=raw.num_nodes(relation.source)))
        rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        ours = np.lexsort((indices, rows))
        theirs = np.lexsort((dst, src))
        np.testing.assert_array_equal(rows[ours], src[theirs])
        np.testing.assert_array_equal(indices[ours], dst[theirs])


def test_author_and_institution_features_are_means(synthetic_mag) -> None:
    raw = MAG240MRaw(synthetic_mag)
    derived = raw.directory / "graphormer"
    papers = np.asarray(raw.paper_features, dtype=np.float32)
    author, paper = np.asarray(raw.edge_index(WRITES))
    expected = np.zeros((raw.num_nodes(NodeType.AUTHOR), papers.shape[1]), np.float32)
    np.add.at(expected, author, papers[paper])
    counts = np.bincount(author, minlength=len(expected))
    expected[counts > 0] /= counts[counts > 0, None]
    authors = np.load(derived / FEATURE_FILES[NodeType.AUTHOR])
    assert authors.dtype == np.float16 and (counts == 0).any()  # some authors wrote nothing
    # float32 means stored in float16: half a float16 ulp (relative; absolute below float16's normal range)
    float16 = {"rtol": float(np.finfo(np.float16).eps), "atol": float(np.finfo(np.float16).smallest_subnormal)}
    np.testing.assert_allclose(authors, expected, **float16)
    assert (authors[counts == 0] == 0).all()

    member, institution = np.asarray(raw.edge_index(AFFILIATED))
    expected = np.zeros((raw.num_nodes(NodeType.INSTITUTION), papers.shape[1]), np.float32)
    np.add.at(expected, institution, authors[member].astype(np.float32))
    counts = np.bincount(institution, minlength=len(expected))
    expected[counts > 0] /= counts[counts > 0, None]
    np.testing.assert_allclose(np.load(derived / FEATURE_FILES[NodeType.INSTITUTION]), expected, **float16)


def test_out_of_range_edge_is_named(synthetic_mag, tmp_path) -> None:
    raw = copy_release(synthetic_mag, tmp_path)
    path = raw.directory / "processed" / WRITES / "edge_index.npy"
    edges = np.load(path)
    edges[1, 5] = raw.num_nodes(NodeType.PAPER) + 3
    np.save(path, edges)
    with pytest.raises(ValueError, match="author___writes___paper/edge_index.npy: edge 5 has row-1 node id"):
        prepare_derived(raw, tmp_path / "derived")


def _build(raw, directory, **kwargs):
    return prepare_derived(raw, directory, chunk_edges=5000, feature_block_rows=400, **kwargs)


def test_damaged_files_are_detected_and_rebuilt(synthetic_mag, tmp_path, package_log) -> None:
    raw = copy_release(synthetic_mag, tmp_path)
    directory = tmp_path / "derived"
    _build(raw, directory)
    features = directory / FEATURE_FILES[NodeType.AUTHOR]
    original = features.read_bytes()
    stat = features.stat()

    damaged = bytearray(original)
    damaged[-5] ^= 0xFF  # same size, same modification time: only a checksum finds it
    features.write_bytes(bytes(damaged))
    os.utime(features, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    _build(raw, directory)
    assert features.read_bytes() == bytes(damaged)  # not verified by default
    _build(raw, directory, verify_checksums=True)
    assert features.read_bytes() == original and "corrupted" in package_log.text

    features.write_bytes(original[:-100])  # truncated
    _build(raw, directory)
    assert features.read_bytes() == original and "truncated" in package_log.text

    indices = directory / csr_files(RELATIONS[0])[1]
    healthy = indices.read_bytes()
    indices.write_bytes(healthy[:-8] + b"\x01" * 8)  # rewritten in place: modification time moved
    _build(raw, directory)
    assert indices.read_bytes() == healthy


def interrupt_the_feature_build(raw, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Build the derived files in ``directory``, interrupted (``KeyboardInterrupt``) at the fourth block
    of features read, as Ctrl-C would; later builds read normally."""
    read_rows, calls = derived_files._read_rows, {"n": 0}

    def failing(source, ids):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt("simulated interruption")
        return read_rows(source, ids)

    monkeypatch.setattr(derived_files, "_read_rows", failing)
    with pytest.raises(KeyboardInterrupt):
        _build(raw, directory)
    monkeypatch.setattr(derived_files, "_read_rows", read_rows)


def test_interrupted_feature_build_resumes(synthetic_mag, tmp_path, monkeypatch, package_log) -> None:
    raw = copy_release(synthetic_mag, tmp_path)
    directory = tmp_path / "derived"
    interrupt_the_feature_build(raw, directory, monkeypatch)
    name = FEATURE_FILES[NodeType.AUTHOR]
    manifest = json.loads((directory / "manifest.json").read_text())
    assert all(csr_files(r)[0] in manifest["files"] for r in RELATIONS) and name not in manifest["files"]
    assert not (directory / name).exists()  # only the .partial file and its progress

    read_rows, reads = derived_files._read_rows, {"n": 0}

    def counted(source, ids):
        reads["n"] += 1
        return read_rows(source, ids)

    monkeypatch.setattr(derived_files, "_read_rows", counted)
    _build(raw, directory)
    blocks = -(-raw.num_nodes(NodeType.AUTHOR) // 400)
    assert reads["n"] < blocks + 1  # finished blocks were not recomputed
    assert "resuming, 3 of" in package_log.text
    np.testing.assert_array_equal(
        np.load(directory / name), np.load(synthetic_mag / "mag240m_kddcup2021/graphormer" / name)
    )


def test_a_damaged_file_in_a_read_only_directory_is_refused_before_anything_is_built(
    synthetic_mag, tmp_path, monkeypatch
) -> None:
    raw = copy_release(synthetic_mag, tmp_path)
    directory = tmp_path / "derived"
    _build(raw, directory)
    indices = directory / csr_files(RELATIONS[0])[1]
    indices.write_bytes(indices.read_bytes()[:-8])  # truncated
    (directory / "manifest.json").write_bytes(b"{not json")  # and the manifest too: nothing is deleted
    before = {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    monkeypatch.setattr(derived_files, "unwritable", lambda path: path)  # as a read-only mount would answer
    with pytest.raises(DataError) as refused:
        _build(raw, directory, key="data.root")
    assert str(refused.value) == (
        f"{directory} (data.root): MAG240M's derived files must be built there ({csr_files(RELATIONS[0])[0]}: not "
        f"built yet), but {directory} is not writable; set data.cache_dir to a writable directory (or build them "
        "once where it is writable)"
    )
    assert {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_a_damaged_derived_manifest_is_named_and_every_file_rebuilt(
    synthetic_mag, tmp_path, package_log, damage: str
) -> None:
    raw = copy_release(synthetic_mag, tmp_path)
    directory = tmp_path / "derived"
    _build(raw, directory)
    manifest = directory / "manifest.json"
    intact = manifest.read_bytes()
    manifest.write_bytes(intact[: len(intact) // 2] if damage == "truncated" else b"\x00\xffnot json")
    package_log.clear()
    _build(raw, directory)
    # a set: this file's package_log sees each record twice (its handler, and the root's through propagation)
    warnings = sorted({r.getMessage() for r in package_log.records if r.levelno >= logging.WARNING})
    assert len(warnings) == 1 and warnings[0].startswith(f"{manifest} is not valid JSON, truncated or corrupted (")
    assert warnings[0].endswith("); every derived file will be rebuilt")
    assert json.loads(manifest.read_text())["files"].keys() == json.loads(intact)["files"].keys()
    for name in json.loads(intact)["files"]:
        np.testing.assert_array_equal(
            np.load(directory / name), np.load(synthetic_mag / "mag240m_kddcup2021" / "graphormer" / name)
        )


def test_a_damaged_progress_record_restarts_that_file_from_its_first_block(
    synthetic_mag, tmp_path, monkeypatch, package_log
) -> None:
    raw = copy_release(synthetic_mag, tmp_path)
    directory = tmp_path / "derived"
    interrupt_the_feature_build(raw, directory, monkeypatch)
    progress = next(directory.rglob("*.progress.json"))
    progress.write_text(progress.read_text()[:7])
    package_log.clear()
    _build(raw, directory)
    name = FEATURE_FILES[NodeType.AUTHOR]
    assert (
        f"{progress} is not valid JSON, truncated or corrupted (JSONDecodeError); {directory / name} is built "
        "from its first block" in package_log.text
    )
    np.testing.assert_array_equal(
        np.load(directory / name), np.load(synthetic_mag / "mag240m_kddcup2021/graphormer" / name)
    )
