"""The numerics fingerprint (harness.learning.numerics): freeze measures it and the lock hashes it; every
run recomputes its own before its first step and a host whose numerics differ is refused, naming the
first differing component and both CPUs; the documented override runs anyway and logs a deviation."""
import json

import pytest

from harness.core import kernels, paths
from harness.learning import numerics
from harness.learning.sizes import SIZES
from harness.running.runner import run
from harness.spec import deviations
from harness.spec.frozen import verify_frozen
from harness.spec.lock import LockError
from harness.spec.protocol import load_protocol
from tests.tiny_protocol import freeze_tiny

HOST_LIST_COMPONENTS = ["matmul_1024x96x288", "matmul_1024x96x256", "matmul_1024x256x96", "matmul_1024x96x96",
                        "matmul_1x96x256", "matmul_333x1000x77", "forward", "backward", "train_30_steps"]


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    return freeze_tiny(tmp_path_factory.mktemp("numerics"))


def _other_host(component: str):
    """A compute() that gives this host's bytes except at `component`: what a host of another kind gives."""
    real = numerics.compute

    def compute(cfg, threads, steps=numerics.TRAIN_STEPS):
        out = real(cfg, threads, steps)
        out[component] = "0" * 16
        return out
    return compute


def test_the_fingerprint_is_deterministic_and_in_the_host_lists_order():
    """Same host, same bytes; the smoke size's components are the host list's nine (then the optimizer's),
    narrowest first, so that the first difference says where two hosts part."""
    a = numerics.compute(SIZES["smoke"], 1)
    b = numerics.compute(SIZES["smoke"], 1)
    assert a == b
    assert list(a) == [*HOST_LIST_COMPONENTS[:8], "sqrt_exp_log", "adamw_update", "train_1_step", "train_10_steps", "train_30_steps"]
    assert all(len(v) == 16 and int(v, 16) >= 0 for v in a.values())
    assert numerics.first_difference(a, {**a, "forward": "x"}) == "forward"
    assert numerics.first_difference(a, dict(a)) is None


def test_computing_the_fingerprint_leaves_the_threads_as_they_were():
    import torch
    before = torch.get_num_threads()
    numerics.compute(SIZES["tiny"], 2, steps=2)
    assert torch.get_num_threads() == before


def test_freeze_writes_the_fingerprint_and_the_lock_hashes_it(frozen):
    proto, results = frozen
    protocol = load_protocol(str(proto))
    lock = verify_frozen(protocol, results)
    assert "frozen/numerics.json" in lock["entries"]
    fp = numerics.read_frozen(results, protocol.name)
    assert fp.size == "tiny" and fp.cpu == numerics.host_cpu()
    assert set(fp.by_threads) == {str(protocol.model.run_threads), str(protocol.model.base.torch_threads)}
    path = paths.numerics_path(results, protocol.name)
    saved = path.read_bytes()
    try:
        path.write_text(json.dumps({**fp.to_dict(), "cpu": "another CPU"}))
        with pytest.raises(LockError, match="numerics.json"):
            verify_frozen(protocol, results)
    finally:
        path.write_bytes(saved)


def test_a_run_records_the_fingerprint_it_ran_on(frozen):
    proto, results = frozen
    protocol = load_protocol(str(proto))
    rdir = run(str(proto), "A", 1, results, progress=False, tracking=False, stop_after_round=0)
    start = json.loads((rdir / "records.jsonl").read_text().splitlines()[0])
    fp = numerics.read_frozen(results, protocol.name)
    assert start["kernels"]["numerics"] == fp.digest(protocol.model.run_threads)


def test_a_host_with_other_numerics_is_refused_before_its_first_step(frozen, monkeypatch):
    proto, results = frozen
    protocol = load_protocol(str(proto))
    monkeypatch.delenv(numerics.ALLOW_ENV, raising=False)
    monkeypatch.setattr(numerics, "compute", _other_host("backward"))
    monkeypatch.setattr(numerics, "_HERE", {})  # this process measured its host already
    with pytest.raises(numerics.NumericsError) as err:
        run(str(proto), "B", 1, results, progress=False, tracking=False, stop_after_round=0)
    msg = str(err.value)
    assert "\n" not in msg and "at backward" in msg and numerics.ALLOW_ENV in msg
    assert msg.count(numerics.host_cpu()) == 2  # this host's CPU and the freezing host's, both named
    assert not (paths.run_dir(results, protocol.name, "B", 1) / "records.jsonl").exists()  # no step was taken
    assert deviations.read_deviations(results, protocol.name)["entries"] == []


