"""bench/gpu/gpu_check.py end to end on the CPU (small); its caps (a command over its cap is cut, the parts after
it still run, the summary is on disk after every part); its mixed-precision verdicts on hand-made losses."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from bench.gpu import gpu_check
from bench.speed import step_profile, train_loop, train_throughput


def run_entry(first: float, tail: float, valid: float) -> dict:
    return {"ok": True, "first_loss": first, "tail_loss": tail, "valid_mae": valid}


@pytest.mark.parametrize(
    ("first", "tail", "valid", "ok"),
    [
        (1.04, 0.5, 0.2, True),  # 4 % on the first step: within 5 %
        (1.06, 0.5, 0.2, False),  # 6 %: not
        (1.0, 0.56, 0.2, False),  # late loss 12 % off
        (1.0, 0.5, 0.219, True),  # validation 9.5 % off
        (1.0, 0.5, 0.221, False),  # 10.5 %
    ],
)
def test_mixed_precision_is_judged_against_float32(first: float, tail: float, valid: float, ok: bool) -> None:
    runs = {
        "32": run_entry(1.0, 0.5, 0.2),
        "16-mixed": run_entry(first, tail, valid),
        "bf16-mixed": {"ok": False, "error": "train.py exited with 1"},
    }
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


def test_a_command_is_looked_at_while_it_runs_and_still_cut_at_its_cap(tmp_path: Path) -> None:
    check = gpu_check.Check(tmp_path, tmp_path / "work", time_scale=1.0)
    looks: list[float] = []
    script = "import time; print('first', flush=True); time.sleep(1.2); print('last')"
    outcome = check.run([sys.executable, "-c", script], cap=60, while_running=lambda: looks.append(1.0), every=0.3)
    assert outcome.ok and outcome.stdout.split() == ["first", "last"]  # no output lost between the looks
    assert len(looks) >= 2  # 1.2 s of sleep: a look every 0.3 s
    looks.clear()
    cut = check.run(
        [sys.executable, "-c", "import time; time.sleep(600)"], 1, while_running=lambda: looks.append(1), every=0.3
    )
    assert cut.status == "cut" and cut.seconds < 10 and looks


def test_a_part_over_its_cap_is_recorded_as_cut_and_the_next_parts_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tests part runs a command that outlives its cap; the step part then runs, and finds the tests part's
    result already on disk; a part that raises is recorded as failed, the next still runs."""
    monkeypatch.setitem(gpu_check.CAPS, "tests", {"device tests": 1})
    seen_on_disk: list[dict] = []

    def sleeping_tests(check: gpu_check.Check, quick: bool, bundle: Path | None) -> dict:
        cap = gpu_check.CAPS["tests"]["device tests"]
        outcome = check.run([sys.executable, "-c", "import time; time.sleep(600)"], cap)
        return {"status": outcome.status, "summary": "no pytest summary"}

    def steps(check: gpu_check.Check, commands: dict, caps: dict, update) -> dict:  # noqa: ANN001
        seen_on_disk.append(json.loads((tmp_path / "summary.json").read_text()))
        update({"status": "running", "runs": []})
        seen_on_disk.append(json.loads((tmp_path / "summary.json").read_text()))
        raise RuntimeError("a bug in the step part")

    def profile(check: gpu_check.Check, device: str, quick: bool, update) -> dict:  # noqa: ANN001
        return {"status": "ok", "runs": []}

    monkeypatch.setattr(gpu_check, "check_tests", sleeping_tests)
    monkeypatch.setattr(gpu_check, "check_steps", steps)
    monkeypatch.setattr(gpu_check, "check_profile", profile)
    code = gpu_check.main(["--device", "cpu", "--parts", "profile", "step", "tests", "--out", str(tmp_path)])
    assert code == 1
    assert seen_on_disk[0]["parts"]["tests"]["status"] == "cut" and "step" not in seen_on_disk[0]["parts"]
    assert seen_on_disk[1]["parts"]["step"]["status"] == "running"
    report = json.loads((tmp_path / "summary.json").read_text())
    assert report["order"] == ["tests", "step", "profile"]  # the order of value, whatever --parts says
    assert {part: entry["status"] for part, entry in report["parts"].items()} == {
        "tests": "cut",
        "step": "failed",
        "profile": "ok",
    }
    assert "a bug in the step part" in report["parts"]["step"]["error"]
    summary = (tmp_path / "summary.md").read_text()
    assert "| tests | cut |" in summary and "| step | failed |" in summary and "| profile | ok |" in summary


