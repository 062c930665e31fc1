"""Your own molecules: a CSV or Parquet table of SMILES and targets (:class:`SmilesTable`), or of new molecules to
predict (:class:`SmilesToPredict`), read once per run and checked whole before any work. See docs/own-data.md."""

from __future__ import annotations

import array
import codecs
import csv
import difflib
import gzip
import hashlib
import io
import logging
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from rdkit import Chem
from rdkit.Chem.Scaffolds import MurckoScaffold
from tqdm.auto import tqdm

from graphormer_urpe.data.batch import RawGraph
from graphormer_urpe.data.sources.base import seeded_split, split_shares
from graphormer_urpe.data.sources.descriptors import descriptor_reference
from graphormer_urpe.data.sources.featurize import molecule_spec, silence_rdkit
from graphormer_urpe.data.sources.fingerprints import ECFP_BITS
from graphormer_urpe.data.sources.molecule_features import NO_FEATURES, MoleculeFeatures
from graphormer_urpe.data.sources.molecules import MoleculeSource, MoleculeTable
from graphormer_urpe.data.spec import DataSpec, TargetKind
from graphormer_urpe.errors import DataError, DatasetMissing, check_int

log = logging.getLogger(__name__)

SplitMethod = Literal["random", "scaffold", "scaffold_balanced", "column"]

#: Target cells that mean "no value" (compared after stripping blanks, ignoring case).
MISSING_VALUES = frozenset({"", "nan", "na", "n/a", "null", "none"})
#: Accepted spellings in a split column, and the split each one means.
SPLIT_NAMES = {
    "train": "train",
    "training": "train",
    "valid": "valid",
    "val": "valid",
    "validation": "valid",
    "test": "test",
    "testing": "test",
}
#: Rows named in a message (the count is always complete).
SHOWN_ROWS = 10
_PARQUET_SUFFIXES = (".parquet", ".pq")
_CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt")
#: Separators recognised in a CSV header that holds no comma (no tab for ``*.tsv``), in this order.
CSV_SEPARATORS = (";", "\t", ",", "|")


class TableError(DataError):
    """The table cannot be used as configured; the message names the file, column and rows."""


def is_parquet(path: Path) -> bool:
    """Whether ``path`` names a Parquet file (by its suffix); CSV otherwise."""
    return path.name.lower().endswith(_PARQUET_SUFFIXES)


def describe_rows(rows: Sequence[int], lines: np.ndarray | None = None) -> str:
    """``rows 3, 17 (lines 5, 19)`` for the first :data:`SHOWN_ROWS` of ``rows``, with their ``lines`` in the file
    (CSV files: :attr:`TableRead.lines`)."""
    shown = [int(r) for r in rows[:SHOWN_ROWS]]
    more = f" and {len(rows) - SHOWN_ROWS} more" if len(rows) > SHOWN_ROWS else ""
    text = f"row{'s' if len(rows) > 1 else ''} {', '.join(map(str, shown))}{more}"
    if lines is not None:
        text += f" (line{'s' if len(shown) > 1 else ''} {', '.join(str(lines[r]) for r in shown)})"
    return text


@dataclass(frozen=True)
class TableRead:
    """One read of a table: the SHA-1 of its bytes as stored (the cache key), the requested columns parsed from
    the same bytes (CSV cells as text, Parquet columns in their own types) and, for CSV files, the line on which each
    row starts (1 is the first line of the file; blank lines and a value holding a line break make rows and lines
    differ)."""

    path: Path
    sha1: str
    frame: pd.DataFrame
    lines: np.ndarray | None

    def describe_rows(self, rows: Sequence[int]) -> str:
        """:func:`describe_rows` with this table's lines."""
        return describe_rows(rows, self.lines)


