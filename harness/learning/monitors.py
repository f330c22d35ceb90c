"""Collapse monitors over sampled completions (template collapse, recycling, dead groups).

Input: `groups`, a list over I inputs (prompts) of G_i completion strings each. Completions are
treated as whole strings: Y is the completion, X the input, uniform over the I inputs.

    within_input_entropy = H(Y | X)           bits; mean over inputs of the plug-in entropy
    cross_input_mi       = H(Y) - H(Y | X)    bits; in [0, log2 I]
    zero_spread_fraction                      fraction of groups whose rewards are all equal

    cross_input_line_mi  I(X; L)                bits; L a line of a completion (see below)
    cross_input_structure_mi  I(X; S)           bits; S the completion's program structure (see below)

Entropy alone is the wrong stability signal: a model that answers every input with the same
template keeps its within-input entropy while the mutual information between input and output
falls to 0. Plug-in estimates are bounded by log2 G_i (and MI by log2 I) and biased low for small G.

Whole-string MI sits at its ceiling log2 I whenever different inputs get different completions,
which for distinct programs is almost always: it cannot move until collapse is total. The line
MI treats a completion as the lines it is made of (each completion's lines share its weight), so
lines that many inputs' answers share ("    return x") keep it below the ceiling, and answers
that drift toward one template lower it gradually.

The structure MI masks every constant of a completion (numbers, string literals) and its blank
space (`program_structure`): inputs whose answers are the same program up to constants share a
value, so it stays below log2 I where the probes share program shapes, and it falls to 0 when every
input is answered with one template whatever its constants (whole-string MI does not move then).

`with_noise` gives each monitor an interval from the sampling noise of identical weights: the
completions of each input are resampled with replacement (a fresh draw from the same weights,
approximately), and the interval is the value +- z * the resampled standard deviation.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np


def _check_groups(groups: list[list], what: str) -> None:
    if not groups:
        raise ValueError(f"{what}: need at least one group, got none")
    empty = [i for i, g in enumerate(groups) if len(g) == 0]
    if empty:
        raise ValueError(f"{what}: group(s) {empty[:10]} are empty; every input needs at least one sample")


def entropy_bits(weights) -> float:
    """Plug-in entropy (bits) of non-negative weights, normalised here; zero weights add 0. The
    formula of scipy.stats.entropy(weights, base=2) (the tests hold it to that), without its
    per-call input handling: `with_noise` takes about 2,000 entropies per evaluation, and scipy's
    wrapper alone made them half of a small run's time."""
    p = np.asarray(weights, dtype=float)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log2(p)).sum())


def _conditionals(groups: list[list[str]]) -> list[Counter]:
    return [Counter(g) for g in groups]


def within_input_entropy(groups: list[list[str]]) -> float:
    """Mean over the I inputs of the entropy (bits) of the empirical distribution of distinct
    completions in the input's group. groups: I lists of G_i strings. 0 when every group is a
    single repeated completion; log2 G when each group's G completions are all distinct."""
    _check_groups(groups, "within_input_entropy")
    return float(np.mean([entropy_bits(list(c.values())) for c in _conditionals(groups)]))


def cross_input_mi(groups: list[list[str]]) -> float:
    """I(X; Y) = H(Y) - H(Y | X) in bits, X uniform over the I inputs, Y | X the empirical
    distribution of the input's completions, H(Y) the entropy of their equal-weight mixture.
    0 when the completion distribution does not depend on the input (template collapse);
    log2 I when each input has its own completions, disjoint from the others'."""
    _check_groups(groups, "cross_input_mi")
    return _mi(_conditionals(groups))


def _line_conditionals(groups: list[list[str]]) -> list[Counter]:
    """Per input: line -> weight, each completion's lines sharing weight 1 (an empty one is one "")."""
    out = []
    for g in groups:
        c: Counter = Counter()
        for text in g:
            lines = text.split("\n") if text else [""]
            lines = [ln for ln in lines if ln.strip()] or [""]
            for ln in lines:
                c[ln] += 1.0 / len(lines)
        out.append(c)
    return out


def _mi(conds: list[Counter]) -> float:
    """H(Y) - H(Y | X) in bits over per-input weight counters (X uniform over the inputs)."""
    marginal: Counter = Counter()
    for c in conds:
        n = sum(c.values())
        for y, k in c.items():
            marginal[y] += k / (n * len(conds))
    h_y = entropy_bits(list(marginal.values()))
    h_y_given_x = np.mean([entropy_bits(list(c.values())) for c in conds])
    return float(max(h_y - h_y_given_x, 0.0))  # clip float round-off below 0


