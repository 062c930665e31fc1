"""The synthetic MAG240M generator (a test and benchmark tool): layout, structure, split, determinism."""

from __future__ import annotations

import numpy as np

from graphormer_urpe.data.mag240m.release import AFFILIATED, CITES, WRITES, MAG240MRaw
from graphormer_urpe.testing.mag240m_release import SyntheticMAG, write_synthetic_mag240m


def test_layout_dtypes_and_split(synthetic_mag) -> None:
    raw = MAG240MRaw(synthetic_mag)
    raw.check()
    meta = raw.meta
    assert meta == {"paper": 3000, "author": 3000, "institution": 8, "num_classes": 8}
    assert (raw.directory / "RELEASE_v1.txt").is_file()  # ogb would otherwise prompt with input()
    label = np.load(raw.directory / "processed/paper/node_label.npy")
    year = np.load(raw.directory / "processed/paper/node_year.npy")
    assert label.dtype == np.float32 and year.dtype == np.int64
    split = raw.splits()
    assert (year[split["train"]] <= 2018).all() and (year[split["valid"]] == 2019).all()
    assert (year[split["test-whole"]] == 2020).all()
    known = np.concatenate([split["train"], split["valid"]])
    assert ((label[known] >= 0) & (label[known] < 8)).all() and (label[split["test-whole"]] == -1).all()
    outside = np.setdiff1d(np.arange(3000), np.concatenate([known, split["test-whole"]]))
    assert np.isnan(label[outside]).all()


def test_structure_the_sampler_must_handle(synthetic_mag) -> None:
    raw = MAG240MRaw(synthetic_mag)
    cites, writes, affiliated = (np.asarray(raw.edge_index(name)) for name in (CITES, WRITES, AFFILIATED))
    for edges in (cites, writes, affiliated):
        assert edges.dtype == np.int64 and (np.diff(edges[0]) >= 0).all()  # sorted by source, like the release
    touched = np.zeros(3000, bool)
    touched[cites[0]] = touched[cites[1]] = touched[writes[1]] = True
    assert (~touched).sum() > 10  # isolated papers
    assert len(np.setdiff1d(np.arange(3000), writes[0])) > 50  # authors without papers
    assert len(np.setdiff1d(np.arange(3000), affiliated[0])) > 50  # authors without institution
    # homophily: a cited paper shares the citing paper's class far more often than chance (1/8)
    features = np.asarray(raw.paper_features, dtype=np.float32)
    centroid = np.stack([features[np.asarray(raw.paper_labels) == c].mean(0) for c in range(8)])
    guess = np.argmax(features @ centroid.T, axis=1)
    assert (guess[cites[0]] == guess[cites[1]]).mean() > 0.4


def test_same_seed_same_files_and_exact_test_size(tmp_path) -> None:
    spec = SyntheticMAG(num_papers=800, num_classes=5, labelled_fraction=0.5, test_size=123, seed=3)
    first = write_synthetic_mag240m(tmp_path / "a", spec, chunk_size=300)
    second = write_synthetic_mag240m(tmp_path / "b", spec, chunk_size=300)
    for name in (
        "processed/paper/node_feat.npy",
        "processed/paper/node_label.npy",
        f"processed/{CITES}/edge_index.npy",
        f"processed/{WRITES}/edge_index.npy",
    ):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert len(MAG240MRaw(tmp_path / "a").splits()["test-whole"]) == 123