def read_table(
    path: Path,
    columns: Sequence[str],
    what: Sequence[str],
    blank_lines: Literal["skip", "keep"] = "skip",
    every_column: bool = False,
) -> TableRead:
    """Read a CSV or Parquet table once: hash its bytes and parse ``columns`` (named by the config keys ``what``),
    with ``every_column`` the others too; :class:`TableError` for any problem of the file as a whole. A blank line of a
    CSV file (nothing, or spaces and tabs, after the header) is skipped and counted, or with ``blank_lines="keep"`` is
    a row of empty cells."""
    if not is_parquet(path) and not path.name.lower().endswith(_CSV_SUFFIXES):
        raise TableError(f"{path}: unknown table type; name it *.csv, *.csv.gz, *.tsv or *.parquet")
    data = path.read_bytes()
    if not data:
        raise TableError(f"{path}: the file is empty")
    sha1 = hashlib.sha1(data).hexdigest()
    if is_parquet(path):
        import pyarrow.parquet as pq

        _check_columns(path, list(pq.read_schema(io.BytesIO(data)).names), columns, what, None)
        frame = pd.read_parquet(io.BytesIO(data), columns=None if every_column else list(dict.fromkeys(columns)))
        lines = None
    else:  # every cell as text
        text = csv_bytes(path, data)
        header_line = next((line for line in io.BytesIO(text) if line.strip(_BLANK)), b"").decode()
        if not header_line:
            raise TableError(f"{path}: the file is empty")
        sep = csv_separator(path, header_line)
        # as written: pandas renames a repeated name 'x.1'
        header = (
            pd.read_csv(
                io.BytesIO(text), sep=sep, header=None, nrows=1, dtype=str, keep_default_na=False, encoding="utf-8"
            )
            .iloc[0]
            .tolist()
        )
        _check_columns(path, header, columns, what, sep)
        records = _records(path, text, sep)
        keep = blank_lines == "keep"
        # pandas skips the same blank lines (and, kept, reads
        # each as a row): the lines before the header are skipped
        frame = pd.read_csv(
            io.BytesIO(text),
            sep=sep,
            usecols=None if every_column else list(dict.fromkeys(columns)),
            dtype=str,
            keep_default_na=False,
            encoding="utf-8",
            skip_blank_lines=not keep,
            skiprows=records.header_line - 1,
        )
        every_line = np.frombuffer(records.lines, dtype=np.int64)  # (R,) with the blank records
        blank = np.frombuffer(records.blank, dtype=np.uint8).astype(bool)  # (R,)
        lines = every_line if keep else every_line[~blank]
        if len(lines) != len(frame):  # a parsing pandas and csv do differently: name rows only
            log.warning("%s: %d rows but %d records; messages name rows, not lines", path, len(frame), len(lines))
            lines = None
        if not keep and blank.any():
            log.info("%s: %d blank line(s) skipped (%s)", path, int(blank.sum()), _shown_lines(every_line[blank]))
    if frame.empty:
        raise TableError(f"{path}: the file has a header but no data rows")
    return TableRead(path, sha1, frame, lines)


def _shown_lines(lines: Sequence[int]) -> str:
    """``lines 3, 9`` for the first :data:`SHOWN_ROWS` of ``lines``."""
    more = f" and {len(lines) - SHOWN_ROWS} more" if len(lines) > SHOWN_ROWS else ""
    return f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines[:SHOWN_ROWS]))}{more}"


def _check_columns(
    path: Path, header: Sequence[str], columns: Sequence[str], what: Sequence[str], sep: str | None
) -> None:
    """Raise :class:`TableError` naming the first of ``columns`` that ``header`` lacks or holds more than once."""
    for column, key in zip(columns, what):
        if header.count(column) > 1:
            places = ", ".join(str(k + 1) for k, name in enumerate(header) if name == column)
            raise TableError(
                f"{path}: the header names {header.count(column)} columns '{column}' ({key}), columns "
                f"{places}; rename or remove all but one"
            )
        if column not in header:
            lower = {name.lower(): name for name in header}
            close = difflib.get_close_matches(column.lower(), list(lower), n=1)
            hint = f"; did you mean '{lower[close[0]]}'?" if close else "."
            read_as = f" (read with the separator {sep!r})" if sep is not None else ""
            raise TableError(
                f"{path}: no column '{column}' ({key}){hint} The file's columns are: {', '.join(header)}{read_as}"
            )


