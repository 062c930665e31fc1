"""Self-supervised pretraining for drug-like molecules: predict each molecule's RDKit 2D descriptors from its graph
(as chemprop's CheMeleon does with Mordred descriptors), on the MOSES corpus that the ``molsets`` wheel ships,
optionally with BRICS fragments of its molecules for the small molecules that MOSES leaves out.
See docs/small-data.md."""

from __future__ import annotations

import gzip
import importlib.util
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rdkit import Chem
from rdkit.Chem import BRICS
from tqdm.auto import tqdm

from graphormer_urpe.data.batch import RawGraph
from graphormer_urpe.data.sources.base import seeded_split
from graphormer_urpe.data.sources.descriptors import DESCRIPTOR_SET, descriptor_reference, normalised_descriptors
from graphormer_urpe.data.sources.featurize import molecule_graphs, molecule_spec, silence_rdkit
from graphormer_urpe.data.sources.fingerprints import ECFP_BITS, fingerprint_features, fingerprint_names
from graphormer_urpe.data.sources.molecule_features import to_describe
from graphormer_urpe.data.sources.molecules import MoleculeSource, MoleculeTable
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import ConfigError, DatasetMissing, check_int

log = logging.getLogger(__name__)

#: MOSES's training file: 1,584,663 molecules.
MOSES_TRAIN_SIZE = 1_584_663
#: The source's directory under the data root (:attr:`MosesDescriptors.name`); ``raw/`` in it may hold MOSES's files.
MOSES_DIRECTORY = "moses_descriptors"
#: The name of MOSES's training file, in the wheel and under ``<data root>/moses_descriptors/raw/``.
MOSES_TRAIN_FILE = "train.csv.gz"


def placed_moses_file(root: Path, name: str = "train") -> Path:
    """Where a data root holds a MOSES file for a machine without the ``molsets`` wheel:
    ``<root>/moses_descriptors/raw/<name>.csv.gz``."""
    return Path(root) / MOSES_DIRECTORY / "raw" / f"{name}.csv.gz"


def moses_smiles_file(name: str = "train", root: Path | None = None) -> Path:
    """One file of the MOSES corpus (Polykovskiy et al. 2020: 1,584,663 training and 176,074 test molecules of
    ZINC's clean lead-like set): ``<root>/moses_descriptors/raw/<name>.csv.gz`` when the data root ``root`` holds it
    (a machine without the ``molsets`` wheel, such as the GPU bundle's, docs/gpu.md), else
    ``moses/dataset/data/<name>.csv.gz`` of the installed ``molsets`` wheel, found without importing it."""
    placed = None if root is None else placed_moses_file(root, name)
    if placed is not None and placed.is_file():
        return placed
    spec = importlib.util.find_spec("moses")
    path = None
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "dataset" / "data" / f"{name}.csv.gz"
    if path is None or not path.is_file():
        where = placed or placed_moses_file(Path("<data.root>"), name)
        raise DatasetMissing(
            "the MOSES corpus ships in the PyPI wheel molsets: pip install --no-deps molsets==0.3.1 (it needs none "
            f"of its dependencies here), or place its {name}.csv.gz at {where} (neither that file nor the wheel's "
            f"moses/dataset/data/{name}.csv.gz was found)"
        )
    return path


def moses_smiles(name: str = "train", root: Path | None = None) -> list[str]:
    """The SMILES of one MOSES file (:func:`moses_smiles_file`), in file order (one column, ``SMILES``)."""
    path = moses_smiles_file(name, root)
    with gzip.open(path, "rt") as text:
        header = text.readline().strip()
        if header != "SMILES":
            raise DatasetMissing(f"{path}: expected the header 'SMILES', found {header!r}")
        return [line.strip() for line in text if line.strip()]


