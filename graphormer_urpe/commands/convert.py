"""``graphormer-urpe convert``: another implementation's checkpoint, or one of our earlier layout, into ours; and a
pretraining run's checkpoint reduced to the shipped one (docs/official-graphormer.md, docs/small-data.md).

    graphormer-urpe convert official graphormer_v1.ckpt ours.ckpt
    graphormer-urpe convert huggingface clefourrier/graphormer-base-pcqm4mv2/ ours.ckpt
    graphormer-urpe convert upgrade old.ckpt new.ckpt
    graphormer-urpe convert pretrained runs/pretrain_moses-<time>/checkpoints/best-<step>.ckpt --out DIR

The formats: ``official`` (microsoft/Graphormer v1.0 or v2, :mod:`graphormer_urpe.convert.official`),
``huggingface`` (transformers' Graphormer, :mod:`graphormer_urpe.convert.huggingface`), ``upgrade`` (our own, written
before the task family was merged, :mod:`graphormer_urpe.convert.upgrade`) and ``pretrained`` (a
``graphormer-urpe train --config pretrain_moses`` checkpoint as the package's shipped one, with its provenance,
:mod:`graphormer_urpe.convert.pretrained`). Each checks its source, then its outputs, before it writes anything;
nothing is overwritten (``pretrained --replace`` writes over the shipped files). Exit codes:
:mod:`graphormer_urpe.commands.exits`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphormer_urpe.commands.command import Command
from graphormer_urpe.convert.huggingface import NODE_ROW_SHIFTS, import_huggingface
from graphormer_urpe.convert.official import import_official
from graphormer_urpe.convert.pretrained import export
from graphormer_urpe.convert.upgrade import upgrade
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.pretrained import CHECKPOINT, PROVENANCE
from graphormer_urpe.run.cli import log

#: Each format: what it converts (its help line).
FORMATS = {
    "official": "microsoft/Graphormer: v1.0 Lightning .ckpt or v2 fairseq .pt",
    "huggingface": "transformers' GraphormerForGraphClassification directory",
    "upgrade": "our checkpoint written before the task family was merged",
    "pretrained": "a pretraining run's checkpoint (--config pretrain_moses) as the shipped one, with its provenance",
}


@dataclass(frozen=True)
class ConvertPlan:
    """A conversion: the format, what to read and what to write."""

    format: str  # one of FORMATS
    source: str | Path  # the checkpoint (a directory for huggingface) to convert, as given
    outputs: tuple[str | Path, ...]  # the files to write, as given: a checkpoint (and its provenance, for pretrained)
    options: dict[str, Any]  # the converter's keyword arguments (vocabularies, task, spatial_pos_max ...)


@dataclass(frozen=True)
class Conversion:
    """What a conversion wrote."""

    format: str  # one of FORMATS
    source: Path  # what was converted
    written: tuple[Path, ...]  # the files written


def add_import_args(parser: argparse.ArgumentParser) -> None:
    """The output and data options of the two imports of other implementations' checkpoints."""
    parser.add_argument("output", help="our checkpoint to write; its config goes next to it with .yaml")
    parser.add_argument(
        "--node_vocab",
        type=int,
        nargs="+",
        default=list(ATOM_VOCAB),
        help="values per node-feature column of the data (default: ogb's atom features)",
    )
    parser.add_argument(
        "--edge_vocab",
        type=int,
        nargs="+",
        default=list(BOND_VOCAB),
        help="values per edge-feature column of the data (default: ogb's bond features)",
    )
    parser.add_argument(
        "--task",
        choices=["regression", "classification"],
        default="regression",
        help="the task the checkpoint will start (regression adds target statistics 0 and 1)",
    )


class Convert(Command[ConvertPlan, Conversion]):
    NAME = "convert"
    HELP = __doc__

    def add_args(self, parser: argparse.ArgumentParser) -> None:
        formats = parser.add_subparsers(dest="format", required=True, metavar="{" + ",".join(FORMATS) + "}")
        parsers = {name: formats.add_parser(name, help=about, description=about) for name, about in FORMATS.items()}
        official, huggingface = parsers["official"], parsers["huggingface"]
        official.add_argument("source", help="the official checkpoint")
        huggingface.add_argument("source", help="directory with config.json and model.safetensors or pytorch_model.bin")
        add_import_args(official)
        add_import_args(huggingface)
        official.add_argument(
            "--multi_hop_max_dist", type=int, help="for files that do not store it (default: official 5)"
        )
        official.add_argument(
            "--spatial_pos_max",
            type=int,
            help="for files that do not store it, such as v1.0's (default: official 1024)",
        )
        huggingface.add_argument(
            "--spatial_pos_max",
            type=int,
            help="the GraphormerDataCollator argument the model "
            "ran with (default: config.json's, which that collator does not read; its own "
            "default is 20)",
        )
        huggingface.add_argument(
            "--node_rows",
            choices=list(NODE_ROW_SHIFTS),
            default="transformers",
            help="node embedding rows of transformers' preprocessing (512 f + v + 3) or of "
            "official Graphormer (512 f + v + 2)",
        )
        # paths as typed: a trailing '/' names a directory, which the converters refuse as an output
        parsers["upgrade"].add_argument(
            "source", help="the checkpoint in the earlier layout (optimiser arguments outside optim)"
        )
        parsers["upgrade"].add_argument("output", help="the checkpoint to write, in today's layout")
        pretrained = parsers["pretrained"]
        pretrained.add_argument(
            "source",
            type=Path,
            metavar="checkpoint",
            help="a checkpoint of a graphormer-urpe train --config pretrain_moses run",
        )
        pretrained.add_argument("--out", type=Path, default=None, help="a directory (default: the package's own files)")
        pretrained.add_argument("--replace", action="store_true", help="write over existing files (the shipped ones)")

    def plan(self, args: argparse.Namespace) -> ConvertPlan:
        options = {key: value for key, value in vars(args).items() if key not in ("format", "source", "output", "out")}
        if args.format != "pretrained":
            return ConvertPlan(args.format, args.source, (args.output,), options)
        outputs = (
            (CHECKPOINT, PROVENANCE) if args.out is None else (args.out / CHECKPOINT.name, args.out / PROVENANCE.name)
        )
        return ConvertPlan(args.format, args.source, outputs, options)

    def run(self, plan: ConvertPlan) -> Conversion:
        """The converter of the format: it checks the source, then the outputs, and then writes them."""
        if plan.format == "pretrained":
            written = export(plan.source, *plan.outputs, **plan.options)
            log.info(
                "wrote %s (%s bytes, step %d) and %s",
                plan.outputs[0],
                f"{written['bytes']:,}",
                written["global_step"],
                plan.outputs[1],
            )
        else:
            convert = {"official": import_official, "huggingface": import_huggingface, "upgrade": upgrade}
            convert[plan.format](plan.source, plan.outputs[0], **plan.options)
        return Conversion(plan.format, Path(plan.source), tuple(Path(output) for output in plan.outputs))


main = Convert().main