def csv_bytes(path: Path, data: bytes) -> bytes:
    """A CSV file's text (decompressed for ``*.gz``), checked to be UTF-8, a leading byte-order mark dropped."""
    where = ""
    if path.name.lower().endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as error:
            raise TableError(f"{path}: not a complete gzip file ({error})") from None
        where = " of the decompressed text"
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        data[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        offset = start + error.start
        line = data.count(b"\n", 0, offset) + 1
        raise TableError(
            f"{path}: line {line} is not UTF-8 text (byte 0x{data[offset]:02x} at byte offset "
            f"{offset}{where}); save the table as UTF-8 (a spreadsheet's 'CSV UTF-8')"
        ) from None
    return data[start:]


def csv_separator(path: Path, header_line: str) -> str:
    """A tab for ``*.tsv`` files and a comma otherwise, unless the header holds none but another of
    :data:`CSV_SEPARATORS` (a spreadsheet's ``;`` export): then that one, logged."""
    usual = "\t" if ".tsv" in path.name.lower() else ","
    found = [other for other in CSV_SEPARATORS if other != usual and other in header_line]
    if usual in header_line or not found:
        return usual
    log.info("%s: columns separated by %r (not %r): read with that separator", path, found[0], usual)
    return found[0]


#: What a blank line holds besides its line break (pandas skips such lines).
_BLANK = b" \t\r\n"


@dataclass(frozen=True)
class CsvRecords:
    """Where the records of a CSV file start: the header's line, and each later record's first line and whether it
    is blank (no field, or one unquoted field of spaces and tabs)."""

    header_line: int
    lines: array.array  # of int64
    blank: bytearray  # 1 for a blank record


def _records(path: Path, text: bytes, sep: str) -> CsvRecords:
    """The records of a CSV file, tokenised as the parser does (a quoted separator or line break is part of a
    value); refuses a record (blank ones aside) whose number of fields differs from the header's, which a parser
    would shift into other columns."""
    last = [""]  # the last line the reader took, as in the file

    def read_lines() -> Iterator[str]:
        for text_line in io.StringIO(text.decode("utf-8"), newline=""):
            last[0] = text_line
            yield text_line

    reader = csv.reader(read_lines(), delimiter=sep)
    header_line, expected, line = 0, 0, 1
    lines, blanks = array.array("q"), bytearray()
    for record in reader:
        one_line = reader.line_num == line
        blank = not record or (len(record) == 1 and one_line and not last[0].strip(_BLANK.decode()))
        if not blank and not header_line:
            header_line, expected = line, len(record)
        elif header_line:
            if not blank and len(record) != expected:
                hint = (
                    f": a value holding the separator {sep!r} (a decimal comma?) must be quoted"
                    if len(record) > expected
                    else ""
                )
                raise TableError(
                    f"{path}: line {line} has {len(record)} fields, the header (line {header_line}) has "
                    f"{expected}{hint}"
                )
            lines.append(line)
            blanks.append(blank)
        line = reader.line_num + 1
    return CsvRecords(header_line, lines, blanks)


#: The largest magnitude a target may have: the cache stores targets as float32.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def cell_text(value: object) -> str:
    """A cell as a stripped string (a missing Parquet value becomes an empty string)."""
    return "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value).strip()


def smiles_cells(table: TableRead, column: str) -> list[str]:
    """The cells of the SMILES ``column``, stripped (:func:`cell_text`), in file order."""
    return [cell_text(value) for value in table.frame[column].tolist()]


def whitespace_inside(smiles: str) -> str | None:
    """Why a SMILES with whitespace inside is not used, None for one without: RDKit reads the part before the
    whitespace as the molecule and the rest as its name (``'CCO<tab>CC'`` would be ethanol)."""
    if not any(char.isspace() for char in smiles):
        return None
    return f"whitespace inside the SMILES {smiles!r} (RDKit would read only {smiles.split()[0]!r})"


def check_smiles(table: TableRead, column: str) -> None:
    """Refuse SMILES cells with whitespace inside (:func:`whitespace_inside`), naming their rows."""
    smiles = smiles_cells(table, column)
    spaced = [row for row, text in enumerate(smiles) if whitespace_inside(text)]
    if spaced:
        raise TableError(
            f"{table.path}: column '{column}' has {len(spaced)} SMILES with whitespace inside, at "
            f"{table.describe_rows(spaced)}: {', '.join(repr(smiles[r]) for r in spaced[:3])}; RDKit "
            "would read only the part before the whitespace: correct these cells (or the separator)"
        )


def numeric_column(table: TableRead, column: str) -> np.ndarray:
    """A target column as float64 with NaN for missing cells; :class:`TableError` for a cell that is not a number
    within float32's range, empty or a missing-value word."""
    values = table.frame[column]
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
        numbers = values.astype(np.float64).to_numpy()
        bad = np.flatnonzero(np.abs(numbers) > FLOAT32_MAX)
    else:
        text = values.map(cell_text)
        missing = text.str.lower().isin(MISSING_VALUES).to_numpy()
        numbers = pd.to_numeric(text.where(~missing, None), errors="coerce").to_numpy(np.float64)
        bad = np.flatnonzero((~missing & np.isnan(numbers)) | (np.abs(numbers) > FLOAT32_MAX))
    if len(bad):
        raise TableError(
            f"{table.path}: column '{column}' holds {len(bad)} value(s) that are not finite numbers "
            f"within float32's range (|x| <= {FLOAT32_MAX:.4g}), at {table.describe_rows(bad)}: "
            f"{', '.join(repr(values.iloc[r]) for r in bad[:3])}; leave a cell empty for a missing value"
        )
    return numbers


def check_labels(values: np.ndarray, column: str, table: TableRead, task: TargetKind, num_classes: int | None) -> int:
    """The number of classes of a classification target (2 for binary), its labels checked."""
    path = table.path
    known = ~np.isnan(values)
    if task == "binary":
        bad = np.flatnonzero(known & (values != 0) & (values != 1))
        rule = "0 or 1 (data.source.task: binary)"
    else:
        limit = np.inf if num_classes is None else num_classes
        bad = np.flatnonzero(known & ((values < 0) | (values != np.round(values)) | (values >= limit)))
        rule = (
            "a class id 0, 1, 2 ... (data.source.task: multiclass)"
            if num_classes is None
            else f"a class id in 0..{num_classes - 1} (data.source.num_classes: {num_classes})"
        )
    if len(bad):
        raise TableError(
            f"{path}: column '{column}' has {len(bad)} label(s) that are not {rule}, at "
            f"{table.describe_rows(bad)}: {', '.join(f'{values[r]:g}' for r in bad[:3])}"
        )
    if task == "binary":
        return 2
    if num_classes is not None:
        classes = num_classes
    else:
        classes = int(np.nanmax(values)) + 1 if known.any() else 0
    if classes < 2:
        raise TableError(f"{path}: column '{column}' has {classes} class(es); multi-class targets need at least 2")
    return classes


def scaffold_groups(smiles: Sequence[str]) -> tuple[list[list[int]], list[int]]:
    """The rows of each Bemis-Murcko scaffold (in order of first appearance, rows ascending) and the rows RDKit
    cannot parse."""
    silence_rdkit()
    groups: dict[str, list[int]] = {}
    unparsed: list[int] = []
    for row, text in enumerate(
        tqdm(smiles, desc="Bemis-Murcko scaffolds", unit="molecule", mininterval=2.0, disable=len(smiles) < 50_000)
    ):
        mol = Chem.MolFromSmiles(text) if text else None
        if mol is None:
            unparsed.append(row)
            continue
        groups.setdefault(MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False), []).append(row)
    return list(groups.values()), unparsed


