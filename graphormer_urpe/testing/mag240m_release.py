"""TEST AND BENCHMARK TOOL: writes a synthetic graph in MAG240M's on-disk layout, of any size.

Read exactly like the OGB-LSC release; never a user default. Layout and structure: docs/reference/testing.md.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from graphormer_urpe.data.mag240m.release import DATASET_DIR, FEATURE_DIM, MAG240MRaw
from graphormer_urpe.testing.ogb_layouts import torch_save_as_numpy1

#: Real release: 1,112,392 / 138,949 / 146,818 arXiv papers in train / valid / test.
_SPLIT_FRACTIONS = (0.7961, 0.0994, 0.1045)


@dataclass(frozen=True)
class SyntheticMAG:
    """Sizes and knobs of a synthetic MAG240M graph; the same values write the same files."""

    num_papers: int
    num_authors: int | None = None  # default: as many as papers
    num_institutions: int | None = None  # default: one per 2,000 papers, at least 8
    num_classes: int = 153  # arXiv subject classes, as in the release
    labelled_fraction: float = 0.0115  # share of papers that are arXiv papers (release: about 1.15 %)
    test_size: int | None = None  # exact number of test (2020) arXiv papers; default: the release's proportion
    citations_per_paper: float = 10.0  # mean citations made by a non-isolated paper (release: about 10.7)
    authors_per_paper: float = 3.0  # mean authors of a non-isolated paper (release: about 3.2)
    homophily: float = 0.75  # probability that a citation or an authorship stays within the paper's class
    signal: float = 0.5  # scale of the class centroid in the features (noise has unit variance)
    confusing_fraction: float = 0.3  # papers whose features carry another class's centroid
    isolated_fraction: float = 0.02  # papers with no edges at all
    idle_author_fraction: float = 0.05  # authors (the highest ids) who wrote nothing
    seed: int = 0

    @property
    def authors(self) -> int:
        return self.num_authors if self.num_authors is not None else self.num_papers

    @property
    def institutions(self) -> int:
        return self.num_institutions if self.num_institutions is not None else max(8, self.num_papers // 2000)


def _pick_in_class(
    rng: np.random.Generator, classes: np.ndarray, members: np.ndarray, member_ptr: np.ndarray, skew: float
) -> np.ndarray:
    """One member of each given class; ``skew > 1`` favours the first members (heavy-tailed popularity)."""
    counts = member_ptr[classes + 1] - member_ptr[classes]
    offset = np.floor(rng.random(len(classes)) ** skew * counts).astype(np.int64)
    return members[member_ptr[classes] + np.minimum(offset, np.maximum(counts - 1, 0))]


def _grouped(values: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices sorted by value and the offsets of each value's run. ((n,), (groups + 1,))"""
    return np.argsort(values, kind="stable"), np.concatenate([[0], np.cumsum(np.bincount(values, minlength=groups))])


def _save_edges(path: Path, src: np.ndarray, dst: np.ndarray) -> None:
    path.mkdir(parents=True, exist_ok=True)
    np.save(path / "edge_index.npy", np.stack([src, dst]).astype(np.int64))


