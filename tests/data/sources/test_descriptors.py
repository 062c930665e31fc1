from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import Descriptors

from graphormer_urpe.data.sources.descriptors import (
    ESTATE_REDUCTIONS,
    DescriptorReference,
    descriptor_reference,
    normalised_descriptors,
    raw_descriptors,
)
from graphormer_urpe.testing.data_packages import sample_molecules


def reference(quantiles: list[list[float]]) -> DescriptorReference:
    names = tuple(f"d{k}" for k in range(len(quantiles)))
    return DescriptorReference(names, np.asarray(quantiles, dtype=np.float64), {}, "sha")


def test_values_map_through_the_reference_cdf_with_ties_at_their_mid_rank() -> None:
    # quantiles at 0, 25, 50, 75, 100 %: the value 0 fills the first three (mid-rank 25 %), 1 is at 75 %, 2 at 100 %
    ref = reference([[0.0, 0.0, 0.0, 1.0, 2.0]])
    raw = np.array([[0.0], [1.0], [1.5], [2.0], [3.0], [-1.0], [np.nan]])
    expected = 2 * np.array([0.25, 0.75, 0.875, 1.0, 1.0, 0.0, np.nan]) - 1
    np.testing.assert_array_equal(ref.normalise(raw)[:, 0], expected.astype(np.float32))


def test_a_descriptor_constant_on_the_reference_says_below_at_or_above() -> None:
    ref = reference([[0.0] * 5])
    for tails in ("clip", "extend"):
        values = ref.normalise(np.array([[-2.0], [0.0], [1.0]]), tails)[:, 0]
        np.testing.assert_array_equal(values, [-1.0, 0.0, 1.0])
    assert ref.informative.tolist() == []


def test_extended_tails_continue_the_scale_logarithmically_outside_the_reference() -> None:
    # range [0, 2]: mean slope 2 / 2 = 1 per unit; 1 unit above the top is 1 + ln(1 + 2 * 1 / 2) = 1 + ln 2
    ref = reference([[0.0, 0.0, 0.0, 1.0, 2.0]])
    raw = np.array([[3.0], [2.0 + 1e-9], [-4.0], [1.5], [np.nan], [1e30]])
    extended = ref.normalise(raw, "extend")[:, 0]
    expected = [1 + np.log(2.0), 1.0, -1 - np.log(5.0), 0.75, np.nan, 1 + np.log1p(1e30)]
    np.testing.assert_allclose(extended, np.asarray(expected, np.float32), rtol=1e-6)
    inside = ref.normalise(raw[[3, 4]], "clip")
    np.testing.assert_array_equal(ref.normalise(raw[[3, 4]], "extend"), inside)  # only the tails differ
    order = np.linspace(-50.0, 50.0, 2001).reshape(-1, 1)
    assert (np.diff(ref.normalise(order, "extend")[:, 0]) >= 0).all()  # monotone across both ends of the range
    with pytest.raises(ValueError, match="tails='log'"):
        ref.normalise(raw, "log")  # type: ignore[arg-type]


def test_the_reference_median_maps_to_zero_and_every_value_lies_in_the_unit_interval() -> None:
    ref = descriptor_reference()
    medians = ref.quantiles[:, ref.quantiles.shape[1] // 2]
    varying = ref.informative
    # a median shared by a run of equal quantiles maps to that run's mid-rank instead; check the strictly ranked ones
    unique = [k for k in varying if np.sum(ref.quantiles[k] == medians[k]) == 1]
    assert len(unique) > 50
    np.testing.assert_allclose(ref.normalise(medians)[unique], 0.0, atol=1e-6)
    aspirin = normalised_descriptors(Chem.MolFromSmiles("CC(=O)Oc1ccccc1C(=O)O"))
    assert aspirin.shape == (len(ref.names),) and aspirin.dtype == np.float32
    assert np.nanmin(aspirin) >= -1.0 and np.nanmax(aspirin) <= 1.0


def test_every_reference_descriptor_is_rdkits_own_value_bit_for_bit() -> None:
    """The E-state indices computed once a molecule (ESTATE_REDUCTIONS) give what RDKit's four functions give, and
    every other descriptor is RDKit's function's value: on drug-like, charged, one-atom and salt molecules."""
    names = descriptor_reference().names
    assert set(ESTATE_REDUCTIONS) <= set(names)
    functions = dict(Descriptors.descList)
    smiles = [s for s, _ in sample_molecules(40)] + [
        "CC(=O)Oc1ccccc1C(=O)O",
        "[NH4+]",
        "C",
        "[Na+].[Cl-]",
        "O=[N+]([O-])c1ccccc1",
    ]
    for text in smiles:
        mol = Chem.MolFromSmiles(text)
        expected = np.full(len(names), np.nan)
        for k, name in enumerate(names):
            try:
                expected[k] = float(functions[name](mol))
            except Exception:  # noqa: BLE001 -- as raw_descriptors: RDKit's failure is a missing value
                continue
        expected[~np.isfinite(expected)] = np.nan
        np.testing.assert_array_equal(raw_descriptors(mol, names), expected, err_msg=text)


def test_raw_values_are_rdkits_and_failures_are_missing() -> None:
    mol = Chem.MolFromSmiles("c1ccccc1O")
    values = raw_descriptors(mol, ["MolWt", "NumHDonors"])
    assert values.tolist() == [Descriptors.MolWt(mol), 1.0]

    class Broken:
        pass

    assert np.isnan(raw_descriptors(Broken(), ["MolWt"])).all()  # RDKit raises on a non-molecule: missing, no crash


def test_the_shipped_reference_covers_every_rdkit_descriptor_with_sorted_quantiles() -> None:
    ref = descriptor_reference()
    assert set(ref.names) == {name for name, _ in Descriptors.descList}
    assert (np.diff(ref.quantiles, axis=1) >= 0).all()
    assert ref.provenance["molecules"] == 20_000


@pytest.mark.parametrize("smiles", ["[Na+].[Cl-]", "C", "O=[N+]([O-])c1ccccc1"])
def test_unusual_molecules_give_finite_or_missing_values_never_an_error(smiles: str) -> None:
    values = normalised_descriptors(Chem.MolFromSmiles(smiles))
    known = values[~np.isnan(values)]
    assert len(known) > 100 and np.all(np.abs(known) <= 1.0)