def fill_splits(
    groups: Sequence[list[int]], fractions: Sequence[float], total: int, train: list[int]
) -> dict[str, np.ndarray]:
    """Whole groups, in the given order, into ``train`` (already holding ``train``'s rows) while it stays within
    its share of ``total`` rows, else into ``valid`` while train and valid stay within theirs, else ``test``."""
    parts: dict[str, list[int]] = {"train": list(train), "valid": [], "test": []}
    train_cutoff = fractions[0] * total
    valid_cutoff = (fractions[0] + fractions[1]) * total
    for rows in groups:
        if len(parts["train"]) + len(rows) <= train_cutoff:
            parts["train"] += rows
        elif len(parts["train"]) + len(parts["valid"]) + len(rows) <= valid_cutoff:
            parts["valid"] += rows
        else:
            parts["test"] += rows
    return {name: np.sort(np.asarray(rows, dtype=np.int64)) for name, rows in parts.items()}


def scaffold_split(smiles: Sequence[str], fractions: Sequence[float]) -> tuple[dict[str, np.ndarray], int]:
    """Deterministic Bemis-Murcko scaffold split as DeepChem's ``ScaffoldSplitter`` (rule in docs/own-data.md; of
    groups of equal size, the one whose first row is later comes first): sorted rows of ``train``, ``valid``,
    ``test``, and the number of distinct scaffolds. Unparsable rows join ``train``, where they are skipped."""
    groups, unparsed = scaffold_groups(smiles)
    ordered = sorted(groups, key=lambda rows: (len(rows), rows[0]), reverse=True)
    return fill_splits(ordered, fractions, len(smiles), unparsed), len(groups)


