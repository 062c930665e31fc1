"""Running ``graphormer-urpe`` in a test: the one line with which a command refuses bad input."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from graphormer_urpe.commands.__main__ import main
from graphormer_urpe.commands.exits import BAD_INPUT


def refusal(argv: Sequence[str]) -> str:
    """The message with which ``graphormer-urpe ARGV`` stops on bad input: exit code 2, one line (the
    :class:`~graphormer_urpe.errors.Refused` that :func:`~graphormer_urpe.commands.exits.exit_codes` raises);
    ``AssertionError`` if it stops otherwise or does not stop."""
    try:
        main(list(argv))
    except SystemExit as stop:
        assert stop.code == BAD_INPUT, f"graphormer-urpe {shlex.join(argv)} exited with {stop.code}, not {BAD_INPUT}"
        assert "\n" not in str(stop), f"graphormer-urpe {shlex.join(argv)} refused in several lines: {stop}"
        return str(stop)
    raise AssertionError(f"graphormer-urpe {shlex.join(argv)} was not refused")
