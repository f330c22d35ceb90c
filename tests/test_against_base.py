"""Every arm against the base: the reading and its p-values point the way the gap does, on the case
that misled the item sign test (12 seeds against the base's one outcome per item)."""
import numpy as np
import pytest

from harness.readout import controls


def _bits(row) -> str:
    return "".join(str(int(x)) for x in row)


def _arm_below_the_base(down: float, up: float, seed: int = 0, n: int = 512, k: int = 12):
    """(finals, bases) for one arm "B": a base passing about 20 % of n items; each of k seeds fails an item the
    base passes with P `down` and passes one it fails with P `up`."""
    rng = np.random.default_rng(seed)
    base = rng.random(n) < 0.2
    arm = np.where(base[None], rng.random((k, n)) > down, rng.random((k, n)) < up)
    return ({"B": {s + 1: _bits(arm[s]) for s in range(k)}}, {"B": {s + 1: _bits(base) for s in range(k)}})


@pytest.mark.parametrize("down, up", [(0.40, 0.05), (0.45, 0.03)])
def test_an_arm_below_the_base_reads_damage_not_a_significant_above(down, up):
    finals, bases = _arm_below_the_base(down, up)
    row = controls.against_base(finals, bases, alpha=0.05)["B"]
    c = row.paired
    assert c.gap < -0.03  # 3.5 and 6 pts below the base
    assert row.reading == "below the base (damage)"
    assert row.p_below < 1e-4 and row.p_above > 0.99
    # what misled the table before: more items lean "above" than "below" (one seed passing an item the base
    # fails is enough), so the sign test on the items' signs reads above or nothing while the rate falls
    assert c.hi_only > c.lo_only and c.sign_p_less > 0.5


def test_no_change_reads_not_distinguishable_and_an_identical_arm_has_p_1():
    rng = np.random.default_rng(3)
    n, k = 512, 12
    base = rng.random(n) < 0.3
    # the arm's pass rate per item is the base's rate overall, drawn afresh: no gain, no loss
    arm = rng.random((k, n)) < 0.3
    row = controls.against_base({"X": {s + 1: _bits(arm[s]) for s in range(k)}},
                                {"X": {s + 1: _bits(base) for s in range(k)}}, alpha=0.05)["X"]
    assert abs(row.paired.gap) < 0.02 and row.reading == "not distinguishable from the base"
    same = controls.against_base({"X": {1: _bits(base), 2: _bits(base)}}, {"X": {1: _bits(base), 2: _bits(base)}},
                                 alpha=0.05)["X"]
    assert (same.p_above, same.p_below, same.reading) == (1.0, 1.0, "not distinguishable from the base")


def test_the_reading_test_keeps_its_level_when_the_arm_equals_the_base_in_rate():
    """Arms whose items' pass rates average the base's (items drawn at random, 4 seeds): the one-sided
    test says "above" in about alpha of them, not in most (the sign test's lean)."""
    rng = np.random.default_rng(11)
    n, k, reps, above, sign_above = 256, 4, 400, 0, 0
    for _ in range(reps):
        rate = rng.beta(0.5, 1.5, n)  # items of every difficulty; mean 0.25
        base = rng.random(n) < rate
        arm = rng.random((k, n)) < rate
        row = controls.against_base({"X": {s + 1: _bits(arm[s]) for s in range(k)}},
                                    {"X": {s + 1: _bits(base) for s in range(k)}}, alpha=0.05)["X"]
        above += row.p_above < 0.05
        sign_above += row.paired.sign_p_greater < 0.05
    assert above / reps < 0.05 + 3 * (0.05 * 0.95 / reps) ** 0.5  # within 3 s.e. of alpha
    assert sign_above / reps > 0.5  # the sign test, by contrast, leans "above" in most of them