def balanced_scaffold_split(
    smiles: Sequence[str], fractions: Sequence[float], seed: int
) -> tuple[dict[str, np.ndarray], int]:
    """A seeded Bemis-Murcko scaffold split, chemprop's ``scaffold_balanced`` rule: the scaffolds too big for half
    of the validation or test share come first, in a random order, then all the others in a random order; whole
    scaffolds then fill train, valid and test as in :func:`scaffold_split`. Another seed, another split with the
    same guarantee (no scaffold in two splits): what measures how much a result owes to one split."""
    groups, unparsed = scaffold_groups(smiles)
    rng = np.random.default_rng(seed)
    half_share = min(fractions[1], fractions[2]) * len(smiles) / 2  # too big for half of valid's or test's share
    big = [rows for rows in groups if len(rows) > half_share]
    small = [rows for rows in groups if len(rows) <= half_share]
    ordered = [big[k] for k in rng.permutation(len(big))] + [small[k] for k in rng.permutation(len(small))]
    return fill_splits(ordered, fractions, len(smiles), unparsed), len(groups)


def feature_columns(table: TableRead, features: MoleculeFeatures) -> np.ndarray:
    """The table's feature columns as (R, C) float64, NaN for an empty cell; :class:`TableError` naming the rows
    (and lines) of a cell that is not a number within float32's range."""
    if not features.columns:
        return np.zeros((len(table.frame), 0))
    return np.stack([numeric_column(table, name) for name in features.columns], axis=1)


def describe_features(features: MoleculeFeatures) -> str:
    """``rdkit2d descriptors (217) + ecfp fingerprints (2048) + columns logP, mw`` for a log line."""
    parts = []
    if features.descriptors:
        parts.append(f"{features.descriptors} descriptors ({len(descriptor_reference().names)})")
    if features.fingerprints:
        parts.append(f"{features.fingerprints} fingerprints ({ECFP_BITS})")
    if features.columns:
        parts.append(f"columns {', '.join(features.columns)}")
    return " + ".join(parts)


class SmilesRows(MoleculeTable):
    """A :class:`MoleculeTable` that skips the rows in ``rejected`` (row -> reason) and carries its ``splits``."""

    def __init__(
        self,
        smiles: Sequence[object],
        targets: np.ndarray,
        rejected: dict[int, str],
        splits: dict[str, np.ndarray],
        features: MoleculeFeatures = NO_FEATURES,
        columns: np.ndarray | None = None,
    ) -> None:
        super().__init__(smiles, targets, features, columns)
        self.rejected, self.splits = rejected, splits

    def graphs(self, start: int, stop: int, max_nodes: int | None = None) -> Iterator[tuple[int, RawGraph | str]]:
        for row, graph in super().graphs(start, stop, max_nodes):
            yield row, self.rejected.get(row, graph)