def write_synthetic_mag240m(root: str | Path, spec: SyntheticMAG, chunk_size: int = 100_000) -> Path:
    """Write ``root/mag240m_kddcup2021`` (``root`` is a run's ``--data.root``) for ``spec``, features in chunks of
    ``chunk_size`` papers (bounding memory); returns that directory."""
    rng = np.random.default_rng(spec.seed)
    directory = Path(root) / DATASET_DIR
    paper_dir = directory / "processed" / "paper"
    paper_dir.mkdir(parents=True, exist_ok=True)
    n, classes_count = spec.num_papers, spec.num_classes

    paper_class = rng.integers(0, classes_count, n)
    isolated = rng.random(n) < spec.isolated_fraction
    connected = np.flatnonzero(~isolated)
    members, member_ptr = _grouped(paper_class[connected], classes_count)
    members = connected[members]

    # citations: sorted by citing paper, none from or to isolated papers
    cites_made = np.where(isolated, 0, rng.poisson(spec.citations_per_paper, n))
    citing = np.repeat(np.arange(n), cites_made)
    same = rng.random(len(citing)) < spec.homophily
    target_class = np.where(same, paper_class[citing], rng.integers(0, classes_count, len(citing)))
    cited = _pick_in_class(rng, target_class, members, member_ptr, skew=3.0)
    valid = (cited != citing) & (member_ptr[target_class + 1] > member_ptr[target_class])
    pairs = np.unique(np.stack([citing[valid], cited[valid]]), axis=1)  # sorted by citing paper, no duplicates
    _save_edges(directory / "processed" / "paper___cites___paper", pairs[0], pairs[1])

    # authorships: authors have a home class; the last idle_author_fraction wrote nothing
    active = max(1, int(round(spec.authors * (1.0 - spec.idle_author_fraction))))
    author_class = rng.integers(0, classes_count, spec.authors)
    authors_sorted, author_ptr = _grouped(author_class[:active], classes_count)
    team = np.where(isolated, 0, 1 + rng.poisson(max(spec.authors_per_paper - 1.0, 0.0), n))
    written = np.repeat(np.arange(n), team)
    same = rng.random(len(written)) < spec.homophily
    wanted = np.where(same, paper_class[written], rng.integers(0, classes_count, len(written)))
    has_author = author_ptr[wanted + 1] > author_ptr[wanted]
    writer = np.where(
        has_author,
        _pick_in_class(rng, wanted, authors_sorted, author_ptr, skew=1.5),
        rng.integers(0, active, len(written)),
    )
    pairs = np.unique(np.stack([writer, written]), axis=1)  # sorted by author, no duplicate authorship
    _save_edges(directory / "processed" / "author___writes___paper", pairs[0], pairs[1])

    # affiliations: 0-2 institutions per author (class-correlated)
    affiliations = rng.choice(3, spec.authors, p=[0.3, 0.55, 0.15])
    member = np.repeat(np.arange(spec.authors), affiliations)
    institution = (author_class[member] * 7 + rng.integers(0, 3, len(member))) % spec.institutions
    pairs = np.unique(np.stack([member, institution]), axis=1)
    _save_edges(directory / "processed" / "author___affiliated_with___institution", pairs[0], pairs[1])

    # arXiv papers, years and the year-based split
    labelled = rng.permutation(n)[: max(3, int(round(n * spec.labelled_fraction)))]
    n_test = spec.test_size if spec.test_size is not None else int(round(len(labelled) * _SPLIT_FRACTIONS[2]))
    if n_test > len(labelled) - 2:
        raise ValueError(
            f"test_size={n_test} needs more than {len(labelled)} labelled papers; raise labelled_fraction or num_papers"
        )
    remaining = len(labelled) - n_test
    n_valid = max(1, int(round(remaining * _SPLIT_FRACTIONS[1] / (_SPLIT_FRACTIONS[0] + _SPLIT_FRACTIONS[1]))))
    test, valid, train = labelled[:n_test], labelled[n_test : n_test + n_valid], labelled[n_test + n_valid :]
    year = rng.integers(1950, 2021, n).astype(np.int64)
    year[train] = rng.integers(1991, 2019, len(train))
    year[valid], year[test] = 2019, 2020
    label = np.full(n, np.nan, dtype=np.float32)
    label[train], label[valid], label[test] = paper_class[train], paper_class[valid], -1.0
    np.save(paper_dir / "node_label.npy", label)
    np.save(paper_dir / "node_year.npy", year)

    # features, streamed: signal * centroid[class] + noise, a confusing share with a wrong centroid
    centroid = rng.standard_normal((classes_count, FEATURE_DIM)).astype(np.float32)
    shown_class = np.where(rng.random(n) < spec.confusing_fraction, rng.integers(0, classes_count, n), paper_class)
    features = np.lib.format.open_memmap(
        paper_dir / "node_feat.npy", mode="w+", dtype=np.float16, shape=(n, FEATURE_DIM)
    )
    for start in tqdm(range(0, n, chunk_size), desc=f"synthetic MAG240M features ({n:,} papers)", unit="chunk"):
        stop = min(n, start + chunk_size)
        block = rng.standard_normal((stop - start, FEATURE_DIM), dtype=np.float32)
        block += spec.signal * centroid[shown_class[start:stop]]
        features[start:stop] = block
    features.flush()
    del features

    torch.save(
        {"paper": n, "author": spec.authors, "institution": spec.institutions, "num_classes": classes_count},
        directory / "meta.pt",
    )
    torch_save_as_numpy1(
        {
            "train": np.sort(train).astype(np.int64),
            "valid": np.sort(valid).astype(np.int64),
            "test": np.sort(test).astype(np.int64),
        },
        directory / "split_dict.pt",
    )
    (directory / "RELEASE_v1.txt").write_text("synthetic MAG240M written by graphormer_urpe.testing.mag240m_release\n")
    return directory


def copy_release(root: Path, destination: Path) -> MAG240MRaw:
    """The release under ``root`` copied to ``destination`` without a datamodule's derived files, opened."""
    shutil.copytree(root / DATASET_DIR, destination / DATASET_DIR, ignore=shutil.ignore_patterns("graphormer"))
    return MAG240MRaw(destination)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="dataset root; writes ROOT/mag240m_kddcup2021")
    parser.add_argument("--papers", type=int, required=True)
    parser.add_argument("--authors", type=int, default=None)
    parser.add_argument("--institutions", type=int, default=None)
    parser.add_argument("--classes", type=int, default=153)
    parser.add_argument("--labelled-fraction", type=float, default=0.0115)
    parser.add_argument("--test-size", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    spec = SyntheticMAG(
        num_papers=args.papers,
        num_authors=args.authors,
        num_institutions=args.institutions,
        num_classes=args.classes,
        labelled_fraction=args.labelled_fraction,
        test_size=args.test_size,
        seed=args.seed,
    )
    print(f"writing {spec} to {args.root}")
    print(f"done: {write_synthetic_mag240m(args.root, spec)}")


if __name__ == "__main__":
    main()
