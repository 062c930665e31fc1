"""``graphormer-urpe convert``: another implementation's checkpoint, or one of our earlier layout, into ours; and a
pretraining run's checkpoint reduced to the shipped one (docs/official-graphormer.md, docs/small-data.md).

    graphormer-urpe convert official graphormer_v1.ckpt ours.ckpt
    graphormer-urpe convert huggingface clefourrier/graphormer-base-pcqm4mv2/ ours.ckpt
    graphormer-urpe convert upgrade old.ckpt new.ckpt
    graphormer-urpe convert pretrained runs/pretrain_moses-<time>/checkpoints/best-<step>.ckpt --out DIR

``python -m graphormer_urpe.convert`` and ``python -m graphormer_urpe.convert.pretrained`` are the same commands.
Bad input stops with one ``error:`` line, exit code 2 (:mod:`graphormer_urpe.commands.exits`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from graphormer_urpe.convert import pretrained
from graphormer_urpe.convert.__main__ import main as convert_checkpoint


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``pretrained`` to :mod:`graphormer_urpe.convert.pretrained`, the other formats to
    :mod:`graphormer_urpe.convert`'s command; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["pretrained"]:
        return pretrained.main(args[1:])
    return convert_checkpoint(args)
