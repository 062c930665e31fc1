from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from graphormer_urpe.convert.pretrained import export, portable_command, portable_config
from graphormer_urpe.errors import CheckpointError
from graphormer_urpe.pretrained import CHECKPOINT
from graphormer_urpe.run.checkpoints import CONFIG_KEY
from graphormer_urpe.testing.commands import refusal


def test_the_source_is_checked_first_and_an_existing_output_is_never_written_over(tmp_path: Path) -> None:
    """Issue 38: a checkpoint that does not exist was answered with "the shipped checkpoint exists; pass --replace"."""
    out = tmp_path / "out"
    out.mkdir()
    (out / CHECKPOINT.name).write_text("earlier")
    assert refusal(["convert", "pretrained", str(tmp_path / "nope.ckpt"), "--out", str(out)]) == (
        f"checkpoint {tmp_path / 'nope.ckpt'} does not exist"
    )
    run = tmp_path / "runs" / "pretrain_moses"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(CHECKPOINT, run / "checkpoints" / "best.ckpt")
    (run / "run.json").write_text(json.dumps({"command": "train.py --config pretrain_moses"}))
    assert refusal(["convert", "pretrained", str(run / "checkpoints" / "best.ckpt"), "--out", str(out)]) == (
        f"{out / CHECKPOINT.name} exists; pass --replace to write over the shipped checkpoint, or --out"
    )
    assert (out / CHECKPOINT.name).read_text() == "earlier" and sorted(p.name for p in out.iterdir()) == [
        CHECKPOINT.name
    ]


def test_a_checkpoint_outside_a_run_directory_is_one_line(tmp_path: Path) -> None:
    loose = tmp_path / "loose.ckpt"
    shutil.copy(CHECKPOINT, loose)
    assert refusal(["convert", "pretrained", str(loose), "--out", str(tmp_path / "out")]).startswith(
        f"{loose} is not in a run directory"
    )
    assert not (tmp_path / "out").exists()


def test_a_run_of_another_config_is_refused(tmp_path: Path) -> None:
    import torch

    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    config = yaml.safe_load(checkpoint[CONFIG_KEY])
    config["data"]["init_args"]["source"]["class_path"] = "graphormer_urpe.data.sources.QM9"
    checkpoint[CONFIG_KEY] = yaml.safe_dump(config)
    other = tmp_path / "other.ckpt"
    torch.save(checkpoint, other)
    with pytest.raises(CheckpointError, match="is not a run of configs/pretrain_moses.yaml"):
        export(other, tmp_path / "a.ckpt", tmp_path / "a.json")


@pytest.mark.parametrize("fragments", [None, 7])
def test_the_record_names_the_corpus_and_the_start_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fragments: int | None
) -> None:
    import importlib.util

    import torch

    # without the molsets wheel, as on a GPU machine given the corpus alone: the record names the file, never opens it
    find_spec = importlib.util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "moses" else find_spec(name, *a))
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    config = yaml.safe_load(checkpoint[CONFIG_KEY])
    if fragments is not None:  # the shipped run's config may or may not name them; a run without them drew none
        config["data"]["init_args"]["source"]["init_args"]["fragments"] = fragments
        # the second case also learned fingerprint counts, which the record's targets name
        config["data"]["init_args"]["source"]["init_args"]["fingerprint_targets"] = 256
    else:
        config["data"]["init_args"]["source"]["init_args"].pop("fragments", None)
    checkpoint[CONFIG_KEY] = yaml.safe_dump(config)
    run = tmp_path / "runs" / "pretrain"
    (run / "checkpoints").mkdir(parents=True)
    torch.save(checkpoint, run / "checkpoints" / "best-5.ckpt")
    # the second case is also a run continued from another checkpoint (--init_from), which the record must name
    started_from = None if fragments is None else "moses_rdkit2d.ckpt (sha256 f6ceaa90c2a5; step 10000)"
    (run / "run.json").write_text(
        json.dumps(
            {
                "command": "train.py --config pretrain_moses --data.source.molecules 500",
                "git_commit": "abc",
                "initialised_from": started_from,
            }
        )
    )
    record = export(run / "checkpoints" / "best-5.ckpt", tmp_path / "out.ckpt", tmp_path / "out.json")
    assert record["corpus"]["brics_fragments"] == (fragments or 0)
    assert record["targets"].get("ecfp_count_positions") == (None if fragments is None else 256)
    assert record["corpus"]["file"] == "train.csv.gz"
    assert record["initialised_from"] == started_from
    assert record["corpus"]["molecules"] == config["data"]["init_args"]["source"]["init_args"]["molecules"]
    assert json.loads((tmp_path / "out.json").read_text()) == record
    assert record["source_checkpoint"] == "pretrain/checkpoints/best-5.ckpt"  # the run's names, not this machine's
    # a record from before the installed command; the run's own options are what reproduces it
    assert record["command"] == "python train.py --config pretrain_moses --data.source.molecules 500"
    assert record["reproduce"] == f"pip install --no-deps molsets==0.3.1 && {record['command']}"


def test_a_recorded_command_is_written_without_the_paths_of_the_machine(tmp_path: Path) -> None:
    config = tmp_path / "work" / "configs" / "pretrain moses.yaml"
    command = shlex.join(["graphormer-urpe", "train", "--config", str(config), "--run_root", "/elsewhere/runs"])
    assert portable_command(command, tmp_path / "work") == (
        "graphormer-urpe train --config 'configs/pretrain moses.yaml' --run_root /elsewhere/runs"
    )
    assert portable_command("train.py --config pretrain_moses", tmp_path) == "python train.py --config pretrain_moses"


def test_the_config_is_written_without_the_paths_of_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pretraining started with absolute paths (``--data.root``, ``--run_root``) shipped them in its checkpoint's
    config and record: both now name them relative to where convert runs, as the command does."""
    import torch

    work = tmp_path / "work"
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    config = yaml.safe_load(checkpoint[CONFIG_KEY])
    config["data"]["init_args"]["root"] = str(work / "data")
    config["run_root"] = str(work / "runs")
    config["data"]["init_args"]["elsewhere"] = ["/elsewhere/cache"]  # outside: left as it is, like the command's
    checkpoint[CONFIG_KEY] = yaml.safe_dump(config)
    run = work / "runs" / "pretrain"
    (run / "checkpoints").mkdir(parents=True)
    torch.save(checkpoint, run / "checkpoints" / "best-5.ckpt")
    (run / "run.json").write_text(json.dumps({"command": "graphormer-urpe train --config pretrain_moses"}))
    monkeypatch.chdir(work)
    record = export(run / "checkpoints" / "best-5.ckpt", tmp_path / "out.ckpt", tmp_path / "out.json")
    written = torch.load(tmp_path / "out.ckpt", weights_only=True)[CONFIG_KEY]
    assert record["config"] == written
    exported = yaml.safe_load(written)
    assert (exported["data"]["init_args"]["root"], exported["run_root"]) == ("data", "runs")
    assert exported["data"]["init_args"]["elsewhere"] == ["/elsewhere/cache"]
    assert exported["model"] == config["model"] and str(work) not in written
    assert portable_config(written, work) == written  # nothing left to rewrite
