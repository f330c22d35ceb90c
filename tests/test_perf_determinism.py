"""The speed paths change no result: a round of arms B and C on the default path and on the plain
path (RunSettings(plain=True): full prefill per row, no row compaction, noise drawn up front, verification
after sampling) gives byte-identical records, ledger, archive and checkpoints, and the default path
really took its shortcuts (fewer row-steps decoded, greedy-pass verdicts requested while decoding)."""
import math
import shutil
import threading
from pathlib import Path

import pytest
import torch
import yaml

from harness.core.settings import RunSettings, SettingsError, Speed
from harness.freeze.freeze import freeze
from harness.learning import sampling, training
from harness.learning.checkpoint import load_base
from harness.learning.model import SIZES, Transformer
from harness.learning.sampling import COMPACT_FLOOR, GumbelStream, _keep_slots, gumbel_noise, sample
from harness.running import evaluation
from harness.running.runner import run
from harness.spec.protocol import load_protocol
from tests.tiny_protocol import make_tiny_protocol

# bigger groups and probe sets than the tiny protocol, so decode batches hold more than
# COMPACT_FLOOR rows and rows finish at scattered steps
PERF = {"budget": {"G": 8, "tasks_per_round": 6, "max_bytes": 80, "proposals_per_batch": 18},
        "tasks": {"probe": {"size": 40}, "confirm": {"per_round": 20}, "calibration": {"size": 40}},
        "model": {"base": {"steps": 100}}}


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """The perf protocol frozen with one run seed and the arms A, B, C, P only (the tests run B and C):
    freeze's pilot then runs 4 runs, not 12."""
    base = tmp_path_factory.mktemp("perf")
    proto = make_tiny_protocol(base, name="perf", seeds={"run_seeds": [1]},
                               decision={"spread_rule": {"test": "range", "multiplier": 1.0}}, **PERF)
    arms = yaml.safe_load((proto / "arms.yaml").read_text())
    (proto / "arms.yaml").write_text(yaml.safe_dump({a: arms[a] for a in ("A", "B", "C", "P")}, sort_keys=False))
    results = base / "results"
    freeze(str(proto), results, out=lambda *a: None)
    return proto, results


def run_round0(frozen, dst: Path, arm: str, plain: bool, monkeypatch) -> tuple[dict[str, bytes], int, list[bool]]:
    """Round 0 of arm x seed 1 in a fresh copy of the frozen protocol. Returns (file bytes,
    decode row-steps, for every greedy-pass verifier call whether it ran off the main thread)."""
    proto, results = frozen
    shutil.copytree(results / proto.name / "frozen", dst / proto.name / "frozen")
    threads: list[bool] = []
    real_verify = evaluation.verify_many

    def recording_verify(pairs):
        threads.append(threading.current_thread() is not threading.main_thread())
        return real_verify(pairs)

    monkeypatch.setattr(evaluation, "verify_many", recording_verify)
    steps0 = sampling.TOTALS.row_steps
    settings = RunSettings(results_dir=dst, progress="off", tracking=False, plain=plain)
    rdir = run(str(proto), arm, 1, settings=settings, stop_after_round=0)
    monkeypatch.setattr(evaluation, "verify_many", real_verify)
    files = {n: (rdir / n).read_bytes() for n in ("records.jsonl", "ledger.jsonl", "archive.jsonl") if (rdir / n).exists()}
    files.update({p.name: p.read_bytes() for p in (rdir / "checkpoints").iterdir()})
    return files, sampling.TOTALS.row_steps - steps0, threads


@pytest.mark.parametrize("arm", ["B", "C"])
def test_default_and_plain_paths_give_identical_records(frozen, tmp_path, monkeypatch, arm):
    plain, plain_steps, plain_threads = run_round0(frozen, tmp_path / "plain", arm, True, monkeypatch)
    fast, fast_steps, fast_threads = run_round0(frozen, tmp_path / "fast", arm, False, monkeypatch)
    assert sorted(fast) == sorted(plain) and "round0.pt" in fast and "ledger.jsonl" in fast
    for name in plain:
        assert fast[name] == plain[name], f"{name} differs between the default and the plain path"
    # not vacuous: the default path decoded fewer row-steps and verified greedy rows while decoding
    assert fast_steps < 0.9 * plain_steps
    assert plain_threads and not any(plain_threads)
    assert fast_threads and all(fast_threads)


# ----------------------------------------------------------------------------- the sampler on its own

@pytest.fixture(scope="module")
def base_model(frozen):
    proto, results = frozen
    return load_base(results, load_protocol(str(proto)), "cpu")


@pytest.fixture(scope="module")
def prompts(frozen):
    from harness.spec.frozen import load_sets
    from harness.spec.protocol import load_protocol
    proto, results = frozen
    return [t.prompt for t in load_sets(results, load_protocol(str(proto)))["probe"]]


def _sample_both(model, prompts, **kw):
    out = {}
    for plain in (True, False):
        before = sampling.TOTALS.row_steps
        out[plain] = (sample(model, prompts, speed=Speed(plain=plain), **kw), sampling.TOTALS.row_steps - before)
    return out


