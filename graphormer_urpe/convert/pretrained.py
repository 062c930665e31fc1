"""Reduce a pretraining run's checkpoint to the shipped one (:mod:`graphormer_urpe.pretrained`) and write its
provenance (``graphormer-urpe convert pretrained``, :mod:`graphormer_urpe.commands.convert`).

    graphormer-urpe convert pretrained runs/pretrain_moses-<time>/checkpoints/best-<step>.ckpt --replace
    graphormer-urpe convert pretrained CKPT --out DIR          # elsewhere than the package (new files only)
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import torch
import yaml

from graphormer_urpe.data.sources.descriptors import descriptor_reference
from graphormer_urpe.data.sources.pretraining import MOSES_TRAIN_FILE
from graphormer_urpe.errors import CheckpointError
from graphormer_urpe.pretrained import sha256_of
from graphormer_urpe.run.checkpoints import CONFIG_KEY, load_checkpoint, reduced_checkpoint, run_config


def portable_command(command: str, base: Path) -> str:
    """``command`` (a run record's, e.g. ``graphormer-urpe train --config /home/me/cfg.yaml``) with every absolute
    path below ``base`` written relative to it; a run record older than ``graphormer-urpe train`` named the checkout's
    root script, which runs with ``python``."""
    words = shlex.split(command)
    for i, word in enumerate(words):
        path = Path(word)
        if path.is_absolute() and path.is_relative_to(base):
            words[i] = str(path.relative_to(base))
    if words[0] == "train.py":
        words.insert(0, "python")
    return shlex.join(words)


def portable_config(config_yaml: str, base: Path) -> str:
    """A run's resolved config (YAML) with every value that is an absolute path below ``base`` (``data.root``,
    ``run_root`` of a run started with absolute paths) written relative to it, as :func:`portable_command` writes the
    command: the shipped checkpoint carries its config, and no path of the machine that made it."""

    def portable(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: portable(item) for key, item in value.items()}
        if isinstance(value, list):
            return [portable(item) for item in value]
        if isinstance(value, str) and Path(value).is_absolute() and Path(value).is_relative_to(base):
            return str(Path(value).relative_to(base))
        return value

    return yaml.safe_dump(portable(yaml.safe_load(config_yaml)), sort_keys=False)


def export(source: Path, checkpoint_out: Path, provenance_out: Path, replace: bool = False) -> dict:
    """Write the reduced checkpoint and its provenance record; return the record. The source is checked first, so
    that a message names the real problem, then the files to write."""
    checkpoint = load_checkpoint(source)
    if CONFIG_KEY not in checkpoint:
        raise CheckpointError(f"{source} holds no config (not written by graphormer-urpe train)")
    config = run_config(checkpoint[CONFIG_KEY])
    if config.data_name != "MosesDescriptors":
        raise CheckpointError(
            f"{source} is not a run of configs/pretrain_moses.yaml (its data source is {config.source_class_path})"
        )
    run_dir = source.resolve().parent.parent
    if not (run_dir / "run.json").is_file():
        raise CheckpointError(
            f"{source} is not in a run directory (no {run_dir / 'run.json'}): name the checkpoint "
            "under runs/<run>/checkpoints/ that graphormer-urpe train wrote, whose run record it exports"
        )
    for path in (checkpoint_out, provenance_out):
        if path.exists() and not replace:
            raise CheckpointError(f"{path} exists; pass --replace to write over the shipped checkpoint, or --out")
    record = json.loads((run_dir / "run.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").is_file() else {}
    reduced = reduced_checkpoint(checkpoint)
    reduced[CONFIG_KEY] = portable_config(checkpoint[CONFIG_KEY], Path.cwd())
    checkpoint_out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(reduced, checkpoint_out)
    reference = descriptor_reference()
    command = portable_command(record["command"], Path.cwd())
    targets = {"descriptors": "rdkit2d", "reference_sha1": reference.sha1, "count": len(reference.informative)}
    if fingerprint_positions := config.source_args.get("fingerprint_targets", 0):
        targets["ecfp_count_positions"] = fingerprint_positions  # absent when none, as in the records before
    provenance = {
        "file": checkpoint_out.name,
        "sha256": sha256_of(checkpoint_out),
        "bytes": checkpoint_out.stat().st_size,
        "global_step": int(checkpoint["global_step"]),
        "parameters": sum(t.numel() for t in reduced["state_dict"].values() if t.is_floating_point()),
        # the run's own names, not this machine's: the record ships with the package
        "source_checkpoint": f"{run_dir.name}/checkpoints/{source.name}",
        "command": command,
        # the run's own options (molecules, steps...): the config's defaults would reproduce another pretraining
        "reproduce": f"pip install --no-deps molsets==0.3.1 && {command}",
        "git_commit": record.get("git_commit"),
        # a pretraining continued from another checkpoint (--init_from) is only reproducible from that one
        "initialised_from": record.get("initialised_from"),
        "versions": record.get("versions"),
        "corpus": {
            "name": "MOSES train (molsets 0.3.1)",
            "file": MOSES_TRAIN_FILE,  # named, not opened: a machine given the corpus alone has no molsets
            "sha1": descriptor_reference().provenance["corpus_sha1"],
            "molecules": config.source_args.get("molecules"),
            "seed": config.source_args.get("seed"),
            "brics_fragments": config.source_args.get("fragments", 0),
        },
        "targets": targets,
        "metrics": {
            key: value
            for part in ("validation", "test")
            for key, value in metrics.get(part, {}).items()
            if key.count("/") == 1
        },  # the means over the targets, not each descriptor's
        "config": reduced[CONFIG_KEY],
    }
    provenance_out.write_text(json.dumps(provenance, indent=1) + "\n")
    return provenance