def test_a_command_the_budget_leaves_no_time_for_is_not_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call of a given length: the first command gets what is left of it, the next none, and the part says so."""
    monkeypatch.setattr(gpu_check, "LEAST_COMMAND_SECONDS", 1.0)  # the least time worth starting a command in
    check = gpu_check.Check(tmp_path, tmp_path / "work", time_scale=1, deadline=time.monotonic() + 3)
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    first = check.run(sleep, cap=600)
    assert first.status == "cut" and first.seconds < 10
    second = check.run(sleep, cap=600)
    assert second.status == "not reached" and second.seconds == 0
    assert gpu_check.part_status([{"status": "ok"}, {"status": "not reached"}]) == "not reached"


def test_the_summary_names_the_parts_not_reached(tmp_path: Path) -> None:
    """What a run killed during its first part leaves: every part listed, none reached."""
    report = {
        "machine": "m",
        "date": "d",
        "command": "c",
        "order": list(gpu_check.PARTS),
        "caps": {part: sum(gpu_check.CAPS[part].values()) for part in gpu_check.PARTS},
        "parts": {},
    }
    summary = gpu_check.markdown(report)
    assert all(f"| {part} | not reached |" in summary for part in gpu_check.PARTS)


def test_the_first_parts_fit_the_default_budget_and_every_command_has_a_cap(tmp_path: Path) -> None:
    """The tests, the step, the loop and the profile within one call of the default budget; the matrix takes what
    is left (a second call runs the rest)."""
    first = ("tests", "step", "loop", "profile")
    assert sum(sum(gpu_check.CAPS[part].values()) for part in first) <= gpu_check.DEFAULT_BUDGET
    commands = gpu_check.step_commands("cuda", False, tmp_path)
    assert set(commands["step"]) == set(gpu_check.CAPS["step"])
    assert set(commands["matrix"]) | {"pcqm loop bf16-mixed"} == set(gpu_check.CAPS["matrix"])
    assert set(commands["flex"]) | {"flex device tests"} == set(gpu_check.CAPS["flex"])
    flex = commands["flex"]["pcqm bf16-mixed flex"]
    assert flex[flex.index("--kernels") + 1 : flex.index("--kernels") + 3] == ["eager", "flex"]
    assert set(gpu_check.CAPS["memory"]) == {"zinc", "pcqm4mv2", "mag240m"}


def test_a_cut_step_command_cuts_its_part_and_keeps_what_it_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(check: gpu_check.Check, command: list[str], cap: float) -> gpu_check.Outcome:
        Path(command[command.index("--json") + 1]).write_text(json.dumps({"results": [FIGURES]}))
        return gpu_check.Outcome("cut" if "rpe" in command else "ok", cap, "", "", -9)

    monkeypatch.setattr(gpu_check.Check, "run", run)
    check = gpu_check.Check(tmp_path, tmp_path / "work", time_scale=1)
    commands = gpu_check.step_commands("cuda", False, tmp_path)["matrix"]
    result = gpu_check.check_steps(check, commands, gpu_check.CAPS["matrix"], lambda entry: None)
    assert result["status"] == "cut" and all(run["results"] == [FIGURES] for run in result["runs"])
    row = (
        "| zinc | bf16-mixed | cuda_graphs | urpe | eager | 12,345 | [12,000, 12,500] | 20.7 | 41 | 1 | 1.50 "
        "| 3 x 16 x 256 |"
    )
    assert row in "\n".join(gpu_check.markdown_steps("grid", result))


#: One variant's figures, as bench/speed/train_throughput.py writes them.
FIGURES = {
    "setting": "zinc",
    "config": "zinc_subset",
    "precision": "bf16-mixed",
    "batch_size": 256,
    "epoch_batches": 16,
    "rounds": 3,
    "mode": "cuda_graphs",
    "batching": "bucketed",
    "attention": "urpe",
    "kernel": "eager",
    "graphs_per_second": 12345.0,
    "graphs_per_second_rounds": [12000.0, 12345.0, 12500.0],
    "ms_per_step": 20.7,
    "warm_seconds": 41.0,
    "shapes": 1,
    "peak_gib": 1.5,
}


def test_the_headline_judges_the_goals() -> None:
    eager = {**FIGURES, "mode": "eager", "graphs_per_second": 2500.0}
    loop = {"cuda_graphs": [{"graphs_per_second": 9000.0}], "eager": [{"graphs_per_second": 2400.0}]}
    parts = {"step": {"runs": [{"results": [FIGURES, eager]}]}, "loop": {"runs": loop}}
    lines = "\n".join(gpu_check.headline(parts))
    assert "CUDA graphs: 12,345 graphs/s (goal 10,000: met; eager 2,500)" in lines
    assert "cuda_graphs: 9,000 graphs/s, 73% of the step alone (goal 80%: NOT met)" in lines
    assert "eager: 2,400 graphs/s, 96% of the step alone (goal 80%: met)" in lines


def test_the_device_tests_are_collected_from_the_files_that_hold_them() -> None:
    files = gpu_check.device_test_files()
    assert {
        "tests/model/test_attention.py",
        "tests/run/test_callbacks.py",
        "tests/tasks/test_tasks.py",
        "tests/data/mag240m/test_datamodule.py",
        "tests/pretrained/test_pretrained.py",
    } <= set(files)
    assert "tests/run/test_tracking.py" not in files  # imports wandb, absent from the GPU image


@pytest.mark.slow
def test_the_check_runs_end_to_end_on_the_cpu(qm9_root: Path, tmp_path: Path) -> None:
    """Device tests (the attention module's), the memory of the three paper settings estimated, 2-step
    QM9 runs in three precisions; the summary names them all."""
    code = gpu_check.main(
        [
            "--device",
            "cpu",
            "--steps",
            "2",
            "--quick",
            "--parts",
            "tests",
            "qm9",
            "memory",
            "--qm9-molecules",
            "50",
            "--time-scale",
            "20",
            "--data-root",
            str(qm9_root),
            "--out",
            str(tmp_path),
        ]
    )
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
    assert (tmp_path / "check.log").is_file() and sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "check.log",
        "summary.json",
        "summary.md",
    ]  # runs and the synthetic MAG240M under work/


@pytest.mark.slow
@pytest.mark.usefixtures("torch_threads")
def test_the_step_and_profile_commands_run_on_the_cpu(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The check calls its benchmarks with flags they accept: the eager float32 step of the quick list and the
    profile, each with figures (compilation is for a GPU: minutes on a CPU). Both run in this process, with the
    check's own command line."""
    command = gpu_check.step_command("zinc", "32", ["eager"], ["urpe"], "cpu", True, tmp_path / "step.json")
    assert command[:2] == [sys.executable, "bench/speed/train_throughput.py"]
    train_throughput.main(command[2:])
    [result] = json.loads((tmp_path / "step.json").read_text())["results"]
    assert (result["mode"], result["attention"], len(result["graphs_per_second_rounds"])) == ("eager", "urpe", 3)
    assert result["graphs_per_second"] > 0 and result["shapes"] >= 1
    capsys.readouterr()
    step_profile.main(["--batch-size", "8", "--top", "5"])
    printed = capsys.readouterr().out
    assert (
        "ATen ops dispatched" in printed and "reads of a value by the step's code (item() outside any op): 0" in printed
    )


@pytest.mark.slow
def test_the_loop_command_runs_both_settings_on_the_cpu(tmp_path: Path) -> None:
    """A few steps of train.py on a small ZINC-sized release, and on a small PCQM4Mv2 release of SMILES."""
    # the bench in this process (each of its train.py runs is a process of its own)
    train_loop.main(
        [
            "--data-root",
            str(tmp_path / "zinc"),
            "--molecules",
            "80",
            "--workers",
            "0",
            "--first",
            "1",
            "--last",
            "3",
            "--json",
            str(tmp_path / "loop.json"),
        ]
    )
    [run] = json.loads((tmp_path / "loop.json").read_text())["runs"]["eager"]
    assert (run["steps"], run["graphs"]) == (2, 160)  # a global batch of 256 holds all 80 training graphs
    train_loop.main(
        [
            "--setting",
            "pcqm",
            "--data-root",
            str(tmp_path / "pcqm"),
            "--molecules",
            "40",
            "--workers",
            "0",
            "--first",
            "1",
            "--last",
            "3",
            "--json",
            str(tmp_path / "pcqm.json"),
        ]
    )
    [run] = json.loads((tmp_path / "pcqm.json").read_text())["runs"]["eager"]
    assert (run["steps"], run["graphs"]) == (2, 80)  # PCQM4Mv2's layout, SMILES featurised: 40 training molecules


def test_the_throughput_bench_refuses_the_flex_kernel_off_cuda(capsys: pytest.CaptureFixture) -> None:
    """FlexAttention has no backward on a CPU: the bench says so in one line before it builds anything."""
    with pytest.raises(SystemExit) as stopped:
        train_throughput.main(["--kernels", "eager", "flex"])
    assert stopped.value.code == 2
    assert "the flex kernel trains on CUDA only" in capsys.readouterr().err
