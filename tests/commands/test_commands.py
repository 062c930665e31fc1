"""``graphormer-urpe``: one command whose subcommands each have their own help; an unknown one is one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graphormer_urpe.commands.__main__ import SUBCOMMANDS, main
from graphormer_urpe.testing.commands import refusal


def test_the_command_lists_its_subcommands(capsys: pytest.CaptureFixture) -> None:
    assert main(["--help"]) == 0
    shown = capsys.readouterr().out
    assert all(f"  {name} " in shown for name in SUBCOMMANDS)
    assert list(SUBCOMMANDS) == ["train", "evaluate", "predict", "sweep", "ensemble", "convert"]
    assert main([]) == 2 and "subcommands:" in capsys.readouterr().err
    assert refusal(["trian"]) == (
        "'trian' is not a subcommand; one of train, evaluate, predict, sweep, ensemble, "
        "convert (graphormer-urpe --help)"
    )
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("graphormer-urpe ")


@pytest.mark.parametrize("name", ["evaluate", "predict", "sweep", "ensemble", "convert"])
def test_every_subcommand_has_its_help_with_underscored_options(name: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    hyphenated = [
        o for o in shown.split() if o.startswith("--") and "-" in o[2:] and not o.startswith("--data.") and o != "--"
    ]
    assert f"usage: graphormer-urpe {name}" in shown and not hyphenated


@pytest.mark.slow
def test_python_dash_m_runs_the_same_command_and_the_table_of_subcommands_loads_no_lightning() -> None:
    """``graphormer-urpe --help`` and ``--version`` read the table of subcommands and exit codes: they took 11 s,
    all of it Lightning's import, which only a subcommand that runs needs."""
    check = (
        "import sys; from graphormer_urpe.commands.__main__ import main; code = main(['--version']); "
        "assert not {'pytorch_lightning', 'lightning_fabric'} & set(sys.modules), 'Lightning imported'; "
        "sys.exit(code)"
    )
    for command in ([sys.executable, "-c", check], [sys.executable, "-m", "graphormer_urpe.commands", "--version"]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stdout.startswith("graphormer-urpe "), done.stderr[-2000:]


@pytest.mark.slow
def test_train_has_its_help_and_its_usage_line_names_it(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: graphormer-urpe train ")  # not the program file's name
    assert "--run_root" in shown and "--init_from" in shown
