"""bench/gpu_check.py end to end on the CPU (small), and its mixed-precision verdicts on hand-made losses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphormer_urpe.run.records import REPO_DIR

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


@pytest.mark.slow
def test_the_check_runs_end_to_end_on_the_cpu(qm9_root: Path, tmp_path: Path) -> None:
    """Device tests (the attention module's), 2-step QM9 runs in three precisions, the memory of the
    three paper settings estimated; the summary names them all."""
    code = gpu_check.main(["--device", "cpu", "--steps", "2", "--quick", "--parts", "tests", "qm9", "memory",
                           "--data-root", str(qm9_root), "--out", str(tmp_path)])
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


@pytest.mark.slow
def test_the_throughput_commands_run_on_the_cpu() -> None:
    """The check's throughput part calls ``bench/train_throughput.py`` with flags it accepts: the
    float32 command of the quick list runs and prints the side-by-side comparison (the half-precision
    ones are for a GPU: float16 matrix products on a CPU take minutes)."""
    commands = gpu_check.throughput_commands("cpu", quick=True)
    assert [c[c.index("--precision") + 1] for c in commands] == ["32", "16-mixed", "bf16-mixed"]
    done = subprocess.run(commands[0], cwd=REPO_DIR, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "size-aware / today, urpe" in done.stdout and "URPE / RPE time per step, bucketed" in done.stdout
