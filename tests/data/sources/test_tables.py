"""SmilesTable / SmilesToPredict: CSV and Parquet tables of your own molecules through the molecular pipeline."""

from __future__ import annotations

import builtins
import gzip
import io
import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rdkit import Chem
from rdkit.Chem.Scaffolds import MurckoScaffold

import train
from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import SmilesTable, SmilesToPredict
from graphormer_urpe.data.sources.base import seeded_split
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB, molecule_graph
from graphormer_urpe.data.sources.tables import TableError, balanced_scaffold_split, read_table, scaffold_split
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import DatasetMissing, InputError
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.runs import run_train_subprocess

EXAMPLE = REPO_DIR / "examples" / "qm9_sample.csv"


@pytest.fixture
def sample() -> pd.DataFrame:
    """The first 60 molecules of the shipped example (``mu_debye`` and ``polar`` missing in row 24 ...)."""
    return pd.read_csv(EXAMPLE).head(60)


def datamodule(tmp_path: Path, **source: object) -> GraphDataModule:
    return GraphDataModule(
        SmilesTable(**source), root=str(tmp_path / "data"), batch_size=8, num_workers=0, preprocess_workers=0
    )


def prepared(tmp_path: Path, **source: object) -> GraphDataModule:
    data = datamodule(tmp_path, **source)
    data.prepare_data()
    data.setup()
    return data


def test_csv_and_parquet_give_the_same_graphs_with_ogb_features(tmp_path: Path, sample: pd.DataFrame) -> None:
    sample.to_csv(tmp_path / "t.csv", index=False)
    sample.to_parquet(tmp_path / "t.parquet", index=False)
    targets = ["gap_ev", "mu_debye"]
    from_csv = prepared(tmp_path / "a", path=str(tmp_path / "t.csv"), targets=targets)
    from_parquet = prepared(tmp_path / "b", path=str(tmp_path / "t.parquet"), targets=targets)
    store_csv, store_parquet = from_csv.datasets["train"].store, from_parquet.datasets["train"].store
    assert len(store_csv) == len(store_parquet) == 60
    for index in range(60):
        a, b = store_csv.record(index), store_parquet.record(index)
        expected = molecule_graph(sample["smiles"][index], np.zeros(2))  # the one molecular featuriser
        np.testing.assert_array_equal(a.x, expected.x)
        np.testing.assert_array_equal(a.edge_attr, expected.edge_attr)
        np.testing.assert_array_equal(a.edge_index, b.edge_index)
        np.testing.assert_array_equal(a.y, sample.loc[index, targets].to_numpy(np.float32))  # NaN kept
        np.testing.assert_array_equal(b.y, a.y)
    assert np.isnan(store_csv.targets()[24, 1])
    assert (
        from_csv.spec
        == from_parquet.spec
        == DataSpec(ATOM_VOCAB, BOND_VOCAB, num_targets=2, num_outputs=2, target_names=("gap_ev", "mu_debye"))
    )


def test_a_constant_regression_target_is_named_in_one_warning_when_training_starts(
    tmp_path: Path, sample: pd.DataFrame, package_log: pytest.LogCaptureFixture
) -> None:
    """Issue 38: a target with one value in every training row trained silently to an MAE of 0."""
    path = tmp_path / "constant.csv"
    sample.assign(gap_ev=3.25).to_csv(path, index=False)
    data = datamodule(tmp_path, path=str(path), targets=["gap_ev", "mu_debye"])
    data.prepare_data()
    package_log.clear()
    data.setup("fit")
    warnings = [r.getMessage() for r in package_log.records if r.levelname == "WARNING"]
    train_rows = data.split_sizes["train"]
    assert warnings == [
        f"{path} (SMILES column 'smiles'): target 'gap_ev' is 3.25 in all {train_rows} training "
        "values: a model of it learns only that constant, and its error is 0 wherever the target has "
        "that value; check the target (data.source.targets)"
    ]
    package_log.clear()
    again = datamodule(tmp_path, path=str(path), targets=["gap_ev", "mu_debye"])
    again.setup("validate")  # an evaluation says nothing of training
    varied = datamodule(tmp_path, path=str(EXAMPLE), targets=["gap_ev"])
    varied.prepare_data()
    varied.setup("fit")
    assert not [r for r in package_log.records if "learns only that constant" in r.getMessage()]