class SmilesTable(MoleculeSource):
    """A CSV or Parquet table of SMILES and targets: regression, binary labels or one multi-class label.

    Args:
        path: ``*.csv``, ``*.csv.gz``, ``*.tsv`` or ``*.parquet`` (relative to the directory you run from).
        targets: target columns, learned together; an empty cell (``nan``, ``NA``, ``null``, ``none``) is missing.
        smiles_column: name of the SMILES column.
        task: ``regression`` (``GraphRegression``), ``binary`` (0 or 1) or ``multiclass`` (one column of class ids).
        num_classes: classes of a multi-class target; None takes the largest label + 1.
        split: ``random`` (seeded), ``scaffold`` (Bemis-Murcko), ``scaffold_balanced`` (Bemis-Murcko, seeded: one
            split of many, chemprop's rule) or ``column`` (written in ``split_column``).
        split_column: each row's split (``train``, ``valid``/``val``, ``test`` ...) for ``split: column``.
        split_fractions: train, valid and test shares for ``random``, ``scaffold`` and ``scaffold_balanced``.
        seed: seed of the ``random`` and ``scaffold_balanced`` splits.
        duplicate_smiles: ``error`` stops listing the repeated SMILES; ``keep_first`` skips all but the first row.
        descriptors: ``rdkit2d``: RDKit's 2D descriptors of each molecule as model inputs (molecule-level features,
            entering through the graph token; docs/own-data.md); null: none.
        feature_columns: numeric columns of the table given to the model as molecule-level features, standardised
            with the training split's mean and std (an empty cell is missing, read as the mean).
        fingerprints: ``ecfp``: each molecule's Morgan count fingerprint (radius 2, 2,048 positions, ``log1p`` of
            the counts) as molecule-level features beside the descriptors; null: none.
    """

    def __init__(
        self,
        path: str,
        targets: Sequence[str],
        smiles_column: str = "smiles",
        task: TargetKind = "regression",
        num_classes: int | None = None,
        split: SplitMethod = "random",
        split_column: str = "split",
        split_fractions: Sequence[float] = (0.8, 0.1, 0.1),
        seed: int = 0,
        duplicate_smiles: Literal["error", "keep_first"] = "error",
        descriptors: Literal["rdkit2d"] | None = None,
        feature_columns: Sequence[str] = (),
        fingerprints: Literal["ecfp"] | None = None,
    ) -> None:
        self.path = Path(path)
        self.targets = list(targets)
        self.smiles_column = smiles_column
        self.features = MoleculeFeatures(descriptors, tuple(feature_columns), fingerprints)
        self.task = task
        self.num_classes = num_classes
        self.duplicate_smiles = duplicate_smiles
        check_int("data.source.seed", seed, 0)  # numpy's generators take no negative seed
        self.seed = seed
        self.split = split
        self.split_column = split_column
        self.split_fractions = split_shares(split_fractions)
        if not self.targets:
            raise TableError(f"{self.path}: name at least one target column (data.source.targets)")
        if len(set(self.targets)) != len(self.targets):
            raise TableError(f"{self.path}: a target column is named twice in data.source.targets {self.targets}")
        if task not in ("regression", "binary", "multiclass"):
            raise TableError(f"data.source.task: {task!r}; expected regression, binary or multiclass")
        if task == "multiclass" and len(self.targets) != 1:
            raise TableError(f"{self.path}: a multi-class task has one target column, got {self.targets}")
        if both := sorted(set(self.features.columns) & {*self.targets, smiles_column}):
            raise TableError(
                f"{self.path}: column(s) {both} are both a feature column (data.source.feature_columns) "
                "and the SMILES or a target; a target given as input would be learned by copying it"
            )
        self.name = f"smiles_{self.path.name.split('.')[0]}"

    @cached_property
    def table(self) -> TableRead:
        """The configured columns and the SHA-1 of the file, from its one read."""
        self.ensure_raw(Path("."))
        columns = [self.smiles_column, *self.targets]
        keys = ["data.source.smiles_column", *["data.source.targets"] * len(self.targets)]
        if self.split == "column":
            columns.append(self.split_column)
            keys.append("data.source.split_column")
        columns += self.features.columns
        keys += ["data.source.feature_columns"] * len(self.features.columns)
        return read_table(self.path, columns, keys)

    @cached_property
    def spec(self) -> DataSpec:
        """Molecules with the configured targets, checked against the table (read here, before any work): its SMILES
        cells, and the labels of a multi-class target."""
        check_smiles(self.table, self.smiles_column)
        classes = None
        if self.task == "multiclass":
            labels = numeric_column(self.table, self.targets[0])
            classes = check_labels(labels, self.targets[0], self.table, self.task, self.num_classes)
        return molecule_spec(self.targets, self.task, classes, molecule_features=self.features.names)

    def origin(self) -> str:
        return f"{self.path} (SMILES column '{self.smiles_column}')"

    def options(self) -> dict:
        return {
            **super().options(),
            "sha1": self.table.sha1,
            "smiles_column": self.smiles_column,
            "targets": self.targets,
            "task": self.task,
            "num_classes": self.num_classes,
            "split": self.split,
            "split_column": self.split_column if self.split == "column" else None,
            "split_fractions": self.split_fractions if self.split != "column" else None,
            "seed": self.seed if self.split in ("random", "scaffold_balanced") else None,
            "duplicate_smiles": self.duplicate_smiles,
            **self.features.options(),
        }

    def ensure_raw(self, root: Path) -> None:
        if not self.path.is_file():
            raise DatasetMissing(
                f"the table {self.path} does not exist (data.source.path; a relative path is "
                f"relative to the directory you run from, {Path.cwd()})"
            )

    def open(self, root: Path) -> SmilesRows:
        """Check the whole table (read once, by :attr:`table`) and split it."""
        frame = self.table.frame
        smiles = smiles_cells(self.table, self.smiles_column)
        targets = np.stack([numeric_column(self.table, name) for name in self.targets], axis=1)
        columns = feature_columns(self.table, self.features)
        for k, name in enumerate(self.targets):
            if not np.isfinite(targets[:, k]).any():
                raise TableError(f"{self.path}: target column '{name}' has no value in any of its {len(frame)} rows")
            if self.task != "regression":
                check_labels(targets[:, k], name, self.table, self.task, self.num_classes)
        rejected = self._duplicates(smiles)
        splits = self._splits(frame, smiles)
        self._check_training_targets(targets, splits["train"], rejected)
        empty = [row for row, text in enumerate(smiles) if not text]
        if empty:
            log.warning(
                "%s: %d empty SMILES cell(s) (molecules without atoms) at %s; these rows are skipped",
                self.origin(),
                len(empty),
                self.table.describe_rows(empty),
            )
        log.info(
            "%s: %d rows, targets %s (%s); split %s: %s",
            self.origin(),
            len(frame),
            ", ".join(self.targets),
            self.task,
            self.split,
            ", ".join(f"{k} {len(v):,}" for k, v in splits.items()),
        )
        if self.features.names:
            log.info(
                "%s: %d molecule-level features (%s)",
                self.origin(),
                len(self.features.names),
                describe_features(self.features),
            )
        return SmilesRows(smiles, targets, rejected, splits, self.features, columns)

    def splits(self, root: Path, reader: SmilesRows) -> dict[str, np.ndarray]:
        return reader.splits

    def _duplicates(self, smiles: list[str]) -> dict[int, str]:
        """Rows repeating an earlier row's SMILES (exact strings): an error, or skipped with ``keep_first``."""
        codes, _ = pd.factorize(np.asarray(smiles, dtype=object))
        _, first_index = np.unique(codes, return_index=True)
        first_row = first_index[codes]  # (R,) first row with the same SMILES
        rows = np.flatnonzero((first_row != np.arange(len(smiles))) & (np.asarray(smiles, dtype=object) != ""))
        if not len(rows):
            return {}
        if self.duplicate_smiles == "error":
            repeated = list(dict.fromkeys(codes[rows]))
            listed = [
                f"'{smiles[first_index[code]]}' at {self.table.describe_rows(np.flatnonzero(codes == code))}"
                for code in repeated[:3]
            ]
            raise TableError(
                f"{self.path}: column '{self.smiles_column}' has {len(rows)} duplicated SMILES "
                f"({'; '.join(listed)}{'; ...' if len(repeated) > 3 else ''}); duplicates can fall into "
                "different splits and leak test molecules into training. Remove them, or set data.source."
                "duplicate_smiles: keep_first to keep the first row of each and skip the others"
            )
        log.warning(
            "%s: %d rows repeat the SMILES of an earlier row (%s) and are skipped (duplicate_smiles: keep_first)",
            self.origin(),
            len(rows),
            self.table.describe_rows(rows),
        )
        return {int(row): f"duplicate of row {int(first_row[row])}" for row in rows}

    def _splits(self, frame: pd.DataFrame, smiles: list[str]) -> dict[str, np.ndarray]:
        """Rows of each split, by the configured method; train and valid must not be empty."""
        if self.split == "random":
            splits = seeded_split(len(smiles), self.seed, self.split_fractions[:2])
        elif self.split == "scaffold":
            splits, scaffolds = scaffold_split(smiles, self.split_fractions)
            log.info("%s: %d Bemis-Murcko scaffolds", self.origin(), scaffolds)
        elif self.split == "scaffold_balanced":
            splits, scaffolds = balanced_scaffold_split(smiles, self.split_fractions, self.seed)
            log.info("%s: %d Bemis-Murcko scaffolds, balanced split of seed %d", self.origin(), scaffolds, self.seed)
        elif self.split == "column":
            names = frame[self.split_column].map(lambda v: SPLIT_NAMES.get(str(v).strip().lower(), "")).to_numpy()
            unknown = np.flatnonzero(names == "")
            if len(unknown):
                values = sorted({str(frame[self.split_column].iloc[r]) for r in unknown})[:5]
                raise TableError(
                    f"{self.path}: column '{self.split_column}' (data.source.split_column) has "
                    f"{len(unknown)} value(s) that name no split, at {self.table.describe_rows(unknown)}: "
                    f"{values}; use train, valid or test"
                )
            splits = {name: np.flatnonzero(names == name) for name in ("train", "valid", "test")}
            splits = {name: rows for name, rows in splits.items() if name != "test" or len(rows)}
        else:
            raise TableError(
                f"data.source.split: {self.split!r}; expected random, scaffold, scaffold_balanced or column"
            )
        for name in ("train", "valid"):
            if not len(splits[name]):
                raise TableError(
                    f"{self.path}: the {self.split} split leaves no row in '{name}' "
                    f"({len(smiles)} rows); use more rows or other split_fractions"
                )
        return splits

    def _check_training_targets(self, targets: np.ndarray, train: np.ndarray, rejected: dict[int, str]) -> None:
        """Every target needs a value in the training split; a binary one should see both labels."""
        usable = train[~np.isin(train, list(rejected))]
        for k, name in enumerate(self.targets):
            values = targets[usable, k]
            values = values[np.isfinite(values)]
            if not len(values):
                raise TableError(
                    f"{self.path}: target '{name}' has no value in the training split, so it cannot "
                    "be learned; check the column or the split"
                )
            if self.task == "binary" and len(np.unique(values)) < 2:
                log.warning("%s: target '%s' has only label %g in the training split", self.origin(), name, values[0])