def cross_input_line_mi(groups: list[list[str]]) -> float:
    """I(X; L) in bits, X uniform over the I inputs, L | X a line of one of the input's completions
    (each completion's non-blank lines share its weight). 0 when every input's answers are made of
    the same lines; below log2 I whenever inputs' answers share lines."""
    _check_groups(groups, "cross_input_line_mi")
    return _mi(_line_conditionals(groups))


_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')
_NUMBER = re.compile(r"(?<![A-Za-z_0-9])\d+(?:\.\d+)?")


def program_structure(text: str) -> str:
    """A completion with its constants masked: string literals -> "S", numbers -> N, each line's
    blank space collapsed, blank lines dropped. Two programs that differ only in constants map to
    the same structure."""
    masked = _NUMBER.sub("N", _STRING.sub('"S"', text))
    return "\n".join(" ".join(line.split()) for line in masked.split("\n") if line.strip())


def cross_input_structure_mi(groups: list[list[str]]) -> float:
    """I(X; S) in bits, X uniform over the I inputs, S | X the program structure
    (`program_structure`) of the input's completions. 0 when every input's answers share one
    structure distribution (template collapse, whatever the constants); log2 I only when no two
    inputs' answers share a structure."""
    _check_groups(groups, "cross_input_structure_mi")
    return _mi(_conditionals([[program_structure(t) for t in g] for g in groups]))


MONITORS = {"within_entropy": within_input_entropy, "cross_mi": cross_input_mi, "line_mi": cross_input_line_mi,
            "structure_mi": cross_input_structure_mi}


def with_noise(groups: list[list[str]], seed: int, n_resamples: int = 100, z: float = 1.96) -> dict[str, float]:
    """Every monitor of MONITORS as `monitor_<name>`, with `monitor_<name>_lo` / `_hi`: the value
    +- z * its standard deviation over `n_resamples` resamplings of each input's completions
    (with replacement; numpy's seeded generator). Bits."""
    _check_groups(groups, "with_noise")
    rng = np.random.default_rng(seed)
    resampled = [[[g[j] for j in rng.integers(0, len(g), len(g))] for g in groups] for _ in range(n_resamples)]
    out = {}
    for name, fn in MONITORS.items():
        value = fn(groups)
        sd = float(np.std([fn(r) for r in resampled], ddof=1)) if n_resamples > 1 else 0.0
        out.update({f"monitor_{name}": value, f"monitor_{name}_lo": value - z * sd, f"monitor_{name}_hi": value + z * sd})
    return out


def zero_spread_fraction(rewards_by_group: list[list[float]]) -> float:
    """Fraction of groups (in [0, 1]) whose rewards are all equal (e.g. all-pass or all-fail): such
    a group has zero mean-centred advantage and carries no learning signal."""
    _check_groups(rewards_by_group, "zero_spread_fraction")
    return float(np.mean([np.ptp(np.asarray(r, dtype=float)) == 0.0 for r in rewards_by_group]))


def round_monitors(groups: list[list[str]], rewards_by_group: list[list[float]], bank_report: dict) -> dict[str, float]:
    """All of a round's collapse monitors in one flat dict of floats (bits, or fractions in [0, 1]).
    `rewards_by_group[i]` are the rewards of `groups[i]`'s completions; `bank_report` is
    `Bank.round_report(round)`."""
    if len(groups) != len(rewards_by_group):
        raise ValueError(f"round_monitors: {len(groups)} completion groups but {len(rewards_by_group)} reward groups")
    sizes = [(i, len(g), len(r)) for i, (g, r) in enumerate(zip(groups, rewards_by_group)) if len(g) != len(r)]
    if sizes:
        i, ng, nr = sizes[0]
        raise ValueError(f"round_monitors: group {i} has {ng} completions but {nr} rewards")
    if "cross_round_duplicate_rate" not in bank_report:
        raise ValueError(f"round_monitors: bank_report lacks 'cross_round_duplicate_rate' (keys: {sorted(bank_report)})")
    h_y_given_x = within_input_entropy(groups)
    mi = cross_input_mi(groups)
    return {"within_input_entropy": h_y_given_x,
            "cross_input_mi": mi,
            "cross_input_line_mi": cross_input_line_mi(groups),
            "cross_input_structure_mi": cross_input_structure_mi(groups),
            "completion_entropy": h_y_given_x + mi,  # H(Y) = H(Y|X) + I(X;Y)
            "zero_spread_fraction": zero_spread_fraction(rewards_by_group),
            "cross_round_duplicate_rate": float(bank_report["cross_round_duplicate_rate"])}
