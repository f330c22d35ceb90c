"""Collapse monitors: hand-computed entropies and mutual information, the template-collapse case,
zero-spread groups, and the per-round bundle."""
import math

import pytest

from harness.learning.monitors import (
    cross_input_line_mi,
    cross_input_mi,
    round_monitors,
    with_noise,
    within_input_entropy,
    zero_spread_fraction,
)


def test_identical_completions_everywhere_have_no_entropy_and_no_information():
    groups = [["return x"] * 4 for _ in range(5)]
    assert within_input_entropy(groups) == 0.0
    assert cross_input_mi(groups) == 0.0


def test_one_deterministic_completion_per_input_carries_log2_inputs_bits():
    groups = [[f"return {i}"] * 3 for i in range(8)]
    assert within_input_entropy(groups) == 0.0
    assert cross_input_mi(groups) == pytest.approx(math.log2(8))


def test_uniform_distinct_completions_give_log2_group_size():
    G = 16
    groups = [[f"in{i}/out{j}" for j in range(G)] for i in range(3)]
    assert within_input_entropy(groups) == pytest.approx(math.log2(G))
    assert cross_input_mi(groups) == pytest.approx(math.log2(3))  # disjoint supports across inputs


def test_hand_computed_mixed_case():
    # X uniform over two inputs; Y|x0 = {a: 1/2, b: 1/2}, Y|x1 = {a: 1}; marginal Y = {a: 3/4, b: 1/4}.
    groups = [["a", "a", "b", "b"], ["a", "a", "a", "a"]]
    h_y_given_x = (1.0 + 0.0) / 2
    h_y = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert within_input_entropy(groups) == pytest.approx(h_y_given_x)
    assert cross_input_mi(groups) == pytest.approx(h_y - h_y_given_x)


def test_unequal_group_sizes_weight_inputs_equally():
    # Input 0 has 2 samples, input 1 has 6; X stays uniform, so the marginal is {a: 1/2, b: 1/2}.
    groups = [["a", "a"], ["b"] * 6]
    assert cross_input_mi(groups) == pytest.approx(1.0)


def test_template_collapse_keeps_entropy_but_loses_information():
    inputs = 6
    healthy = [[f"return f{i}(x)", f"return f{i}(x) "] for i in range(inputs)]  # input-specific, 2 variants
    collapsed = [["return x", "return x "] for _ in range(inputs)]  # same template whatever the input
    assert within_input_entropy(healthy) == pytest.approx(1.0)
    assert within_input_entropy(collapsed) == pytest.approx(1.0)  # entropy alone does not see it
    assert cross_input_mi(healthy) == pytest.approx(math.log2(inputs))
    assert cross_input_mi(collapsed) == pytest.approx(0.0, abs=1e-12)


def test_line_mi_is_below_its_ceiling_when_answers_share_lines_and_falls_with_drift():
    programs = [f"    x = x + {i}\n    return x\n" for i in range(8)]
    healthy = [[p, p] for p in programs]
    assert cross_input_mi(healthy) == pytest.approx(3.0)            # whole strings: at the ceiling log2 8
    # lines: each input's own first line (1/16 each in the marginal) and the shared "return x" (1/2):
    # H(L) = 8 * (1/16) * 4 + 1/2 * 1 = 2.5 bits, H(L|X) = 1 bit, so I(X;L) = 1.5 bits < 3
    assert cross_input_line_mi(healthy) == pytest.approx(1.5)
    drift = [[p, "    x = x + 0\n    return x\n"] for p in programs]  # half of every group drifts to one template
    assert cross_input_line_mi(drift) < cross_input_line_mi(healthy)
    assert cross_input_mi(drift) < 3.0 and cross_input_line_mi([[programs[0]]] * 8) == pytest.approx(0.0, abs=1e-12)


def test_intervals_come_from_resampling_the_same_completions():
    groups = [[f"    x = x + {i}\n    return x\n", f"    x = x * {i}\n    return x\n", "    return x\n", "    x = -x\n"]
              for i in range(6)]
    out = with_noise(groups, seed=3, n_resamples=50)
    assert out == with_noise(groups, seed=3, n_resamples=50)
    for name in ("within_entropy", "cross_mi", "line_mi"):
        assert out[f"monitor_{name}_lo"] < out[f"monitor_{name}"] < out[f"monitor_{name}_hi"], name
    assert out["monitor_within_entropy"] == pytest.approx(within_input_entropy(groups))
    fixed = with_noise([["a"] * 4, ["b"] * 4], seed=0)  # nothing to resample: a zero-width interval
    assert fixed["monitor_within_entropy_lo"] == fixed["monitor_within_entropy_hi"] == 0.0