class SmilesToPredict(MoleculeSource):
    """New molecules to predict: one SMILES column, every row (duplicates and blank lines too) in the split
    ``predict``, in file order; rows that cannot be featurised, or whose SMILES holds whitespace, are reported
    (``graphormer-urpe predict`` writes the reason). A model trained with molecule-level features gets them again:
    ``descriptors`` computed from the SMILES, the ``feature_columns`` read from this table (each must be one of
    its columns). The table's one read keeps every column (``predict`` writes them back beside the predictions)."""

    def __init__(
        self,
        path: str,
        smiles_column: str = "smiles",
        descriptors: Literal["rdkit2d"] | None = None,
        feature_columns: Sequence[str] = (),
        fingerprints: Literal["ecfp"] | None = None,
    ) -> None:
        self.path, self.smiles_column = Path(path), smiles_column
        self.features = MoleculeFeatures(descriptors, tuple(feature_columns), fingerprints)
        self.name = f"predict_{self.path.name.split('.')[0]}"

    @cached_property
    def spec(self) -> DataSpec:
        """Molecules without targets, with the model's molecule-level features."""
        return molecule_spec([], molecule_features=self.features.names)

    @cached_property
    def table(self) -> TableRead:
        """The SMILES and feature columns and the SHA-1 of the file, from its one read."""
        self.ensure_raw(Path("."))
        trained_with = (
            f"a feature column the model was trained with: data.source.feature_columns {list(self.features.columns)}"
        )
        return read_table(
            self.path,
            [self.smiles_column, *self.features.columns],
            ["--smiles_column", *[trained_with] * len(self.features.columns)],
            blank_lines="keep",
            every_column=True,
        )

    def smiles(self) -> list[str]:
        """The SMILES of every row, stripped, in file order (a blank line's is empty)."""
        return smiles_cells(self.table, self.smiles_column)

    def origin(self) -> str:
        return f"{self.path} (SMILES column '{self.smiles_column}')"

    def options(self) -> dict:
        return {
            **super().options(),
            "sha1": self.table.sha1,
            "smiles_column": self.smiles_column,
            **self.features.options(),
        }

    def ensure_raw(self, root: Path) -> None:
        if not self.path.is_file():
            raise DatasetMissing(f"the table to predict, {self.path}, does not exist")

    def open(self, root: Path) -> SmilesRows:
        smiles = self.smiles()
        spaced = {row: reason for row, text in enumerate(smiles) if (reason := whitespace_inside(text)) is not None}
        columns = feature_columns(self.table, self.features)
        return SmilesRows(
            smiles,
            np.zeros((len(smiles), 0), dtype=np.float32),
            spaced,
            {"predict": np.arange(len(smiles))},
            self.features,
            columns,
        )

    def splits(self, root: Path, reader: SmilesRows) -> dict[str, np.ndarray]:
        return reader.splits
