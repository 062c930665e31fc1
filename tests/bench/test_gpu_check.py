"""bench/gpu_check.py end to end on the CPU (small); its caps (a command over its cap is cut, the parts after
it still run, the summary is on disk after every part); its mixed-precision verdicts on hand-made losses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphormer_urpe.testing import REPO_DIR

sys.path.insert(0, str(REPO_DIR / "bench"))
import gpu_check  # noqa: E402  (a script in bench/, importable once bench/ is on the path)


def run_entry(first: float, tail: float, valid: float) -> dict:
    return {"ok": True, "first_loss": first, "tail_loss": tail, "valid_mae": valid}


@pytest.mark.parametrize(("first", "tail", "valid", "ok"), [
    (1.04, 0.5, 0.2, True),  # 4 % on the first step: within 5 %
    (1.06, 0.5, 0.2, False),  # 6 %: not
    (1.0, 0.56, 0.2, False),  # late loss 12 % off
    (1.0, 0.5, 0.219, True),  # validation 9.5 % off
    (1.0, 0.5, 0.221, False),  # 10.5 %
])
def test_mixed_precision_is_judged_against_float32(first: float, tail: float, valid: float, ok: bool) -> None:
    runs = {"32": run_entry(1.0, 0.5, 0.2), "16-mixed": run_entry(first, tail, valid),
            "bf16-mixed": {"ok": False, "error": "train.py exited with 1"}}
    gpu_check.compare_precisions(runs)
    assert runs["16-mixed"]["ok"] is ok and runs["bf16-mixed"]["ok"] is False
    assert runs["16-mixed"]["first_rdiff"] == pytest.approx(abs(first - 1.0))


def test_a_command_over_its_cap_is_cut_and_logged(tmp_path: Path) -> None:
    check = gpu_check.Check(tmp_path, tmp_path / "work", time_scale=0.5)
    outcome = check.run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"], cap=2)
    assert outcome.status == "cut" and not outcome.ok and outcome.seconds < 600
    assert "started" in outcome.stdout
    assert "cut after" in (tmp_path / "check.log").read_text() and "(cap 1 s" in (tmp_path / "check.log").read_text()
    done = check.run([sys.executable, "-c", "raise SystemExit(3)"], cap=60)
    assert (done.status, done.returncode) == ("failed", 3)


def test_a_part_over_its_cap_is_recorded_as_cut_and_the_next_parts_still_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests part runs a command that outlives its cap; the memory part then runs, and finds the
    tests part's result already on disk; a part that raises is recorded as failed, the next still runs."""
    monkeypatch.setitem(gpu_check.CAPS, "tests", {"device tests": 1})
    seen_on_disk: list[dict] = []

    def sleeping_tests(check: gpu_check.Check, quick: bool, bundle: Path | None) -> dict:
        cap = gpu_check.CAPS["tests"]["device tests"]
        outcome = check.run([sys.executable, "-c", "import time; time.sleep(600)"], cap)
        return {"status": outcome.status, "summary": "no pytest summary"}

    def memory(check: gpu_check.Check, device: str, quick: bool, update) -> dict:  # noqa: ANN001
        seen_on_disk.append(json.loads((tmp_path / "summary.json").read_text()))
        update({"status": "running", "results": []})
        seen_on_disk.append(json.loads((tmp_path / "summary.json").read_text()))
        raise RuntimeError("a bug in the memory part")

    def throughput(check: gpu_check.Check, device: str, quick: bool, pool: Path | None, update) -> dict:  # noqa: ANN001
        return {"status": "ok", "runs": []}

    monkeypatch.setattr(gpu_check, "check_tests", sleeping_tests)
    monkeypatch.setattr(gpu_check, "check_memory", memory)
    monkeypatch.setattr(gpu_check, "check_throughput", throughput)
    code = gpu_check.main(["--device", "cpu", "--parts", "throughput", "memory", "tests", "--out", str(tmp_path)])
    assert code == 1
    assert seen_on_disk[0]["parts"]["tests"]["status"] == "cut" and "memory" not in seen_on_disk[0]["parts"]
    assert seen_on_disk[1]["parts"]["memory"]["status"] == "running"
    report = json.loads((tmp_path / "summary.json").read_text())
    assert report["order"] == ["tests", "memory", "throughput"]  # the order of value, whatever --parts says
    assert {part: entry["status"] for part, entry in report["parts"].items()} == \
        {"tests": "cut", "memory": "failed", "throughput": "ok"}
    assert "a bug in the memory part" in report["parts"]["memory"]["error"]
    summary = (tmp_path / "summary.md").read_text()
    assert "| tests | cut |" in summary and "| memory | failed |" in summary and "| throughput | ok |" in summary