@pytest.mark.parametrize(
    "name,sep,bom",
    [
        ("semicolon.csv", ";", False),
        ("excel.csv", ";", True),
        ("bom.csv", ",", True),
        ("tabs.csv", "\t", False),
        ("commas.tsv", ",", True),
    ],
)
def test_spreadsheet_exports_are_read_like_plain_csv(
    tmp_path: Path, sample: pd.DataFrame, package_log, name: str, sep: str, bom: bool
) -> None:
    """``;``-separated files (and a comma in a ``.tsv``) are detected from the header, with a log line; a
    byte-order mark is not part of the first column's name. Same cells, same targets in the cache."""
    package_log.set_level(logging.INFO, logger="graphormer_urpe")
    sample.to_csv(tmp_path / "plain.csv", index=False)
    path = tmp_path / name
    sample.to_csv(path, index=False, sep=sep, encoding="utf-8-sig" if bom else "utf-8")
    assert path.read_bytes().startswith(b"\xef\xbb\xbfsmiles") == bom
    columns = ["smiles", "gap_ev", "mu_debye"]
    expected = read_table(tmp_path / "plain.csv", columns, ["smiles_column", "targets", "targets"]).frame
    pd.testing.assert_frame_equal(read_table(path, columns, ["smiles_column", "targets", "targets"]).frame, expected)
    default = "\t" if name.endswith(".tsv") else ","
    detected = [r.getMessage() for r in package_log.records if "columns separated by" in r.getMessage()]
    assert detected == (
        [f"{path}: columns separated by {sep!r} (not {default!r}): read with that separator"] if sep != default else []
    )
    data = prepared(tmp_path / "cache", path=str(path), targets=["gap_ev", "mu_debye"])
    np.testing.assert_array_equal(
        data.datasets["train"].store.targets(), sample[["gap_ev", "mu_debye"]].to_numpy(np.float32)
    )


def test_an_unknown_separator_is_named_with_the_columns(tmp_path: Path, sample: pd.DataFrame) -> None:
    path = tmp_path / "t.csv"
    sample.to_csv(path, index=False, sep=":")
    with pytest.raises(
        TableError,
        match=r"t\.csv: no column 'smiles' \(smiles_column\)\. The file's columns are: "
        r"smiles:gap_ev:mu_debye:polar:rings \(read with the separator ','\)",
    ):
        read_table(path, ["smiles"], ["smiles_column"])


