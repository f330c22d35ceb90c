"""Frontier scores against the worked G = 8 tables of the SPICE / Self-Play SWE-RL seed.

Values the seed prints in its text are marked "seed"; the other cells are computed by hand from
the seed's formulas (to 3 decimals) and cross-checked by the symmetry the seed states.
"""
import pytest

from harness.learning import frontier
from harness.learning.frontier import SCORES, admits, score

G = 8
# k = 0..8
TABLE = {
    # the flat-top band [0.4, 0.6] holds only k = 4 at G = 8 (0.375 and 0.625 fall outside)
    "flat_top": [0, 0, 0, 0, 1, 0, 0, 0, 0],
    # seed: k=4 -> 1.000, k=1 and k=7 -> 0.372, k=8 -> 0.044
    "spice_variance": [0.044, 0.372, 0.823, 0.988, 1.000, 0.988, 0.823, 0.372, 0.044],
    # seed: k=1 and k=7 -> 0.250
    "rzero": [0, 0.25, 0.5, 0.75, 1, 0.75, 0.5, 0.25, 0],
    # seed: p=0 -> 1.0, k=1 -> 0.875, k=7 -> 0.125
    "azr": [1, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0],
    # seed: 1 for 1 <= k <= 7, 0 for k in {0, 8}
    "threshold": [0, 1, 1, 1, 1, 1, 1, 1, 0],
    # seed: k=0 -> -0.800, k=1 -> +0.775 (the jump of 1.575), alpha = 0.8
    "ssr_injector": [-0.8, 0.775, 0.55, 0.325, 0.1, -0.125, -0.35, -0.575, -0.8],
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_scores_match_the_worked_table_at_G8(name):
    got = [score(name, k, G) for k in range(G + 1)]
    assert got == pytest.approx(TABLE[name], abs=5e-4)


def test_registry_holds_exactly_the_six_shapes_and_default_is_flat_top():
    assert set(SCORES) == set(TABLE)
    assert frontier.DEFAULT_SCORE == "flat_top"


def test_unknown_score_lists_the_known_ones():
    with pytest.raises(KeyError) as err:
        score("spice", 4, 8)
    msg = str(err.value)
    assert "spice" in msg and "spice_variance" in msg and "flat_top" in msg


def test_ssr_cliff_between_k0_and_k1_is_1_575():
    assert score("ssr_injector", 1, 8) - score("ssr_injector", 0, 8) == pytest.approx(1.575)


def test_spice_width_knob_matches_the_seed_alternatives_at_k7():
    # the seed recomputes k=7/8 at a narrower (2 tau = 0.005) and a wider (2 tau = 0.08) width
    assert score("spice_variance", 7, 8, tau=0.0025) == pytest.approx(0.019, abs=5e-4)
    assert score("spice_variance", 7, 8, tau=0.04) == pytest.approx(0.781, abs=5e-4)


def test_invalid_task_scores():
    assert score("ssr_injector", 4, 8, valid=False) == -1.0
    assert score("spice_variance", 4, 8, valid=False) == -0.1  # SPICE's rho
    assert score("flat_top", 4, 8, valid=False) == 0.0
    assert not admits("flat_top", 4, 8, valid=False)


def test_azr_original_convention_zeroes_both_degenerate_ends():
    assert score("azr", 0, 8, degenerate_zero=True) == 0.0
    assert score("azr", 8, 8, degenerate_zero=True) == 0.0
    assert score("azr", 1, 8, degenerate_zero=True) == pytest.approx(0.875)


def test_flat_top_band_edges_are_parameters_and_inclusive():
    # at G = 5 the default band's edges are reachable: 2/5 = 0.4 and 3/5 = 0.6
    assert [admits("flat_top", k, 5) for k in range(6)] == [False, False, True, True, False, False]
    assert [admits("flat_top", k, 8, lo=0.25, hi=0.75) for k in range(9)] == (
        [False, False, True, True, True, True, True, False, False])


@pytest.mark.parametrize("name,expected", [
    ("flat_top", [0, 0, 0, 0, 1, 0, 0, 0, 0]),
    ("spice_variance", [0, 1, 1, 1, 1, 1, 1, 1, 0]),
    ("rzero", [0, 1, 1, 1, 1, 1, 1, 1, 0]),
    ("threshold", [0, 1, 1, 1, 1, 1, 1, 1, 0]),
    ("azr", [1, 1, 1, 1, 1, 1, 1, 1, 0]),
    ("ssr_injector", [0, 1, 1, 1, 1, 0, 0, 0, 0]),
])
def test_admits_per_score_at_G8(name, expected):
    assert [int(admits(name, k, 8)) for k in range(9)] == expected


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="k .*got 9"):
        score("rzero", 9, 8)
    with pytest.raises(ValueError, match="G .*got 0"):
        score("rzero", 0, 0)
    with pytest.raises(ValueError, match="k .*got 0.5"):
        score("rzero", 0.5, 8)
    with pytest.raises(ValueError, match="alpha"):
        score("ssr_injector", 1, 8, alpha=1.5)
    with pytest.raises(ValueError, match="band"):
        score("flat_top", 1, 8, lo=0.7, hi=0.6)