def test_the_summary_names_the_parts_not_reached(tmp_path: Path) -> None:
    """What a run killed during its first part leaves: every part listed, none reached."""
    report = {"machine": "m", "date": "d", "command": "c", "order": list(gpu_check.PARTS),
              "caps": {part: sum(gpu_check.CAPS[part].values()) for part in gpu_check.PARTS}, "parts": {}}
    summary = gpu_check.markdown(report)
    assert all(f"| {part} | not reached |" in summary for part in gpu_check.PARTS)


def test_the_caps_fit_the_lease() -> None:
    """Every cap together within 7.5 minutes of a 15-minute lease: with the bundle's install, the check's own work
    and the machine's start (up to 2 minutes), time is left to rerun a part."""
    assert sum(sum(caps.values()) for caps in gpu_check.CAPS.values()) <= 7.5 * 60
    assert set(gpu_check.CAPS["throughput"]) == set(gpu_check.throughput_commands("cuda", False, None))
    assert set(gpu_check.CAPS["memory"]) == {"zinc", "pcqm4mv2", "mag240m"}


def test_a_cut_throughput_run_cuts_its_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(check: gpu_check.Check, command: list[str], cap: float) -> gpu_check.Outcome:
        return gpu_check.Outcome("cut" if command[-1] == "bf16-mixed" else "ok", cap, "", "", -9)

    monkeypatch.setattr(gpu_check.Check, "run", run)
    check = gpu_check.Check(tmp_path, tmp_path / "work", time_scale=1)
    result = gpu_check.check_throughput(check, "cuda", False, None, lambda entry: None)
    assert result["status"] == "cut"


def test_the_device_tests_are_collected_from_the_files_that_hold_them() -> None:
    files = gpu_check.device_test_files()
    assert {"tests/model/test_attention.py", "tests/run/test_callbacks.py", "tests/tasks/test_tasks.py",
            "tests/data/mag240m/test_datamodule.py", "tests/pretrained/test_pretrained.py"} <= set(files)
    assert "tests/run/test_tracking.py" not in files  # imports wandb, absent from the GPU image


@pytest.mark.slow
def test_the_check_runs_end_to_end_on_the_cpu(qm9_root: Path, tmp_path: Path) -> None:
    """Device tests (the attention module's), the memory of the three paper settings estimated, 2-step
    QM9 runs in three precisions; the summary names them all."""
    code = gpu_check.main(["--device", "cpu", "--steps", "2", "--quick", "--parts", "tests", "qm9", "memory",
                           "--qm9-molecules", "50", "--time-scale", "20", "--data-root", str(qm9_root),
                           "--out", str(tmp_path)])
    report = json.loads((tmp_path / "summary.json").read_text())
    assert code == 0, (tmp_path / "summary.md").read_text()
    assert "passed" in report["parts"]["tests"]["summary"] and "failed" not in report["parts"]["tests"]["summary"]
    runs = report["parts"]["qm9"]["runs"]
    assert set(runs) == {"32", "16-mixed", "bf16-mixed"} and all(len(r["losses"]) == 2 for r in runs.values())
    memory = {r["setting"]: r for r in report["parts"]["memory"]["results"]}
    assert set(memory) == {"ZINC", "PCQM4Mv2", "MAG240M"}
    assert memory["ZINC"]["padded_nodes"] == 38 and memory["PCQM4Mv2"]["padded_nodes"] == 51
    assert memory["MAG240M"]["graphs_per_gpu"] == 32 and memory["MAG240M"]["padded_nodes"] == 401  # 1 + 25 + 25 * 15
    assert 100 < memory["MAG240M"]["largest_graph"] <= 401
    assert memory["ZINC"]["peak_gib"] < memory["PCQM4Mv2"]["peak_gib"] < memory["MAG240M"]["peak_gib"]
    summary = (tmp_path / "summary.md").read_text()
    assert "| bf16-mixed |" in summary and "| MAG240M | 32 |" in summary and "(401) |" in summary
    assert (tmp_path / "check.log").is_file() and sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == \
        ["check.log", "summary.json", "summary.md"]  # runs and the synthetic MAG240M under work/


@pytest.mark.slow
def test_the_throughput_commands_run_on_the_cpu() -> None:
    """The check's throughput part calls ``bench/train_throughput.py`` with flags it accepts: the
    float32 command of the quick list runs, and its graphs/s are read off its table (the
    half-precision ones are for a GPU: float16 matrix products on a CPU take minutes)."""
    commands = gpu_check.throughput_commands("cpu", quick=True, pool=None)
    assert [c[c.index("--precision") + 1] for c in commands.values()] == ["32", "16-mixed", "bf16-mixed"]
    assert not any("--compile" in command for command in commands.values())
    done = subprocess.run(commands["32"], cwd=REPO_DIR, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "size-aware / today, urpe" in done.stdout and "URPE / RPE time per step, bucketed" in done.stdout
    figures = gpu_check.graphs_per_second(done.stdout)
    assert set(figures) == {"today rpe", "today urpe", "bucketed rpe", "bucketed urpe"}
    assert all(value > 0 for value in figures.values())
