"""The benchmarks' shared measures (bench/common.py): the padding share of batches, by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from bench.common import BenchError, configuration, padded_share
from graphormer_urpe.configs import shipped_config


def test_padded_share_by_hand() -> None:
    sizes = np.array([1, 3, 2, 3])  # tokens with the graph token: 2, 4, 3, 4
    # one process pads [0, 1] to 4 tokens: useful 4 + 16 of 32; [2, 3]: 9 + 16 of 32
    assert padded_share(sizes, [np.array([0, 1]), np.array([2, 3])]) == pytest.approx(1 - 45 / 64)
    # two processes: every slice holds one graph, nothing is padding
    assert padded_share(sizes, [np.array([0, 1]), np.array([2, 3])], world=2) == 0.0
    assert padded_share(sizes, [np.array([0, 1, 2, 3])], graph_token=False) == pytest.approx(1 - 23 / 36)


def test_an_arms_configuration_is_the_config_with_its_options_set_where_the_config_holds_them() -> None:
    """The options' dotted keys land where the command line puts them (through ``init_args``), a top-level key the
    config holds too; the sweep's own flags and a value the config already holds change nothing."""
    config = {
        "init_from": "pretrained",
        "trainer": {"max_epochs": 80},
        "data": {
            "class_path": "Module",
            "init_args": {"batch_size": 32, "source": {"class_path": "Table", "init_args": {"path": "a.csv"}}},
        },
    }
    windowed = json.loads(json.dumps(config))
    windowed["data"]["init_args"]["bucket_window"] = 4
    fingerprints = json.loads(json.dumps(config))
    fingerprints["data"]["init_args"]["source"]["init_args"]["fingerprints"] = "ecfp"
    assert configuration("--config c --data.bucket_window 4", config) == configuration("--config c", windowed)
    assert configuration("--config c --data.source.fingerprints ecfp", config) == configuration(
        "--config c", fingerprints
    )
    assert configuration("--config c --ensemble --trees --kernel", config) == configuration("--config c", config)
    assert configuration("--config c --trainer.max_epochs 80", config) == configuration("--config c", config)
    assert configuration("--config c --trainer.max_epochs 81", config) != configuration("--config c", config)
    assert configuration("--config c --data.batch_size 16", config) != configuration("--config c", config)
    assert configuration("--config c --init_from null", config) != configuration("--config c", config)
    with pytest.raises(BenchError, match="no --config"):
        configuration("--data.batch_size 16")
    assert config["data"]["init_args"] == {"batch_size": 32, "source": config["data"]["init_args"]["source"]}
    shipped = yaml.safe_load(shipped_config("small_molecules").read_text())
    assert configuration("--config small_molecules") == configuration("--config c", shipped)