def test_random_split_is_seeded_and_recorded_with_the_cache(tmp_path: Path, sample: pd.DataFrame) -> None:
    sample.to_csv(tmp_path / "t.csv", index=False)
    data = prepared(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"], seed=3)
    expected = seeded_split(60, 3, (0.8, 0.1))
    with np.load(data.cache_dir / "splits.npz") as recorded:
        for name in ("train", "valid", "test"):
            np.testing.assert_array_equal(recorded[name], expected[name])
    other = datamodule(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"], seed=4)
    scaffold = datamodule(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"], split="scaffold")
    assert len({data.cache_dir, other.cache_dir, scaffold.cache_dir}) == 3  # the split is part of the key


def test_an_edited_table_gets_a_new_cache(tmp_path: Path, sample: pd.DataFrame) -> None:
    sample.to_csv(tmp_path / "t.csv", index=False)
    before = datamodule(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"]).cache_dir
    sample.assign(gap_ev=sample["gap_ev"] + 1).to_csv(tmp_path / "t.csv", index=False)
    assert datamodule(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"]).cache_dir != before


def test_scaffold_split_follows_deepchem_exactly() -> None:
    smiles = [
        "c1ccccc1C",
        "C1CCCCC1O",
        "CCO",
        "c1ccccc1O",
        "C1CCCCC1N",
        "c1ccccc1N",
        "CCN",
        "c1ccncc1",
        "c1ccccc1F",
        "C1CCCCC1F",
    ]
    # scaffolds: benzene rows 0, 3, 5, 8 (4); cyclohexane 1, 4, 9 (3); none 2, 6 (2); pyridine 7 (1).
    # cut-offs 5 (train) and 8 (train + valid): benzene -> train (4), cyclohexane -> valid (7 <= 8),
    # acyclic -> test (6 > 5 and 9 > 8), pyridine -> train (5 <= 5)
    splits, scaffolds = scaffold_split(smiles, (0.5, 0.3, 0.2))
    assert scaffolds == 4
    assert splits["train"].tolist() == [0, 3, 5, 7, 8] and splits["valid"].tolist() == [1, 4, 9]
    assert splits["test"].tolist() == [2, 6]


def test_scaffold_split_is_deterministic_and_keeps_every_scaffold_in_one_split() -> None:
    smiles = pd.read_csv(EXAMPLE)["smiles"].tolist() + ["not a molecule"]
    splits, _ = scaffold_split(smiles, (0.8, 0.1, 0.1))
    again, _ = scaffold_split(list(smiles), (0.8, 0.1, 0.1))
    assert all(np.array_equal(splits[k], again[k]) for k in splits)
    assert sorted(np.concatenate(list(splits.values())).tolist()) == list(range(len(smiles)))
    assert len(smiles) - 1 in splits["train"]  # unparsable rows join train, where they are skipped
    scaffold_sets = {
        name: {
            MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(smiles[r])) for r in rows if r < len(smiles) - 1
        }
        for name, rows in splits.items()
    }
    train, valid, test = scaffold_sets["train"], scaffold_sets["valid"], scaffold_sets["test"]
    assert not (train & valid) and not (train & test) and not (valid & test)
    assert abs(len(splits["train"]) - 0.8 * len(smiles)) <= 1 and len(splits["valid"]) and len(splits["test"])


def test_a_balanced_scaffold_split_is_seeded_and_keeps_every_scaffold_in_one_split() -> None:
    smiles = pd.read_csv(EXAMPLE)["smiles"].tolist() + ["not a molecule"]
    scaffold_of = [MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(text)) for text in smiles[:-1]]
    largest, largest_size = Counter(scaffold_of).most_common(1)[0]
    assert largest_size > 0.1 * len(smiles) / 2  # too big for half the test share: it comes first, into train
    splits = {seed: balanced_scaffold_split(smiles, (0.8, 0.1, 0.1), seed)[0] for seed in (1, 2)}
    again, scaffolds = balanced_scaffold_split(list(smiles), (0.8, 0.1, 0.1), 1)
    assert scaffolds == len(set(scaffold_of))
    assert all(np.array_equal(splits[1][k], again[k]) for k in again)
    assert any(not np.array_equal(splits[1][k], splits[2][k]) for k in again)  # another seed, another split
    for split in splits.values():
        assert sorted(np.concatenate(list(split.values())).tolist()) == list(range(len(smiles)))
        assert len(smiles) - 1 in split["train"]  # unparsable rows join train, where they are skipped
        owner: dict[str, str] = {}
        for name, rows in split.items():
            for row in rows[rows < len(smiles) - 1]:
                assert owner.setdefault(scaffold_of[row], name) == name  # no scaffold in two splits
        assert owner[largest] == "train"
        assert len(split["train"]) <= 0.8 * len(smiles) and len(split["valid"]) and len(split["test"])


def test_a_table_split_by_balanced_scaffolds_records_the_split_of_its_seed(tmp_path: Path) -> None:
    smiles = pd.read_csv(EXAMPLE)["smiles"].tolist()
    pd.read_csv(EXAMPLE).to_csv(tmp_path / "t.csv", index=False)
    data = prepared(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"], split="scaffold_balanced", seed=2)
    expected, _ = balanced_scaffold_split(smiles, (0.8, 0.1, 0.1), 2)
    with np.load(data.cache_dir / "splits.npz") as recorded:
        assert all(np.array_equal(recorded[name], expected[name]) for name in ("train", "valid", "test"))
    other = datamodule(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"], split="scaffold_balanced", seed=3)
    scaffold = datamodule(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"], split="scaffold", seed=2)
    assert len({data.cache_dir, other.cache_dir, scaffold.cache_dir}) == 3  # its seed is part of the key


def test_split_from_a_column(tmp_path: Path, sample: pd.DataFrame) -> None:
    names = np.array(["Train", " training ", "val", "VALIDATION", "test", "valid"] * 10)
    sample.assign(fold=names).to_csv(tmp_path / "t.csv", index=False)
    data = prepared(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"], split="column", split_column="fold")
    assert data.split_sizes == {"train": 20, "valid": 30, "test": 10}
    with np.load(data.cache_dir / "splits.npz") as recorded:
        assert recorded["test"].tolist() == list(range(4, 60, 6))


def test_target_statistics_come_from_training_rows_with_missing_values_left_out(
    tmp_path: Path, sample: pd.DataFrame
) -> None:
    sample.to_csv(tmp_path / "t.csv", index=False)
    data = prepared(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev", "mu_debye"])
    train = seeded_split(60, 0, (0.8, 0.1))["train"]
    values = sample.loc[train, ["gap_ev", "mu_debye"]].to_numpy(np.float32).astype(np.float64)  # as stored
    mean, std = data.target_statistics()  # float64, like the expected values
    np.testing.assert_allclose(mean, np.nanmean(values, axis=0), rtol=64 * np.finfo(np.float64).eps)
    np.testing.assert_allclose(std, np.nanstd(values, axis=0), rtol=64 * np.finfo(np.float64).eps)
    assert not np.allclose(mean, np.nanmean(sample[["gap_ev", "mu_debye"]].to_numpy(np.float32), axis=0))


def test_multiclass_classes_are_read_from_the_table_when_the_model_is_linked(tmp_path: Path) -> None:
    source = SmilesTable(str(EXAMPLE), targets=["rings"], task="multiclass")
    assert source.spec == DataSpec(
        ATOM_VOCAB, BOND_VOCAB, num_targets=1, num_outputs=4, target_kind="multiclass", target_names=("rings",)
    )  # labels 0..3, read before any preprocessing
    assert SmilesTable(str(EXAMPLE), targets=["rings"], task="multiclass", num_classes=6).spec.num_outputs == 6
    with pytest.raises(TableError, match=r"column 'rings' has \d+ label\(s\) that are not a class id in 0..2"):
        _ = SmilesTable(str(EXAMPLE), targets=["rings"], task="multiclass", num_classes=3).spec
    binary = SmilesTable(str(EXAMPLE), targets=["polar"], task="binary").spec
    assert (binary.num_targets, binary.num_outputs, binary.target_kind) == (1, 1, "binary")


def test_molecules_that_cannot_be_featurised_are_skipped_counted_and_named(
    tmp_path: Path, sample: pd.DataFrame, caplog: pytest.LogCaptureFixture
) -> None:
    table = sample.head(20).copy()
    table.loc[4, "smiles"] = ""  # a molecule without atoms
    table.loc[9, "smiles"] = "C1CC(=O"  # RDKit cannot parse it
    table.loc[11, "smiles"] = "   "
    table.to_csv(tmp_path / "t.csv", index=False)
    with caplog.at_level(logging.INFO):
        data = prepared(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"], split_fractions=[0.5, 0.25, 0.25])
    skipped = data.datasets["train"].store.skipped_rows()
    assert skipped == {4: "empty SMILES", 9: "RDKit cannot parse", 11: "empty SMILES"}
    assert sum(data.split_sizes.values()) == 17
    text = caplog.text
    assert (
        f"{tmp_path / 't.csv'} (SMILES column 'smiles'): 2 empty SMILES cell(s) (molecules without atoms) at "
        "rows 4, 11 (lines 6, 13)" in text
    )
    assert f"{tmp_path / 't.csv'} (SMILES column 'smiles'): 3 of 20 rows were skipped while preprocessing" in text


def test_duplicated_smiles_can_be_kept_once(tmp_path: Path, sample: pd.DataFrame) -> None:
    table = sample.head(20).copy()
    table.loc[[7, 12], "smiles"] = table.loc[2, "smiles"]
    table.to_csv(tmp_path / "t.csv", index=False)
    data = prepared(
        tmp_path,
        path=str(tmp_path / "t.csv"),
        targets=["gap_ev"],
        duplicate_smiles="keep_first",
        split_fractions=[0.5, 0.25, 0.25],
    )
    assert data.datasets["train"].store.skipped_rows() == {7: "duplicate of row 2", 12: "duplicate of row 2"}


def _bad(frame: pd.DataFrame, row: int, column: str, value: object) -> pd.DataFrame:
    frame = frame.astype({column: object})
    frame.loc[row, column] = value
    return frame


# (table edit, source arguments, error, message): each stops before any work, naming file, column, rows
BAD_TABLES = {
    "empty file": (lambda f: None, {}, TableError, r"t\.csv: the file is empty"),
    "header only": (lambda f: f.head(0), {}, TableError, r"t\.csv: the file has a header but no data rows"),
    "missing SMILES column": (
        lambda f: f,
        {"smiles_column": "SMILES"},
        TableError,
        r"t\.csv: no column 'SMILES' \(data.source.smiles_column\); did you mean 'smiles'\? "
        r"The file's columns are: smiles, gap_ev, mu_debye, polar, rings",
    ),
    "unknown target": (
        lambda f: f,
        {"targets": ["gap_ev", "homo"]},
        TableError,
        r"t\.csv: no column 'homo' \(data.source.targets\)",
    ),
    "non-numeric target": (
        lambda f: _bad(_bad(f, 3, "gap_ev", "abc"), 17, "gap_ev", "1,5"),
        {},
        TableError,
        r"t\.csv: column 'gap_ev' holds 2 value\(s\) that are not finite numbers within "
        r"float32's range \(\|x\| <= 3\.403e\+38\), at rows 3, 17 \(lines 5, 19\): 'abc', '1,5'",
    ),
    "infinite target": (
        lambda f: _bad(f, 5, "gap_ev", "inf"),
        {},
        TableError,
        r"column 'gap_ev' holds 1 value\(s\) that are not finite numbers .*, at row 5 \(line 7\)",
    ),
    "target beyond float32": (
        lambda f: _bad(f, 8, "gap_ev", "-4e38"),
        {},
        TableError,
        r"column 'gap_ev' holds 1 value\(s\) that are not finite numbers within float32's "
        r"range \(\|x\| <= 3\.403e\+38\), at row 8 \(line 10\): '-4e38'",
    ),
    "repeated target column": (
        lambda f: pd.concat([f, f[["gap_ev"]]], axis=1),
        {},
        TableError,  # a merged table
        r"t\.csv: the header names 2 columns 'gap_ev' \(data.source.targets\), columns 2, 6; "
        r"rename or remove all but one",
    ),
    "target without values": (
        lambda f: f.assign(mu_debye=np.nan),
        {"targets": ["mu_debye"]},
        TableError,
        r"t\.csv: target column 'mu_debye' has no value in any of its 40 rows",
    ),
    "duplicated SMILES": (
        lambda f: _bad(f, 9, "smiles", f.loc[2, "smiles"]),
        {},
        TableError,
        r"t\.csv: column 'smiles' has 1 duplicated SMILES \('NC1=CC\(O\)=CN1' at rows 2, 9 "
        r"\(lines 4, 11\)\); .*duplicate_smiles: keep_first",
    ),
    "binary label 2": (
        lambda f: _bad(f, 6, "polar", 2),
        {"targets": ["polar"], "task": "binary"},
        TableError,
        r"t\.csv: column 'polar' has 1 label\(s\) that are not 0 or 1 .* at row 6 \(line 8\): 2",
    ),
    "fractional class": (
        lambda f: _bad(f, 8, "rings", 1.5),
        {"targets": ["rings"], "task": "multiclass"},
        TableError,
        r"column 'rings' has 1 label\(s\) that are not a class id .* at row 8",
    ),
    "unknown split name": (
        lambda f: f.assign(fold=["train"] * 30 + ["valid"] * 5 + ["holdout"] * 5),
        {"split": "column", "split_column": "fold"},
        TableError,
        r"column 'fold' \(data.source.split_column\) has 5 value\(s\) that name no split, at rows "
        r"35, 36, 37, 38, 39 \(lines 37, 38, 39, 40, 41\): \['holdout'\]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_bad_tables_stop_before_any_work_naming_file_column_and_rows(
    tmp_path: Path, sample: pd.DataFrame, case: str
) -> None:
    edit, arguments, error, message = BAD_TABLES[case]
    table = edit(sample.head(40).copy())
    path = tmp_path / "t.csv"
    if table is None:
        path.write_bytes(b"")
    else:
        table.to_csv(path, index=False)
    data = datamodule(tmp_path, **{"path": str(path), "targets": ["gap_ev"], **arguments})
    with pytest.raises(error, match=message):
        data.prepare_data()
    written = [p.name for p in (tmp_path / "data").rglob("*") if p.is_file()]
    assert written == [] or (len(written) == 1 and written[0].endswith(".lock"))  # at most the cache's build lock


def test_a_missing_table_is_named(tmp_path: Path) -> None:
    data = datamodule(tmp_path, path=str(tmp_path / "nope.csv"), targets=["y"])
    with pytest.raises(DatasetMissing, match=r"the table .*nope\.csv does not exist \(data.source.path"):
        data.prepare_data()


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"targets": []}, r"name at least one target column"),
        ({"targets": ["a", "b"], "task": "multiclass"}, r"a multi-class task has one target column"),
        ({"targets": ["a"], "split_fractions": [0.8, 0.3, 0.1]}, r"must be three shares"),
    ],
)
def test_impossible_configurations_are_refused_at_once(arguments: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        SmilesTable("t.csv", **arguments)


def test_tables_to_predict_keep_every_row_in_order(tmp_path: Path) -> None:
    pd.DataFrame({"id": [5, 6, 7, 8], "mol": ["CCO", "bad(", "CCO", ""]}).to_csv(tmp_path / "new.csv", index=False)
    data = GraphDataModule(
        SmilesToPredict(str(tmp_path / "new.csv"), "mol"),
        root=str(tmp_path / "data"),
        num_workers=0,
        preprocess_workers=0,
    )
    data.prepare_data()
    data.setup()
    store = data.datasets["predict"].store
    assert store.split_rows()["predict"].tolist() == [0, 1, 2, 3]
    assert store.source_row.tolist() == [0, 2] and store.skipped_rows() == {1: "RDKit cannot parse", 3: "empty SMILES"}
    assert store.targets().shape == (2, 0)


def test_tables_to_predict_keep_blank_lines_and_flag_smiles_with_whitespace(tmp_path: Path) -> None:
    (tmp_path / "new.csv").write_text('\n\nsmiles\nCCO\n   \nCC\n\nCCO\tCC\n"C\nC"\n')
    source = SmilesToPredict(str(tmp_path / "new.csv"))
    assert source.smiles() == ["CCO", "", "CC", "", "CCO\tCC", "C\nC"]
    assert source.table.lines.tolist() == [4, 5, 6, 7, 8, 9]  # the header is line 3
    data = GraphDataModule(source, root=str(tmp_path / "data"), num_workers=0, preprocess_workers=0)
    data.prepare_data()
    data.setup()
    store = data.datasets["predict"].store
    assert store.split_rows()["predict"].tolist() == list(range(6))
    assert store.skipped_rows() == {
        1: "empty SMILES",
        3: "empty SMILES",
        4: "whitespace inside the SMILES 'CCO\\tCC' (RDKit would read only 'CCO')",
        5: "whitespace inside the SMILES 'C\\nC' (RDKit would read only 'C')",
    }


def test_blank_lines_of_a_training_table_are_skipped_counted_and_lines_named_as_in_the_file(
    tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    lines = _lines(20)
    plain = tmp_path / "plain.csv"
    plain.write_text("\n".join(lines) + "\n")
    blank = tmp_path / "blank.csv"
    blank.write_text("\n".join([*lines[:4], "", "  \t", *lines[4:11], "", *lines[11:]]) + "\n\n")
    columns, keys = ["smiles", "gap_ev"], ["smiles_column", "targets"]
    with package_log.at_level(logging.INFO, logger="graphormer_urpe"):
        read = read_table(blank, columns, keys)
    pd.testing.assert_frame_equal(read.frame, read_table(plain, columns, keys).frame)  # the same rows: same splits
    assert read.lines.tolist() == [*range(2, 5), *range(7, 14), *range(15, 25)]
    assert f"{blank}: 4 blank line(s) skipped (lines 5, 6, 14, 25)" in package_log.text
    fields = lines[12].split(",")
    fields[1] = "abc"  # gap_ev of row 11, on line 16 below three blank lines
    blank.write_text("\n".join([*lines[:4], "", "  \t", *lines[4:11], "", lines[11], ",".join(fields), *lines[13:]]))
    with pytest.raises(TableError, match=r"column 'gap_ev' holds 1 value\(s\) .* at row 11 \(line 16\): 'abc'"):
        SmilesTable(str(blank), ["gap_ev"]).open(tmp_path)


def test_smiles_with_whitespace_inside_stop_a_training_table(tmp_path: Path) -> None:
    """RDKit reads ``CCO<tab>CC`` as ethanol (a SMILES file's name column): refused before any work."""
    lines = _lines(20)
    for line, smiles in ((3, "CCO\tCC"), (9, "C C")):
        lines[line] = ",".join([smiles, *lines[line].split(",")[1:]])
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    data = datamodule(tmp_path, path=str(tmp_path / "t.csv"), targets=["gap_ev"])
    with pytest.raises(
        TableError,
        match=r"t\.csv: column 'smiles' has 2 SMILES with whitespace inside, at rows 2, 8 "
        r"\(lines 4, 10\): 'CCO\\tCC', 'C C'; RDKit would read only the part before "
        r"the whitespace: correct these cells \(or the separator\)$",
    ):
        data.prepare_data()
    assert not (tmp_path / "data").exists()


# ----------------------------------------------------------------------------- malformed CSV files (issue 20)


def _lines(count: int = 40) -> list[str]:
    """The header and the first ``count`` data lines of the shipped example."""
    return EXAMPLE.read_text().splitlines()[: count + 1]


def _train(table: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--config",
        "smiles_csv_example",
        "--data.source.path",
        str(table),
        "--data.root",
        str(tmp_path / "data"),
        "--run_root",
        str(tmp_path / "runs"),
        "--logger",
        "none",
        *extra,
    ]


MALFORMED_CSV = {
    # line 5 of the file (row 3): an unquoted decimal comma splits gap_ev 6.6967 into two fields
    "decimal comma": (
        lambda lines: [*lines[:4], lines[4].replace("6.6967", "6,6967"), *lines[5:]],
        "line 5 has 6 fields, the header (line 1) has 5: a value holding the separator ',' "
        "(a decimal comma?) must be quoted",
    ),
    "missing field": (
        lambda lines: [*lines[:7], lines[7].rsplit(",", 1)[0], *lines[8:]],
        "line 8 has 4 fields, the header (line 1) has 5",
    ),
    # blank lines are skipped, and counted: the line number is the file's
    "after blank lines": (
        lambda lines: ["", lines[0], "", *lines[1:5], lines[5].rsplit(",", 1)[0], *lines[6:]],
        "line 8 has 4 fields, the header (line 2) has 5",
    ),
}


#: Line endings and quoting of the malformed files: plain lines are counted with array operations, quoted
#: ones (a value may hold a separator) by tokenising.
STYLES = {
    "plain": lambda lines: "\n".join(lines) + "\n",
    "crlf": lambda lines: "\r\n".join(lines) + "\r\n",
    "quoted": lambda lines: (
        "\n".join(f'"{line.split(",", 1)[0]}",{line.split(",", 1)[1]}' if line else line for line in lines) + "\n"
    ),
}


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("case", sorted(MALFORMED_CSV))
def test_a_line_with_another_field_count_stops_the_run_naming_file_line_and_counts(
    tmp_path: Path, package_log: pytest.LogCaptureFixture, case: str, style: str
) -> None:
    """pandas would shift the values of such a line into other columns (``gap_ev 6, mu_debye 6967``)."""
    edit, message = MALFORMED_CSV[case]
    table = tmp_path / "t.csv"
    table.write_bytes(STYLES[style](edit(_lines())).encode())
    with pytest.raises(SystemExit) as stop:
        train.main(_train(table, tmp_path))
    assert stop.value.code == 2
    assert [r.getMessage() for r in package_log.records if r.levelname == "ERROR"] == [f"{table}: {message}"]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()  # stopped before any work


def test_a_quoted_separator_is_a_value_not_a_field(tmp_path: Path) -> None:
    lines = _lines(10)
    lines[3] = lines[3].replace("NC1=CC(O)=CN1", '"NC1=CC(O)=CN1"')
    (tmp_path / "t.csv").write_text("\n".join([lines[0] + ",note", *[f'{line},"a, b"' for line in lines[1:]]]) + "\n")
    frame = read_table(tmp_path / "t.csv", ["smiles", "note"], ["smiles_column", "targets"]).frame
    assert frame["smiles"][2] == "NC1=CC(O)=CN1" and set(frame["note"]) == {"a, b"}


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_table_that_is_not_utf8_stops_the_run_naming_the_line_and_byte(
    tmp_path: Path, package_log: pytest.LogCaptureFixture, gzipped: bool
) -> None:
    text = "\n".join(_lines()) + "\n"
    data = text.encode().replace(b"OCC1=COC=N1", "OCC1=COC=N1 é".encode("latin-1"))  # line 5, a Latin-1 é
    offset = data.index(b"\xe9")
    table = tmp_path / ("t.csv.gz" if gzipped else "t.csv")
    table.write_bytes(gzip.compress(data) if gzipped else data)
    with pytest.raises(SystemExit) as stop:
        train.main(_train(table, tmp_path))
    assert stop.value.code == 2
    where = " of the decompressed text" if gzipped else ""
    assert [r.getMessage() for r in package_log.records if r.levelname == "ERROR"] == [
        f"{table}: line 5 is not UTF-8 text (byte 0xe9 at byte offset {offset}{where}); save the table as UTF-8 "
        "(a spreadsheet's 'CSV UTF-8')"
    ]


@pytest.mark.slow
def test_a_malformed_table_is_one_error_line_and_exit_code_2_from_train_py(tmp_path: Path) -> None:
    edit, message = MALFORMED_CSV["decimal comma"]
    table = tmp_path / "t.csv"
    table.write_text("\n".join(edit(_lines())) + "\n")
    done = run_train_subprocess(_train(table, tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    assert [line.split("ERROR] ", 1)[1] for line in done.stderr.splitlines() if "ERROR]" in line] == [
        f"{table}: {message}"
    ]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()


def test_a_table_is_read_once_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Link (the classes of a multi-class target), cache key (the SHA-1) and preprocessing share one read."""
    table = tmp_path / "t.csv"
    table.write_text("\n".join(_lines(60)) + "\n")
    opened: list[str] = []
    real_open = io.open

    def counting_open(file, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - io.open's signature
        if str(file) == str(table):
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(builtins, "open", counting_open)
    metrics = train.main(
        _train(
            table,
            tmp_path,
            "--config",
            str(CONFIG_DIR / "smiles_csv_classification.yaml"),
            "--data.source.path",
            str(table),
            "--data.source.targets",
            "[rings]",
            "--data.source.task",
            "multiclass",
            "--data.preprocess_workers",
            "0",
            "--model.encoder.num_layers",
            "1",
            "--trainer.max_steps",
            "2",
            "--trainer.val_check_interval",
            "2",
            "--trainer.enable_progress_bar",
            "false",
        )
    )
    assert metrics["global_step"] == 2 and opened == [str(table)]