def capped_fragment(fragment: Chem.Mol) -> str | None:
    """The canonical SMILES of a BRICS fragment with each attachment point (a dummy atom) replaced by hydrogen, so it
    is a whole molecule (``[4*]CC(=O)c1ccccc1`` -> ``CC(=O)c1ccccc1``); None if RDKit cannot sanitise it."""
    editable = Chem.RWMol(fragment)
    for atom in editable.GetAtoms():
        if atom.GetAtomicNum() == 0:
            atom.SetAtomicNum(1)
            atom.SetIsotope(0)
    try:
        # RemoveHs folds the new hydrogens into their neighbours:
        # an aromatic n that lost its substituent becomes [nH]
        return Chem.MolToSmiles(Chem.RemoveHs(editable.GetMol()))
    except Exception:  # noqa: BLE001 -- RDKit raises several types for a fragment it cannot sanitise; it is skipped
        return None


def brics_fragments(smiles: Sequence[str], count: int, seed: int) -> list[str]:
    """``count`` distinct BRICS fragments (Degen et al. 2008: the molecule cut at its retrosynthetically meaningful
    acyclic bonds, once) of the molecules in ``smiles``, visited in an order drawn with ``seed`` until there are
    enough; each fragment capped with hydrogens (:func:`capped_fragment`). The order of the result is the order of
    discovery, so it is fixed by ``smiles`` and ``seed`` alone. MOSES's fragments have a median of 10 heavy atoms
    (5-15 for 90 %), where its molecules have 22. :class:`ConfigError` if the molecules yield fewer than ``count``."""
    silence_rdkit()  # an unparsable SMILES or a fragment RDKit cannot sanitise is skipped, not printed
    found: dict[str, None] = {}  # an ordered set
    order = np.random.default_rng(seed).permutation(len(smiles))
    with tqdm(total=count, desc="BRICS fragments of MOSES", unit="fragment", mininterval=2.0) as progress:
        for row in order:
            mol = Chem.MolFromSmiles(smiles[row])
            if mol is None:
                continue
            for fragment in Chem.GetMolFrags(BRICS.BreakBRICSBonds(mol), asMols=True):
                capped = capped_fragment(fragment)
                if capped is None or capped in found:
                    continue
                found[capped] = None
                progress.update(1)
                if len(found) == count:
                    return list(found)
    raise ConfigError(
        "data.source.fragments",
        count,
        f"the {len(smiles)} molecules yield only {len(found)} distinct BRICS fragments",
    )


class DescriptorTargets(MoleculeTable):
    """SMILES whose targets are their normalised descriptors that vary over MOSES, and with ``fingerprint_bits`` > 0
    their Morgan count fingerprint folded into that many positions (``log1p`` of each count), computed where the
    graphs are made (in the preprocessing workers, once, then cached with the graphs).

    Shapes: a graph's targets (1, K' + F) float32: K' descriptors in [-1, 1], NaN where one is missing, then F =
    ``fingerprint_bits`` values ``log1p(count)`` >= 0."""

    def __init__(self, smiles: list[str], fingerprint_bits: int = 0) -> None:
        super().__init__(smiles, np.zeros((len(smiles), 0), dtype=np.float32))
        self.fingerprint_bits = fingerprint_bits

    def featurised(self, start: int, stop: int, max_nodes: int | None) -> list[RawGraph | str]:
        informative = descriptor_reference().informative
        width = len(informative) + self.fingerprint_bits
        targets = np.full((stop - start, width), np.nan, dtype=np.float32)
        for k, smiles in enumerate(self.smiles[start:stop]):
            # molecule_graphs gives the others their reason
            if (mol := to_describe(smiles, max_nodes)) is not None:
                targets[k, : len(informative)] = normalised_descriptors(mol)[informative]
                if self.fingerprint_bits:
                    targets[k, len(informative) :] = fingerprint_features(mol, self.fingerprint_bits)
        return molecule_graphs(self.smiles[start:stop], targets)


