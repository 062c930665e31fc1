"""W&B options, the offline fallback, and what an offline run records."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from wandb.proto import wandb_internal_pb2

from graphormer_urpe.run import tracking
from graphormer_urpe.run.tracking import WandbOptions, effective_mode, run_id, wandb_logger

#: LevelDB-log framing of ``.wandb`` files: 32 KiB blocks, 7-byte record headers, a 7-byte file header.
BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(run_file: Path) -> list[wandb_internal_pb2.Record]:
    """Every record of an offline run's ``run-<id>.wandb`` file."""
    data = run_file.read_bytes()
    records, partial, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + HEADER : pos + HEADER + length], pos + HEADER + length
        partial = chunk if kind in (FULL, FIRST) else partial + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(partial)
            records.append(record)
    return records


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))


def test_online_without_api_key_falls_back_to_offline_with_one_line(
    no_credentials: None, package_log: pytest.LogCaptureFixture
) -> None:
    assert effective_mode("online") == "offline"
    lines = [r for r in package_log.records if r.name == "graphormer_urpe"]
    assert len(lines) == 1 and "no API key" in lines[0].getMessage() and "wandb sync" in lines[0].getMessage()


def test_online_without_network_falls_back_to_offline(
    monkeypatch: pytest.MonkeyPatch, package_log: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(tracking, "network_reachable", lambda url, timeout: False)
    assert effective_mode("online") == "offline"
    assert "api.wandb.ai is not reachable" in package_log.text


def test_offline_and_disabled_are_kept_and_online_with_key_and_network_stays_online(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(tracking, "network_reachable", lambda url, timeout: True)
    assert [effective_mode(m) for m in ("online", "offline", "disabled")] == ["online", "offline", "disabled"]


def test_logger_carries_the_options_and_a_run_id_stable_across_resumes(
    no_credentials: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    options = WandbOptions(project="p", entity="team", tags=["a", "b"], group="g", mode="online")
    logger = wandb_logger(options, tmp_path / "run")
    init = logger._wandb_init
    assert (init["project"], init["entity"], init["tags"], init["group"]) == ("p", "team", ["a", "b"], "g")
    assert init["mode"] == "offline" and init["name"] == "run" and init["resume"] == "allow"
    assert init["id"] == run_id(tmp_path / "run") == run_id(tmp_path / "run" / ".." / "run")
    assert run_id(tmp_path / "other") != init["id"]


@pytest.mark.slow
def test_offline_run_records_config_parameters_commit_metrics_lr_and_table_images(ddp_run: tuple[Path, str]) -> None:
    """The DDP run logged to W&B offline: exactly one W&B run (rank 0's), with everything in it."""
    run_dir, _ = ddp_run
    offline_runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1
    records = wandb_records(next(offline_runs[0].glob("run-*.wandb")))
    config = {}
    for record in records:
        if record.WhichOneof("record_type") in ("run", "config"):
            updates = record.run.config.update if record.HasField("run") else record.config.update
            config.update({item.key: json.loads(item.value_json) for item in updates})
    run_info = config["run"]
    assert run_info["parameters"] > 1000 and run_info["git_commit"] != ""
    assert run_info["dataset"]["splits"] == {"train": 40, "valid": 5, "test": 5}
    assert str(config["config"]["trainer"]["devices"]) == "2"
    assert config["config"]["data"]["init_args"]["batch_size"] == 4
    history_keys = {
        "/".join(item.nested_key) or item.key for r in records if r.HasField("history") for item in r.history.item
    }
    assert {"train/loss", "val/mae", "lr-AdamW", "trainer/global_step"} <= history_keys
    assert any(key.startswith("relation_tables") for key in history_keys)
    images = list((offline_runs[0] / "files" / "media" / "images").glob("relation_tables_*.png"))
    assert len(images) == 2  # validations after steps 3 and 6 of fitting (none for the final validate)
    assert sorted(p.name for p in (run_dir / "plots").iterdir()) == [
        "relation_tables-step0000003.png",
        "relation_tables-step0000006.png",
    ]
