from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest
import torch
import yaml

from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.data.sources.descriptors import descriptor_reference
from graphormer_urpe.pretrained import CHECKPOINT, SHORT_NAME, provenance, resolve_checkpoint, sha256_of
from graphormer_urpe.run.checkpoints import CONFIG_KEY, EXECUTION_KEYS, load_checkpoint


def test_the_provenance_record_matches_the_shipped_file() -> None:
    record = provenance()
    assert record["sha256"] == sha256_of(CHECKPOINT)
    assert record["bytes"] == CHECKPOINT.stat().st_size <= 5 * 2**20
    checkpoint = load_checkpoint(CHECKPOINT)
    assert set(checkpoint) >= {"state_dict", "hyper_parameters", CONFIG_KEY, "global_step"}
    assert "optimizer_states" not in checkpoint
    assert record["global_step"] == checkpoint["global_step"]
    assert record["config"] == checkpoint[CONFIG_KEY]
    assert record["parameters"] == sum(t.numel() for t in checkpoint["state_dict"].values() if t.is_floating_point())
    assert all(t.dtype == torch.float32 for t in checkpoint["state_dict"].values() if t.is_floating_point())
    reference = descriptor_reference()
    assert record["targets"] == {
        "descriptors": "rdkit2d",
        "reference_sha1": reference.sha1,
        "count": len(reference.informative),
    }
    assert record["corpus"]["sha1"] == reference.provenance["corpus_sha1"]
    assert not record["git_commit"].endswith("-dirty")


def test_the_shipped_checkpoint_was_trained_with_the_repository_config() -> None:
    """Reproducible by the recorded command: every setting of configs/pretrain_moses.yaml that the command does not
    set (``--data.source.molecules 525000`` sets ``data.init_args.source.init_args.molecules``) is the checkpoint's;
    a setting of where and how fast it ran (``EXECUTION_KEYS``: workers, devices) may differ."""
    trained = yaml.safe_load(provenance()["config"])
    shipped = yaml.safe_load((CONFIG_DIR / "pretrain_moses.yaml").read_text())
    words = shlex.split(provenance()["command"])
    set_by_command = {word.removeprefix("--") for word in words if word.startswith("--")}

    def contained(part: object, whole: object, key: str) -> None:
        if isinstance(part, dict):
            for name, value in part.items():
                contained(value, whole[name], f"{key}.{name}" if key else name)
        elif key.replace("init_args.", "") not in set_by_command and key not in EXECUTION_KEYS:
            assert part == whole, key

    contained(shipped, trained, "")
    # the run, at the recorded commit, from the repository's root (the configs were then in configs/)
    assert provenance()["command"] == "python train.py --config configs/pretrain_moses.yaml --run_name pretrain_moses"
    assert provenance()["reproduce"].endswith("graphormer-urpe train --config pretrain_moses")


def test_the_shipped_record_names_no_path_of_the_machine_that_made_it() -> None:
    def strings(value: object) -> list[str]:
        if isinstance(value, dict):
            return [s for item in value.values() for s in strings(item)]
        return [value] if isinstance(value, str) else []

    words = [word for text in strings(provenance()) for word in text.split()]
    absolute = [word for word in words if any(part.startswith("/") for part in word.split("="))]  # also --opt=/x
    assert words and not absolute


def test_the_short_name_names_the_shipped_file_and_any_other_value_is_a_path() -> None:
    assert resolve_checkpoint(SHORT_NAME) == str(CHECKPOINT)
    assert resolve_checkpoint("./pretrained") == "./pretrained"
    assert resolve_checkpoint("runs/x/checkpoints/best-3.ckpt") == "runs/x/checkpoints/best-3.ckpt"


@pytest.mark.slow
def test_it_fine_tunes_from_its_short_name(small_table: Path, tmp_path: Path) -> None:
    import train
    from graphormer_urpe.testing.runs import small_run_args

    args = small_run_args(
        small_table,
        tmp_path / "data",
        tmp_path / "runs",
        "--run_name",
        "ft",
        "--init_from",
        SHORT_NAME,
        "--trainer.max_steps",
        "3",
        "--trainer.val_check_interval",
        "3",
    )
    train.main(args)
    record = json.loads((tmp_path / "runs" / "ft" / "run.json").read_text())
    assert f"sha256 {provenance()['sha256'][:12]}; MosesDescriptors, step 10000" in record["initialised_from"]
    assert record["parameters"] > 500_000  # the checkpoint's architecture, not the 1-layer one of the arguments


@pytest.mark.slow
@pytest.mark.device
def test_the_recipe_fine_tunes_the_shipped_checkpoint_on_the_device_in_each_precision(
    small_table: Path, tmp_path: Path, device: torch.device
) -> None:
    """``configs/small_molecules.yaml`` as a user runs it on a GPU (the CPU where there is none): the shipped
    checkpoint, RDKit descriptors joined with the readout, 4 steps in ``32``, ``16-mixed`` and ``bf16-mixed``.
    Every run starts from the same weights on the same first batch, so only the precision changes the first
    step's loss: within 5 % of float32's (the tolerance of the GPU check's QM9 runs, docs/gpu.md). Every loss is
    finite, and so is every weight of each run's last checkpoint."""
    from graphormer_urpe.run.ledger import read_metrics
    from graphormer_urpe.testing.runs import train

    first_losses = {}
    for precision in ("32", "16-mixed", "bf16-mixed"):
        train(
            [
                "--config",
                "small_molecules",
                "--data.source.path",
                str(small_table),
                "--data.root",
                str(tmp_path / "data"),
                "--run_root",
                str(tmp_path / "runs"),
                "--run_name",
                precision,
                "--trainer.accelerator",
                device.type,
                "--trainer.precision",
                precision,
                "--trainer.max_steps",
                "4",
                "--trainer.log_every_n_steps",
                "1",
                "--logger",
                "csv",
                "--trainer.enable_progress_bar",
                "false",
                "--trainer.enable_model_summary",
                "false",
            ]
        )
        run = tmp_path / "runs" / precision
        losses = [row["train/loss"] for row in read_metrics(run) if "train/loss" in row]
        assert len(losses) == 4 and all(math.isfinite(loss) for loss in losses), (precision, losses)
        first_losses[precision] = losses[0]
        last = load_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"]
        assert all(torch.isfinite(t).all() for t in last.values() if t.is_floating_point()), precision
    for precision in ("16-mixed", "bf16-mixed"):
        assert first_losses[precision] == pytest.approx(first_losses["32"], rel=0.05), first_losses
