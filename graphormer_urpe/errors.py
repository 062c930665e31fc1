"""The project's exceptions and option checks; imports nothing of the package (see docs/contributing.md)."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from typing import Any

#: Exit code of every refusal of bad input.
EXIT_BAD_INPUT = 2


class InputError(Exception):
    """Input that cannot be used; the message names the file, row or option, and what to change."""


class ConfigError(InputError, ValueError):
    """An option's value that cannot work: ``key=value: rule``, the key dotted as on the command line."""

    def __init__(self, key: str, value: object, rule: str) -> None:
        self.key = key
        super().__init__(f"{key}={shown(value)}: {rule}")


class DataError(InputError, ValueError):
    """The data cannot be used as configured (a column, a value, a split, a kind of target)."""


class DatasetMissing(InputError, RuntimeError):
    """Raw files are absent and cannot be downloaded; the message says what to put where."""


class CheckpointError(InputError, RuntimeError):
    """A checkpoint cannot be read or does not fit the model; the message names the file and the mismatch."""


class Refused(SystemExit):
    """A command stopped on bad input (an :class:`InputError`, logged by the commands' ``exit_codes``): exit code 2,
    the message as its text."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_BAD_INPUT)
        self.message = message

    def __str__(self) -> str:
        return self.message


class CacheError(RuntimeError):
    """A cache file is missing, truncated or inconsistent."""


class SubmissionError(ValueError):
    """A leaderboard submission file, or the predictions for one, would be refused by the leaderboard."""


class NonFiniteLoss(RuntimeError):
    """Training stopped at a NaN or infinite loss (``graphormer-urpe train`` exits with code 3)."""


class SeedsUnfinished(RuntimeError):
    """Seeds of a ``graphormer-urpe sweep`` did not finish (exit code 4); the message names each one's cause and the
    seeds its summary covers."""


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


def check_number(
    key: str,
    value: object,
    minimum: float,
    maximum: float | None = None,
    *,
    include_minimum: bool = True,
    include_maximum: bool = True,
    hint: str = "",
) -> None:
    """Raise :class:`ConfigError` unless ``value`` is a finite number from ``minimum`` to ``maximum`` (None: no end)."""
    number = (_is_int(value) or isinstance(value, float)) and value == value and abs(value) != float("inf")
    above = number and (value >= minimum if include_minimum else value > minimum)
    below = number and (maximum is None or (value <= maximum if include_maximum else value < maximum))
    if above and below:
        return
    if maximum is None:
        allowed = f"{'>=' if include_minimum else '>'} {minimum:g}"
    else:
        allowed = f"in {'[' if include_minimum else '('}{minimum:g}, {maximum:g}{']' if include_maximum else ')'}"
    raise ConfigError(key, value, f"must be a number {allowed}{hint}")


def check_choice(key: str, value: object, choices: Collection[object]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(key, value, f"expected one of {', '.join(shown(c) for c in choices)}")


def import_object(key: str, path: str) -> Any:
    """The object named by ``path``, the dotted path given as option ``key``; :class:`ConfigError` if none."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(key, path, f"cannot be imported ({error})") from error
