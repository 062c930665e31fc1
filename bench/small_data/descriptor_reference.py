"""Write the descriptors' reference distribution that ships in the package (a maintainer's tool): the quantiles of
every RDKit 2D descriptor over MOSES training molecules, into ``graphormer_urpe/data/sources/rdkit2d_reference.json``
(:mod:`graphormer_urpe.data.sources.descriptors` reads it; its SHA-1 is part of every cache key of descriptors).

    pip install --no-deps molsets==0.3.1 && python bench/small_data/descriptor_reference.py
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import Descriptors

from graphormer_urpe.data.sources.descriptors import REFERENCE_FILE, REFERENCE_QUANTILES, raw_descriptors
from graphormer_urpe.data.sources.featurize import silence_rdkit
from graphormer_urpe.data.sources.pretraining import moses_smiles, moses_smiles_file


def write_reference(molecules: int = 20_000, seed: int = 0, path: Path = REFERENCE_FILE) -> Path:
    """Compute the reference from ``molecules`` MOSES training molecules drawn with ``seed``; write it to ``path``.

    ``python bench/small_data/descriptor_reference.py`` runs this (about 2 minutes on one core)."""
    from tqdm.auto import tqdm

    silence_rdkit()
    smiles = moses_smiles("train")
    rows = np.sort(np.random.default_rng(seed).choice(len(smiles), size=min(molecules, len(smiles)), replace=False))
    names = [name for name, _ in Descriptors.descList]
    raw = np.stack(
        [
            raw_descriptors(Chem.MolFromSmiles(smiles[row]), names)
            for row in tqdm(rows, desc="RDKit descriptors of the reference", unit="molecule")
        ]
    )
    levels = np.linspace(0.0, 1.0, REFERENCE_QUANTILES)
    kept, quantiles = [], []
    for k, name in enumerate(names):
        known = raw[:, k][~np.isnan(raw[:, k])]
        if len(known) < len(rows) // 2:
            continue  # missing for most drug-like molecules: no usable distribution
        row = np.quantile(known, levels)
        kept.append(name)
        quantiles.append([float(f"{value:.7g}") for value in row])
    corpus = moses_smiles_file("train")
    provenance = {
        "corpus": f"MOSES train ({corpus.name} of molsets 0.3.1)",
        "corpus_sha1": hashlib.sha1(corpus.read_bytes()).hexdigest(),
        "molecules": int(len(rows)),
        "seed": seed,
        "rdkit": rdBase.rdkitVersion,
        "dropped": sorted(set(names) - set(kept)),
    }
    path.write_text(json.dumps({"names": kept, "quantiles": quantiles, "provenance": provenance}) + "\n")
    return path


if __name__ == "__main__":
    print(write_reference())
