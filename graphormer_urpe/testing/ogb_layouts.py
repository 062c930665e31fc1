"""OGB on-disk layouts for tests: files as the real releases hold them, generated small."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

NUMPY2_MULTIARRAY = b"cnumpy._core.multiarray\n"
NUMPY1_MULTIARRAY = b"cnumpy.core.multiarray\n"


def torch_save_as_numpy1(obj: object, path: Path) -> None:
    """``torch.save`` ``obj`` naming numpy globals as numpy 1.x does (``numpy.core.multiarray``), as the official
    OGB-LSC ``split_dict.pt`` files do: numpy 2's module name is rewritten in the pickle (protocol 2, GLOBAL opcodes,
    newline-terminated names) and the zip container rebuilt around it."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("/data.pkl"):
                if NUMPY2_MULTIARRAY not in data:
                    raise RuntimeError("torch.save wrote no numpy._core.multiarray global to rewrite")
                data = data.replace(NUMPY2_MULTIARRAY, NUMPY1_MULTIARRAY)
            target.writestr(info, data)


def write_pcqm4mv2(root: Path, smiles: Sequence[str], gaps: np.ndarray, splits: dict[str, np.ndarray]) -> Path:
    """``root/pcqm4m-v2`` as ogb's release: ``raw/data.csv.gz`` (``idx,smiles,homolumogap``) and ``split_dict.pt``."""
    folder = root / "pcqm4m-v2"
    (folder / "raw").mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame({"idx": np.arange(len(smiles)), "smiles": list(smiles), "homolumogap": gaps})
    frame.to_csv(folder / "raw" / "data.csv.gz", index=False)
    torch_save_as_numpy1(
        {name: np.asarray(rows, dtype=np.int64) for name, rows in splits.items()}, folder / "split_dict.pt"
    )
    return folder
