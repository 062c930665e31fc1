"""One table of exit codes for every command, as docs/running.md prints it, and what stops a command mapped to it."""

from __future__ import annotations

import re

import pytest

from graphormer_urpe.commands.exits import EXIT_CODES, INTERRUPTED, exit_codes
from graphormer_urpe.errors import DataError, NonFiniteLoss, Refused, SeedsUnfinished, SubmissionError
from graphormer_urpe.testing import REPO_DIR


def test_docs_print_the_table_of_exit_codes() -> None:
    running = (REPO_DIR / "docs" / "running.md").read_text()
    section = running[running.index("### Exit codes") :]
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \|$", section, flags=re.MULTILINE)
    assert rows[0] == ("code", "meaning")
    assert dict(rows[1 : 1 + len(EXIT_CODES)]) == EXIT_CODES


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (DataError("table.csv: no rows"), 2),
        (SubmissionError("bad"), 1),
        (NonFiniteLoss("nan"), 3),
        (SeedsUnfinished("exp: seeds [1] did not finish (seed 1: exit code 2); the summary covers seeds [0]"), 4),
        (KeyboardInterrupt(), INTERRUPTED),
    ],
)
def test_what_stops_a_command_becomes_its_exit_code(raised: BaseException, code: int) -> None:
    finished = []
    with pytest.raises(SystemExit) as stop:
        with exit_codes(finish=lambda *ended: finished.append(ended)):
            raise raised
    assert stop.value.code == code and finished == [(code, isinstance(raised, KeyboardInterrupt))]
    if code == 2:  # a refusal carries its message, logged in one line
        assert isinstance(stop.value, Refused) and str(stop.value) == "table.csv: no rows"


def test_anything_else_is_a_bug_and_keeps_its_traceback() -> None:
    with pytest.raises(ZeroDivisionError):
        with exit_codes():
            raise ZeroDivisionError
