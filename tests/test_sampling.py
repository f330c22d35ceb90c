import dataclasses
from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from harness.learning.model import SIZES, Transformer
from harness.learning.sampling import END_ID, Completion, greedy_no_cache, sample
from harness.learning.training import make_optimizer, train_steps

PROMPTS = ["def f(x):\n", "a", "hello world, a longer prompt than the others\n", "xy", "def f(s):\n    \"\"\"Upper"]


@pytest.fixture(scope="module")
def model64():
    return Transformer(SIZES["tiny"], seed=1).double()


@pytest.fixture(scope="module")
def stopper():
    """A tiny model taught to answer three prompts with completions of different lengths + END."""
    pairs = [("A?", "ok"), ("Bb?", "a longer answer"), ("C?", "mid size")]
    model = Transformer(SIZES["tiny"], seed=0)
    train_steps(model, make_optimizer(model, 3e-3, 0.0), pairs, n_steps=150, batch_size=3, seed=0)
    return model.double(), pairs


def test_greedy_kv_equals_no_cache(model64):
    got = sample(model64, PROMPTS, max_bytes=60, temperature=0)
    want = [greedy_no_cache(model64, p, 60) for p in PROMPTS]
    assert [c.text for c in got] == want
    assert len(set(want)) == len(want)  # the prompts really decode differently


def test_greedy_no_cache_path_in_batch(model64):
    assert sample(model64, PROMPTS, max_bytes=40, temperature=0, use_cache=False) == \
        sample(model64, PROMPTS, max_bytes=40, temperature=0)


def test_same_seed_same_samples_different_seed_different(model64):
    prompts = PROMPTS * 3
    a = sample(model64, prompts, max_bytes=30, temperature=1.0, seed=7, batch_size=4)
    b = sample(model64, prompts, max_bytes=30, temperature=1.0, seed=7, batch_size=4)
    c = sample(model64, prompts, max_bytes=30, temperature=1.0, seed=8, batch_size=4)
    assert a == b
    assert sum(x.text != y.text for x, y in zip(a, c)) >= len(prompts) - 1
    # repeated prompts get different rollouts
    assert len({x.text for x in a[::len(PROMPTS)]}) == 3


def test_samples_do_not_depend_on_batch_size_or_cache(model64):
    prompts = PROMPTS * 2
    ref = sample(model64, prompts, max_bytes=25, temperature=0.8, seed=3, batch_size=256)
    assert sample(model64, prompts, max_bytes=25, temperature=0.8, seed=3, batch_size=1) == ref
    assert sample(model64, prompts, max_bytes=25, temperature=0.8, seed=3, batch_size=3) == ref
    assert sample(model64, prompts, max_bytes=25, temperature=0.8, seed=3, batch_size=3, use_cache=False) == ref


def test_tiny_temperature_is_greedy(model64):
    greedy = sample(model64, PROMPTS, max_bytes=30, temperature=0)
    assert sample(model64, PROMPTS, max_bytes=30, temperature=1e-9, seed=5) == greedy


def _first_byte_category(c: Completion) -> str:
    """Completion text is decoded with errors="replace", so a lone byte >= 128 reads as U+FFFD;
    such bytes form one category."""
    if c.ended:
        return "END"
    return "high" if c.text == "\ufffd" else c.text


def test_first_byte_frequencies_follow_softmax_at_temperature():
    model = Transformer(SIZES["tiny"], seed=2)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # a peaked distribution, so a few bytes carry the mass
    prompt, n, temperature = "def f(x):", 3000, 0.7
    with torch.no_grad():
        logits = model(torch.tensor([list(prompt.encode())]))[0, -1].double()
    observed = Counter(_first_byte_category(c) for c in
                       sample(model, [prompt] * n, max_bytes=1, temperature=temperature, seed=11))

    def chi2_pvalue(t: float) -> float:
        probs = torch.softmax(logits / t, -1)
        p = {"END": float(probs[END_ID]), "high": float(probs[128:].sum())}
        p.update({chr(b): float(probs[b]) for b in range(1, 128)})
        big = sorted(k for k in p if p[k] * n >= 20)
        rest = [k for k in p if k not in big]
        obs = [observed[k] for k in big] + [sum(observed[k] for k in rest)]
        exp = [p[k] * n for k in big] + [sum(p[k] for k in rest) * n]
        assert len(big) >= 3
        return chisquare(obs, exp).pvalue

    assert chi2_pvalue(temperature) > 1e-3
    assert chi2_pvalue(1.0) < 1e-3   # the same test tells another temperature apart


def test_end_stops_a_row_and_budget_is_respected(stopper):
    model, pairs = stopper
    prompts = [p for p, _ in pairs]
    got = sample(model, prompts, max_bytes=40, temperature=0)
    assert got == [Completion(c, len(c) + 1, True) for _, c in pairs]
    # a budget shorter than an answer cuts that row only
    got = sample(model, prompts, max_bytes=5, temperature=0)
    assert got[0] == Completion("ok", 3, True)
    assert got[1] == Completion("a lon", 5, False)
    assert got[2] == Completion("mid s", 5, False)
    assert [greedy_no_cache(model, p, 5) for p in prompts] == ["ok", "a lon", "mid s"]


def test_budget_respected_when_sampling(model64):
    for c in sample(model64, PROMPTS * 4, max_bytes=17, temperature=1.5, seed=0):
        assert 1 <= c.n_bytes <= 17
        assert c.ended or c.n_bytes == 17
        assert END_ID not in c.text.encode()


def test_bad_arguments(model64):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        sample(model64, ["a", ""], max_bytes=4)
    with pytest.raises(ValueError, match="temperature"):
        sample(model64, ["a"], temperature=-1)
    short = Transformer(dataclasses.replace(SIZES["tiny"], max_seq=32))
    with pytest.raises(ValueError, match="prompt 0 .* exceeds the model's max_seq 32"):
        sample(short, ["x" * 10], max_bytes=24)
    assert len(sample(short, ["x" * 10], max_bytes=23, temperature=0)) == 1
