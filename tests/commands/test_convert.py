"""``graphormer-urpe convert``: one command with four formats, each listed by its help and its choices; bad input
is one line, exit code 2, as in every command (each converter's refusals: tests/convert/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphormer_urpe.commands.__main__ import main
from graphormer_urpe.commands.convert import FORMATS
from graphormer_urpe.testing.commands import refusal


def test_the_help_and_the_choices_list_every_format_pretrained_included(capsys: pytest.CaptureFixture) -> None:
    assert list(FORMATS) == ["official", "huggingface", "upgrade", "pretrained"]
    with pytest.raises(SystemExit) as done:
        main(["convert", "--help"])
    assert done.value.code == 0
    assert "{official,huggingface,upgrade,pretrained}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main(["convert", "pretrainde", "x.ckpt"])
    assert refused.value.code == 2
    assert "choose from official, huggingface, upgrade, pretrained" in capsys.readouterr().err.replace("'", "")
    with pytest.raises(SystemExit) as done:
        main(["convert", "pretrained", "--help"])
    assert done.value.code == 0 and "--replace" in capsys.readouterr().out


def test_a_refusal_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    assert refusal(["convert", "upgrade", str(tmp_path / "nope.ckpt"), str(tmp_path / "new.ckpt")]) == (
        f"checkpoint {tmp_path / 'nope.ckpt'} does not exist"
    )
    assert refusal(["convert", "pretrained", str(tmp_path / "nope.ckpt"), "--out", str(tmp_path)]) == (
        f"checkpoint {tmp_path / 'nope.ckpt'} does not exist"
    )