def test_zero_spread_fraction():
    assert zero_spread_fraction([[1, 1, 1], [0, 0, 0], [1, 0, 1], [0.5, 0.5]]) == pytest.approx(0.75)
    assert zero_spread_fraction([[0, 1]]) == 0.0
    assert zero_spread_fraction([[0.3]]) == 1.0


def test_round_monitors_bundle():
    groups = [["a", "b"], ["c", "c"]]
    rewards = [[1.0, 0.0], [1.0, 1.0]]
    out = round_monitors(groups, rewards, {"cross_round_duplicate_rate": 0.25, "checked": 4})
    assert out["within_input_entropy"] == pytest.approx(0.5)
    assert out["cross_input_mi"] == pytest.approx(cross_input_mi(groups))
    assert out["completion_entropy"] == pytest.approx(1.5)  # marginal {a: 1/4, b: 1/4, c: 1/2}
    assert out["zero_spread_fraction"] == 0.5
    assert out["cross_round_duplicate_rate"] == 0.25
    assert all(isinstance(v, float) for v in out.values())


def test_bad_input_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="at least one group"):
        within_input_entropy([])
    with pytest.raises(ValueError, match=r"group\(s\) \[1\] are empty"):
        cross_input_mi([["a"], []])
    with pytest.raises(ValueError, match="group 0 has 2 completions but 1 rewards"):
        round_monitors([["a", "b"]], [[1.0]], {"cross_round_duplicate_rate": 0.0})
    with pytest.raises(ValueError, match="cross_round_duplicate_rate"):
        round_monitors([["a"]], [[1.0]], {"checked": 1})


def test_structure_mi_is_below_its_ceiling_and_drops_on_a_template_collapse():
    """Whole-string MI sits at log2 I whenever inputs get different constants; the structure MI
    masks the constants, so inputs that share a program's shape share its value, and an answer
    collapsed onto one template (other constants only) takes it to 0 while whole-string MI stays put."""
    from harness.learning.monitors import cross_input_structure_mi, program_structure
    assert program_structure('    x = x + 17\n    s = s + "ab"\n    return x\n') == program_structure(
        '    x = x + 3\n    s = s + "zz"\n    return x\n')
    templates = ["    x = x + {c}\n    return x\n", "    x = x * {c}\n    return x\n", "    x = abs(x) - {c}\n    return x\n",
                 "    x = x % {c}\n    x = -x\n    return x\n"]
    n_inputs, G = 16, 4
    healthy = [[templates[i % 4].format(c=10 * i + j) for j in range(G)] for i in range(n_inputs)]
    collapsed = [[templates[0].format(c=10 * i + j) for j in range(G)] for i in range(n_inputs)]
    assert cross_input_mi(healthy) == pytest.approx(math.log2(n_inputs)) == pytest.approx(cross_input_mi(collapsed))
    assert cross_input_structure_mi(healthy) == pytest.approx(math.log2(4))  # 4 shapes over 16 inputs: below log2 16
    assert cross_input_structure_mi(collapsed) == 0.0
    noisy = with_noise(healthy, seed=0)
    assert noisy["monitor_structure_mi"] == pytest.approx(2.0)


def test_entropy_bits_is_scipys_entropy_in_bits():
    """The monitors' own entropy, held to scipy's on counts, fractional weights, zeros and one value."""
    import numpy as np
    from scipy.stats import entropy

    from harness.learning.monitors import entropy_bits
    rng = np.random.default_rng(0)
    cases = [[1], [3, 0, 5], [0.25, 0.25, 0.5], list(rng.integers(0, 9, 40)), list(rng.random(17) / 3)]
    for w in cases:
        assert entropy_bits(w) == pytest.approx(float(entropy(w, base=2)), abs=1e-12), w
    assert entropy_bits([7]) == 0.0 and entropy_bits([1, 1, 1, 1]) == pytest.approx(2.0, abs=1e-15)