def test_rollouts_identical_and_cheaper(base_model, prompts):
    rollouts = [p for p in prompts[:6] for _ in range(8)]   # shared prompts: one prefill each
    out = _sample_both(base_model, rollouts, max_bytes=80, temperature=1.0, seed=11, batch_size=32)
    (plain, plain_steps), (fast, fast_steps) = out[True], out[False]
    assert fast == plain
    assert len({c.n_bytes for c in plain}) > 5          # rows really finish at different steps
    assert fast_steps < plain_steps
    assert sum(c.n_bytes for c in fast) <= fast_steps   # every byte was decoded by some row-step


def test_greedy_identical_and_cheaper(base_model, prompts):
    out = _sample_both(base_model, prompts, max_bytes=80, temperature=0.0)
    (plain, plain_steps), (fast, fast_steps) = out[True], out[False]
    assert fast == plain and fast_steps < plain_steps


def test_on_row_done_reports_each_row_once_and_early(base_model, prompts):
    seen: list[tuple[int, sampling.Completion]] = []
    comps = sample(base_model, prompts, max_bytes=80, temperature=1.0, seed=3, on_row_done=lambda i, c: seen.append((i, c)))
    assert sorted(i for i, _ in seen) == list(range(len(prompts)))
    assert all(comps[i] == c for i, c in seen)
    lengths = [c.n_bytes for _, c in seen]
    assert lengths == sorted(lengths) and len(set(lengths)) > 3   # reported in the order the rows finish


def test_lazy_noise_equals_noise_drawn_up_front():
    rows, max_bytes = [0, 5, 2], 70
    eager = gumbel_noise(9, rows, max_bytes)
    stream = GumbelStream(9, rows, max_bytes, chunk=32, device=torch.device("cpu"))
    for step in range(40):
        assert torch.equal(stream.at(step), eager[:, step])
    stream.keep([0, 2], torch.tensor([0, 2]))    # slot 1 leaves the batch in the middle of a chunk
    for step in range(40, max_bytes):
        assert torch.equal(stream.at(step), eager[[0, 2], step])


def test_keep_slots_floor_and_threshold():
    n = 64
    assert _keep_slots([False] * n) is None                       # nothing finished
    assert _keep_slots([True] * 4 + [False] * (n - 4)) is None    # fewer than an eighth finished
    done = [i % 2 == 0 for i in range(n)]
    assert _keep_slots(done) == [i for i in range(n) if i % 2]    # half finished: keep the live half
    keep = _keep_slots([True] * (n - 3) + [False] * 3)
    assert len(keep) == COMPACT_FLOOR and {n - 3, n - 2, n - 1} <= set(keep)   # topped up to the floor
    assert _keep_slots([True] * 10 + [False] * 2) is None        # a batch under the floor never shrinks


def test_speed_settings_come_from_the_run_settings_not_the_environment(monkeypatch):
    assert RunSettings().speed == Speed()
    assert RunSettings(plain=True, autocast="off").speed == Speed(autocast="off", plain=True)
    assert RunSettings(autocast="bf16", compile=True).speed == Speed(autocast="bf16", compile=True)
    with pytest.raises(SettingsError, match="plain='yes': expected true or false"):
        RunSettings(plain="yes")
    with pytest.raises(SettingsError, match="autocast='fp8'"):
        RunSettings(autocast="fp8")
    monkeypatch.setenv("HARNESS_AUTOCAST", "bf16")  # the old switch: no library code reads it any more
    assert RunSettings().speed.autocast == "auto"
    cpu = torch.device("cpu")
    assert Speed().autocast_dtype(cpu) is None                     # CPU stays float32 by default
    assert Speed(autocast="bf16").autocast_dtype(cpu) == torch.bfloat16
    assert Speed(autocast="bf16", plain=True).autocast_dtype(cpu) is None


def test_bf16_autocast_path_runs_with_float32_logits(monkeypatch):
    model = Transformer(SIZES["tiny"], seed=0)
    with Speed(autocast="bf16").autocast_context(torch.device("cpu")):
        logits = model(torch.tensor([[1, 2, 3]]))
    assert logits.dtype == torch.float32
    comps = sample(model, ["def f(x):\n"] * 4, max_bytes=12, temperature=1.0, seed=0, speed=Speed(autocast="bf16"))
    assert len(comps) == 4 and all(1 <= c.n_bytes <= 12 for c in comps)
    before = [p.detach().clone() for p in model.parameters()]
    stats = training.train_steps(model, training.make_optimizer(model, 1e-2, 0.0), [("P:", "abc")], n_steps=2,
                                 batch_size=1, seed=0, speed=Speed(autocast="bf16"))
    assert stats["steps"] == 2 and math.isfinite(stats["mean_loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_training_totals_count_padding():
    model = Transformer(SIZES["tiny"], seed=0)
    before = training.TrainTotals(**vars(training.TOTALS))
    pairs = [("P:", "a"), ("P:", "abcdefghij")]     # one batch of two: the short one is padded
    stats = training.train_steps(model, training.make_optimizer(model, 1e-3, 0.0), pairs, n_steps=1, batch_size=2, seed=0)
    tokens = training.TOTALS.tokens - before.tokens
    padded = training.TOTALS.padded_tokens - before.padded_tokens
    assert tokens == stats["tokens"] == (2 + 1 + 1 - 1) + (2 + 10 + 1 - 1)
    assert padded == 2 * (2 + 10 + 1 - 1) and training.TOTALS.rows - before.rows == 2
