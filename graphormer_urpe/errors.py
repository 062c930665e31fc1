"""The project's exceptions, on the ground floor: every layer may raise them, this module imports
nothing of the package.

:class:`InputError` is bad input: a file, a row or an option that cannot work. Its message names it
(the file and row, or the option's dotted key as written on the command line, e.g.
``data.batch_size``) and what to change; ``train.py`` and ``evaluate.py`` print it as one line and
exit with code 2, before any work. Modules keep narrower subclasses beside the code that raises
them (``TableError``, ``ConversionError``, ``UnsafeCheckpoint``).

The ``check_*`` helpers raise :class:`ConfigError` in one wording for every option, so that each
config's ``__post_init__`` (or constructor) validates all its fields in a few lines;
:func:`import_object` imports what an option names by its dotted path, refused in the same wording.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Collection
from typing import Any, NoReturn

#: Exit code of every refusal of bad input.
EXIT_BAD_INPUT = 2


class InputError(Exception):
    """Input that cannot be used; the message names the file, row or option, and what to change."""


class ConfigError(InputError, ValueError):
    """An option has a value that cannot work.

    Args:
        key: the option's dotted key as written on the command line (``model.encoder.num_heads``).
        value: the value given.
        rule: what is allowed, e.g. ``must be an integer >= 1``.
    """

    def __init__(self, key: str, value: object, rule: str) -> None:
        self.key = key
        super().__init__(f"{key}={shown(value)}: {rule}")


class DataError(InputError, ValueError):
    """The data cannot be used as configured (a column, a value, a split, a kind of target); the
    message names the file, column or rows, and what to change. Raised before any work."""


class DatasetMissing(InputError, RuntimeError):
    """Raw files are absent and cannot be downloaded; the message says what to put where."""


class CheckpointError(InputError, RuntimeError):
    """A checkpoint cannot be read or does not fit the model; the message names the file and the mismatch."""


class Refused(SystemExit):
    """A script stopped on bad input found by the script itself (:func:`refuse`): exit code 2, and the
    message as its text (``error: <message>`` was printed on stderr)."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_BAD_INPUT)
        self.message = message

    def __str__(self) -> str:
        return self.message


def refuse(message: str) -> NoReturn:
    """Stop a script on bad input (an option that needs another, a split the dataset lacks, a file that
    cannot be written): ``error: <message>`` on stderr, exit code 2 (:class:`Refused`)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise Refused(message)


class CacheError(RuntimeError):
    """A cache file is missing, truncated or inconsistent."""


class SubmissionError(ValueError):
    """A leaderboard submission file, or the predictions for one, would be refused by the leaderboard."""


class NonFiniteLoss(RuntimeError):
    """Training stopped at a NaN or infinite loss (``train.py`` exits with code 3)."""


def shown(value: object) -> str:
    """A value as the user writes it in YAML or on the command line: ``null``, ``true``, ``'x'``, ``3``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(key: str, value: object, minimum: int, maximum: int | None = None, hint: str = "") -> None:
    """Raise :class:`ConfigError` unless ``value`` is an integer from ``minimum`` to ``maximum`` (inclusive)."""
    if _is_int(value) and value >= minimum and (maximum is None or value <= maximum):
        return
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
    raise ConfigError(key, value, f"must be {allowed}{hint}")


def check_number(key: str, value: object, minimum: float, maximum: float | None = None, *,
                 include_minimum: bool = True, include_maximum: bool = True, hint: str = "") -> None:
    """Raise :class:`ConfigError` unless ``value`` is a finite number in the interval from ``minimum``
    to ``maximum`` (each end included unless told otherwise; no upper end when ``maximum`` is None)."""
    number = isinstance(value, int | float) and not isinstance(value, bool) and value == value \
        and abs(value) != float("inf")
    above = number and (value >= minimum if include_minimum else value > minimum)
    below = number and (maximum is None or (value <= maximum if include_maximum else value < maximum))
    if above and below:
        return
    if maximum is None:
        allowed = f"a number {'>=' if include_minimum else '>'} {minimum:g}"
    else:
        allowed = (f"a number in {'[' if include_minimum else '('}{minimum:g}, {maximum:g}"
                   f"{']' if include_maximum else ')'}")
    raise ConfigError(key, value, f"must be {allowed}{hint}")


def check_choice(key: str, value: object, choices: Collection[object]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(key, value, f"expected one of {', '.join(shown(c) for c in choices)}")


def import_object(key: str, path: str) -> Any:
    """The object named by ``path``, the dotted path given as option ``key`` (``ogb.lsc.MAG240MEvaluator``).

    Raises:
        ConfigError: nothing importable has that path.
    """
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(key, path, f"cannot be imported ({error})") from error