class MosesDescriptors(MoleculeSource):
    """MOSES molecules (Polykovskiy et al. 2020; drug-like molecules of ZINC, 250-350 Da, 8-27 heavy atoms) with
    their :data:`~graphormer_urpe.data.sources.descriptors.DESCRIPTOR_SET` descriptors that vary over MOSES as
    regression targets, already on one scale (in [-1, 1]: train with ``normalize_targets: false``), optionally
    followed by their Morgan count fingerprint (``fingerprint_targets``). The corpus is
    ``<data.root>/moses_descriptors/raw/train.csv.gz`` where that file exists, else the ``molsets`` wheel's
    (:func:`moses_smiles_file`).

    Args:
        molecules: molecules drawn (with ``seed``) from MOSES's 1,584,663 training molecules; null takes them all.
        valid_fraction: share of the drawn molecules held out to validate, and the same share to test.
        seed: seed of the draw and of the split.
        fragments: distinct BRICS fragments of MOSES molecules (:func:`brics_fragments`, drawn with ``seed``) added
            to the drawn molecules, so the encoder also sees the small molecules (below 250 Da) that most user tables
            hold and MOSES leaves out; 0 (the default) adds none.
        fingerprint_targets: positions of the Morgan count fingerprint (radius 2, as the fingerprint kernel's and
            ``data.source.fingerprints``' ECFP, folded into this many positions) added to the targets as
            ``log1p(count)``, ``ecfp/0`` ... after the descriptors: substructures the descriptors do not name, which
            the fine-tuned readout does not see either; 0 (the default) adds none.
    """

    name = MOSES_DIRECTORY

    def __init__(
        self,
        molecules: int | None = 50_000,
        valid_fraction: float = 0.02,
        seed: int = 0,
        fragments: int = 0,
        fingerprint_targets: int = 0,
    ) -> None:
        check_int("data.source.fragments", fragments, 0, MOSES_TRAIN_SIZE)
        check_int("data.source.fingerprint_targets", fingerprint_targets, 0, ECFP_BITS)
        check_int("data.source.seed", seed, 0)  # numpy's generators take no negative seed
        if molecules is not None:
            check_int("data.source.molecules", molecules, 100, MOSES_TRAIN_SIZE, hint=", or null (every molecule)")
        if not 0.0 < valid_fraction < 0.25:
            raise ConfigError("data.source.valid_fraction", valid_fraction, "must be a share in (0, 0.25), e.g. 0.02")
        self.molecules = molecules
        self.valid_fraction = valid_fraction
        self.seed = seed
        self.fragments = fragments
        self.fingerprint_targets = fingerprint_targets

    @property
    def spec(self) -> DataSpec:
        reference = descriptor_reference()
        descriptors = [reference.names[k] for k in reference.informative]
        return molecule_spec(descriptors + list(fingerprint_names(self.fingerprint_targets)))

    def origin(self) -> str:
        targets = f"{DESCRIPTOR_SET} descriptor"
        if self.fingerprint_targets:
            targets += f" and {self.fingerprint_targets} ECFP count"
        return f"MOSES {MOSES_TRAIN_FILE} ({targets} targets)"

    def options(self) -> dict:
        options = {
            **super().options(),
            "molecules": self.molecules,
            "valid_fraction": self.valid_fraction,
            "seed": self.seed,
            "descriptors": DESCRIPTOR_SET,
            "reference_sha1": descriptor_reference().sha1,
        }
        if self.fragments:  # absent when 0, so the caches of runs without fragments keep their keys
            options["fragments"] = self.fragments
        if self.fingerprint_targets:  # the same
            options["fingerprint_targets"] = self.fingerprint_targets
        return options

    def ensure_raw(self, root: Path) -> None:
        moses_smiles_file("train", root)

    def open(self, root: Path) -> DescriptorTargets:
        corpus = moses_smiles("train", root)
        smiles = corpus
        if self.molecules is not None and self.molecules < len(corpus):
            rows = np.sort(np.random.default_rng(self.seed).choice(len(corpus), size=self.molecules, replace=False))
            smiles = [corpus[row] for row in rows]
        if self.fragments:
            log.info("cutting MOSES molecules into %d distinct BRICS fragments (about 1 ms a molecule)", self.fragments)
            smiles = smiles + brics_fragments(corpus, self.fragments, self.seed)
        return DescriptorTargets(smiles, self.fingerprint_targets)

    def splits(self, root: Path, reader: DescriptorTargets) -> dict[str, np.ndarray]:
        return seeded_split(reader.num_rows, self.seed, (1.0 - 2 * self.valid_fraction, self.valid_fraction))
