from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from graphormer_urpe.errors import DataError
from graphormer_urpe.evaluation.ensemble import ensemble_split


@pytest.fixture(scope="module")
def two_seeds(small_table: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    import train
    from graphormer_urpe.testing.runs import small_run_args

    base = tmp_path_factory.mktemp("ensemble")
    checkpoints = []
    for seed in (0, 1):
        train.main(small_run_args(small_table, base / "data", base / "runs", "--run_name", f"s{seed}",
                                  "--seed_everything", str(seed), "--trainer.max_steps", "4",
                                  "--trainer.val_check_interval", "2"))
        checkpoints.append(sorted((base / "runs" / f"s{seed}" / "checkpoints").glob("best-*.ckpt"))[-1])
    return checkpoints


@pytest.mark.slow
def test_the_ensemble_predicts_the_mean_of_its_members_and_scores_it(two_seeds: list[Path], tmp_path: Path) -> None:
    result = ensemble_split(two_seeds, tmp_path, "test")
    table = pd.read_csv(result["predictions"])
    assert len(table) == result["rows"] == 6  # the scaffold split's test rows of the 60-molecule table
    for target in ("gap_ev", "mu_debye"):
        members = table[[f"member0_{target}", f"member1_{target}"]].to_numpy()
        np.testing.assert_allclose(table[f"ensemble_{target}"], members.mean(axis=1), rtol=0, atol=1e-12)
        truth = table[target].to_numpy()
        known = ~np.isnan(truth)
        expected = np.mean(np.abs(table[f"ensemble_{target}"].to_numpy()[known] - truth[known]))
        assert result["ensemble"][f"mae/{target}"] == pytest.approx(expected, rel=1e-12)
        member_mae = np.mean(np.abs(table[f"member0_{target}"].to_numpy()[known] - truth[known]))
        assert result["member_metrics"][0][f"mae/{target}"] == pytest.approx(member_mae, rel=1e-12)
    assert result["ensemble"]["mae"] == pytest.approx(np.mean([result["ensemble"]["mae/gap_ev"],
                                                               result["ensemble"]["mae/mu_debye"]]))


@pytest.mark.slow
def test_members_of_another_table_are_refused(two_seeds: list[Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from graphormer_urpe.evaluation import ensemble

    real = ensemble.embedded_config
    calls = []

    def other_table_for_the_second(checkpoint: Path) -> str:
        calls.append(checkpoint)
        text = real(checkpoint)
        return text.replace("small.csv", "other.csv") if len(calls) == 3 else text

    monkeypatch.setattr(ensemble, "embedded_config", other_table_for_the_second)
    with pytest.raises(DataError, match="share one table and targets"):
        ensemble_split(two_seeds, tmp_path, "test")


def test_an_ensemble_needs_a_run() -> None:
    with pytest.raises(DataError, match="at least one finished run"):
        ensemble_split([], Path("."), "test")


def test_a_config_that_is_not_a_smiles_table_is_refused() -> None:
    from graphormer_urpe.evaluation.ensemble import split_table

    config = "data:\n  init_args:\n    source:\n      class_path: graphormer_urpe.data.sources.QM9\n"
    with pytest.raises(DataError, match="predicts the rows of a SMILES table"):
        split_table(config, "test")
