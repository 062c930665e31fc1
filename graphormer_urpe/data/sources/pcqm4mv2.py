"""PCQM4Mv2 (OGB-LSC): HOMO-LUMO gap in eV of 3.75M molecules, read from ogb's on-disk layout without ogb's
dataset classes (they ask ``input()`` questions and ``torch.load`` unsafely). See docs/ogb-lsc.md."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
from ogb.utils.url import download_url, extract_zip

from graphormer_urpe.data.lsc_formats import MODES
from graphormer_urpe.data.lsc_formats import PCQM4MV2 as PCQM4MV2_SUBMISSION
from graphormer_urpe.data.safe_load import load_split_dict
from graphormer_urpe.data.sources.base import missing_files, network_reachable
from graphormer_urpe.data.sources.featurize import molecule_spec
from graphormer_urpe.data.sources.molecules import MoleculeSource, MoleculeTable
from graphormer_urpe.errors import DatasetMissing

log = logging.getLogger(__name__)

#: The release archive, as in ``ogb.lsc.PCQM4Mv2Dataset`` (ogb 1.3.6).
URL = "https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m-v2.zip"
RAW_FILES = ("raw/data.csv.gz", "split_dict.pt")
COLUMNS = ("idx", "smiles", "homolumogap")
SPLITS = ("train", "valid", *MODES)


class PCQM4Mv2(MoleculeSource):
    """PCQM4Mv2 with its official splits, gaps hidden in the test splits; unusable SMILES are skipped and counted
    (test rows among them still get a prediction in a submission)."""

    name = "pcqm4m-v2"
    spec = molecule_spec(["homolumogap"], submission=PCQM4MV2_SUBMISSION)
    published_split_sizes = PCQM4MV2_SUBMISSION.official_sizes

    def ensure_raw(self, root: Path) -> None:
        folder = Path(root) / self.name  # where ogb's release unpacks
        if not (missing := missing_files(folder, RAW_FILES)):
            return
        if not network_reachable(URL):
            raise DatasetMissing(
                f"PCQM4Mv2 files are missing from {folder}: {', '.join(missing)}; the network is not "
                f"reachable to download them. Fetch {URL} and unzip it into {Path(root)} (the archive "
                "holds pcqm4m-v2/raw/data.csv.gz and pcqm4m-v2/split_dict.pt)."
            )
        log.info("downloading PCQM4Mv2 from %s into %s", URL, root)
        archive = Path(download_url(URL, str(root)))
        try:
            extract_zip(str(archive), str(root))
        except zipfile.BadZipFile as error:
            raise DatasetMissing(
                f"{archive} is not a complete zip archive ({error}); it was deleted, run again"
            ) from error
        finally:
            archive.unlink(missing_ok=True)
        if still_missing := missing_files(folder, RAW_FILES):
            raise DatasetMissing(f"{URL} unpacked into {root} but {folder} still lacks {', '.join(still_missing)}")

    def open(self, root: Path) -> MoleculeTable:
        """The SMILES and gaps of every row (empty SMILES cells stay empty strings, not NaN)."""
        path = Path(root) / self.name / "raw" / "data.csv.gz"
        try:
            frame = pd.read_csv(
                path,
                usecols=list(COLUMNS),
                dtype={"idx": np.int64, "smiles": str},
                keep_default_na=False,
                na_values={"homolumogap": ["", "nan", "NaN"]},
            )
        except ValueError as error:
            raise ValueError(f"{path}: expected the columns {', '.join(COLUMNS)} of ogb's release ({error})") from error
        idx = frame["idx"].to_numpy()
        if not np.array_equal(idx, np.arange(len(frame))):
            row = int(np.argmax(idx != np.arange(len(frame))))
            raise ValueError(f"{path}: row {row} has idx {idx[row]}; rows must be stored in idx order 0, 1, 2, ...")
        log.info("PCQM4Mv2: %d molecules read from %s", len(frame), path)
        return MoleculeTable(frame["smiles"].tolist(), frame["homolumogap"].to_numpy(np.float64).reshape(-1, 1))

    def splits(self, root: Path, reader: MoleculeTable) -> dict[str, np.ndarray]:
        """The official splits from ``split_dict.pt``, checked against the table before any work."""
        path = Path(root) / self.name / "split_dict.pt"
        splits = {name: rows for name, rows in load_split_dict(path, SPLITS).items() if name in SPLITS}
        for name, rows in splits.items():
            outside = rows[(rows < 0) | (rows >= reader.num_rows)]
            if outside.size:
                raise ValueError(
                    f"{path}: split '{name}' refers to row {outside[0]}, but data.csv.gz has {reader.num_rows} rows"
                )
            if len(np.unique(rows)) != len(rows):
                raise ValueError(f"{path}: split '{name}' lists {len(rows) - len(np.unique(rows))} rows twice")
            known = np.isfinite(reader.targets[rows, 0])
            unexpected = int(known.sum()) if name in MODES else int((~known).sum())
            if unexpected:
                kind = "have a target although it should be hidden" if name in MODES else "have no target"
                log.warning("PCQM4Mv2: %d rows of split '%s' %s (ogb's release has none)", unexpected, name, kind)
        return splits