def test_the_override_runs_anyway_and_logs_a_deviation(frozen, monkeypatch):
    proto, results = frozen
    protocol = load_protocol(str(proto))
    monkeypatch.setenv(numerics.ALLOW_ENV, "1")
    monkeypatch.setattr(numerics, "compute", _other_host("train_30_steps"))
    monkeypatch.setattr(numerics, "_HERE", {})
    rdir = run(str(proto), "B", 2, results, progress=False, tracking=False, stop_after_round=0)
    entries = deviations.read_deviations(results, protocol.name)["entries"]
    mine = [e for e in entries if "B seed 2" in e["what"]]
    assert len(mine) == 1 and "at train_30_steps" in mine[0]["what"] and numerics.ALLOW_ENV in mine[0]["why"]
    start = json.loads((rdir / "records.jsonl").read_text().splitlines()[0])
    frozen_fp = numerics.read_frozen(results, protocol.name)
    assert start["kernels"]["numerics"] != frozen_fp.digest(protocol.model.run_threads)


def test_a_freeze_resumed_on_another_host_is_refused(frozen, monkeypatch):
    proto, results = frozen
    protocol = load_protocol(str(proto))
    monkeypatch.setattr(numerics, "compute", _other_host("matmul_1024x64x192"))
    monkeypatch.setattr(numerics, "_HERE", {})
    with pytest.raises(numerics.NumericsError, match="at matmul_1024x64x192.*freeze again on one host"):
        numerics.freeze_fingerprint(results, protocol.name, SIZES["tiny"], "tiny", [1], out=lambda *a: None)


def test_runs_on_two_hosts_numerics_are_two_kernel_paths():
    """The readout's and the resume's kernel-path check names a sweep or a run that mixes two hosts."""
    a = {"cpu_capability": "avx2", "threads": 1, "mkl_cbwr": "AVX2", "onednn_max_cpu_isa": "AVX2",
         "machine": "x86_64", "numerics": "aaaa"}
    assert kernels.differs(a, {**a, "numerics": "bbbb"}) == ["numerics aaaa != bbbb"]
    assert kernels.differs(a, dict(a)) == []


def test_a_damaged_fingerprint_file_is_one_line(tmp_path):
    path = paths.numerics_path(tmp_path, "p")
    path.parent.mkdir(parents=True)
    path.write_text('{"cpu": "x"}')
    with pytest.raises(numerics.NumericsError, match="not a numerics fingerprint"):
        numerics.read_frozen(tmp_path, "p")
    path.write_text("{not json")
    with pytest.raises(numerics.NumericsError, match="cannot be read as JSON"):
        numerics.read_frozen(tmp_path, "p")


def test_a_host_other_than_the_registrations_is_refused_before_the_base(tmp_path, monkeypatch):
    """A protocol that registers the fingerprint of the host it was sized on (sized_on_numerics.json) refuses,
    under on_other_base: refuse, a host whose numerics differ before building anything, naming the component."""
    from harness.core import records
    from harness.freeze.freeze import REGISTERED_NUMERICS, freeze
    from tests.tiny_protocol import make_tiny_protocol
    proto = make_tiny_protocol(tmp_path, "registered")
    protocol = load_protocol(str(proto))
    here = numerics.measure(SIZES["tiny"], "tiny", [1])
    other = numerics.Fingerprint("a CPU of another kind", here.torch, "tiny",
                                 {"1": {**here.by_threads["1"], "forward": "f" * 16}})
    (proto / REGISTERED_NUMERICS).write_text(records.canonical_json(other.to_dict()))
    results = tmp_path / "results"
    with pytest.raises(numerics.NumericsError) as err:
        freeze(str(proto), results, out=lambda *a: None, progress=False)
    msg = str(err.value)
    assert "\n" not in msg and "at forward" in msg and "a CPU of another kind" in msg and here.cpu in msg
    assert not paths.set_paths(results, protocol.name)["base"].exists()  # refused before the base was built
    (proto / REGISTERED_NUMERICS).write_text(records.canonical_json(here.to_dict()))
    from harness.freeze.freeze import numerics_identity_lines
    lines = numerics_identity_lines(load_protocol(str(proto)), here)
    assert len(lines) == 1 and "the same bytes" in lines[0]
