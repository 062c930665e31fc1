"""``python -m graphormer_urpe.convert``: bad input stops with one ``error:`` line on stderr, exit code 2."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from graphormer_urpe.convert.huggingface import NODE_ROW_SHIFTS, import_huggingface
from graphormer_urpe.convert.official import import_official
from graphormer_urpe.convert.upgrade import upgrade
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.errors import InputError


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="graphormer-urpe convert", description="Convert another Graphormer "
                                   "implementation's checkpoint, or one of our own earlier layout, into ours.")
    formats = main.add_subparsers(dest="format", required=True, metavar="{official,huggingface,upgrade}")
    official = formats.add_parser("official", help="microsoft/Graphormer: v1.0 Lightning .ckpt or v2 fairseq .pt")
    official.add_argument("source", help="the official checkpoint")
    huggingface = formats.add_parser(
        "huggingface", help="transformers' GraphormerForGraphClassification directory"
    )
    huggingface.add_argument(
        "source", help="directory with config.json and model.safetensors or pytorch_model.bin"
    )
    for sub in (official, huggingface):
        sub.add_argument("output", help="our checkpoint to write; its config goes next to it with .yaml")
        sub.add_argument("--node_vocab", type=int, nargs="+", default=list(ATOM_VOCAB),
                         help="values per node-feature column of the data (default: ogb's atom features)")
        sub.add_argument("--edge_vocab", type=int, nargs="+", default=list(BOND_VOCAB),
                         help="values per edge-feature column of the data (default: ogb's bond features)")
        sub.add_argument("--task", choices=["regression", "classification"], default="regression",
                         help="the task the checkpoint will start (regression adds target statistics 0 and 1)")
    official.add_argument(
        "--multi_hop_max_dist", type=int, help="for files that do not store it (default: official 5)"
    )
    official.add_argument("--spatial_pos_max", type=int,
                          help="for files that do not store it, such as v1.0's (default: official 1024)")
    huggingface.add_argument(
        "--spatial_pos_max",
        type=int,
        help="the GraphormerDataCollator argument the model ran "
             "with (default: config.json's, which that collator does not read; its own default is 20)",
    )
    huggingface.add_argument("--node_rows", choices=list(NODE_ROW_SHIFTS), default="transformers",
                             help="node embedding rows of transformers' preprocessing (512 f + v + 3) or of "
                                  "official Graphormer (512 f + v + 2)")
    earlier = formats.add_parser("upgrade", help="our checkpoint written before the task family was merged")
    earlier.add_argument(
        "source", help="the checkpoint in the earlier layout (optimiser arguments outside optim)"
    )
    earlier.add_argument("output", help="the checkpoint to write, in today's layout")
    return main


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    convert = {"official": import_official, "huggingface": import_huggingface, "upgrade": upgrade}[args.format]
    # named as its keywords
    options = {k: v for k, v in vars(args).items() if k not in ("format", "source", "output")}
    try:
        convert(args.source, args.output, **options)
    except InputError as error:  # ConversionError, CheckpointError, or a setting GraphormerConfig refuses
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
