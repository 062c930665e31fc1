"""``python seeds.py`` in a checkout is ``graphormer-urpe sweep``."""

from __future__ import annotations

import seeds
from graphormer_urpe.commands import sweep


def test_seeds_py_is_the_sweep_command() -> None:
    assert seeds.main is sweep.main
