"""``python train.py`` in a checkout is ``graphormer-urpe train``."""

from __future__ import annotations

import train
from graphormer_urpe.commands import train as train_command


def test_train_py_is_the_train_command() -> None:
    assert train.main is train_command.main
