"""`make profile` and `make bench` on CPU: the profile command on the tiny protocol for arm C, a
small bench, and the table arithmetic on hand-made numbers."""
import json
import shutil
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT
from harness.core.paths import frozen_dir
from harness.spec import lock
from tests.tiny_protocol import freeze_tiny, make_tiny_protocol
from tools.profile import Profile, format_table, main, stage_rows, summary


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    return freeze_tiny(tmp_path_factory.mktemp("profile"))


def test_profile_command_arm_c_on_the_tiny_protocol(frozen, capsys):
    import arms.c_heircommit
    round_fn = arms.c_heircommit.run_round
    proto, results = frozen
    before = sorted(p.relative_to(results) for p in results.rglob("*"))
    assert main(["--protocol", str(proto), "--arm", "C", "--results-dir", str(results)]) == 0
    assert arms.c_heircommit.run_round is round_fn     # timed through harness.core.timing, nothing swapped
    printed = capsys.readouterr().out
    out = results / "bench" / f"profile_{proto.name}_C.json"
    s = json.loads(out.read_text())
    # the frozen tree is untouched: the round ran in a scratch copy; only the JSON was added
    after = sorted(p.relative_to(results) for p in results.rglob("*"))
    assert set(after) - set(before) == {out.relative_to(results), out.parent.relative_to(results)}
    rows = {r["stage"]: r for r in s["stages"]}
    for stage in ("propose", "gate", "bank", "sampling", "verify", "advantage", "update", "heircommit_screen",
                  "heircommit_confirm", "probe_eval", "io", "other", "round"):
        assert stage in rows, stage
        assert rows[stage]["label"] in printed
    named = sum(r["seconds"] for r in s["stages"] if r["stage"] not in ("other", "round"))
    assert rows["round"]["seconds"] == pytest.approx(s["round_seconds"], abs=1e-3)
    assert rows["other"]["seconds"] == pytest.approx(s["round_seconds"] - named, abs=1e-3)
    assert rows["other"]["seconds"] > -0.01            # the stages lie inside the round's wall clock
    assert sum(r["share"] for r in s["stages"] if r["stage"] != "round") == pytest.approx(1.0, abs=1e-3)
    assert s["run_start_seconds"] > 0                  # the runner's "rounds" mark split the start off
    t = s["throughput"]
    assert t["solver_sampling_bytes_per_s"] > 0 and t["update_tokens_per_s"] > 0 and t["train_flops_per_s"] > 0
    assert 0 < t["decode_bytes"] <= t["decode_row_steps"]
    assert 0.0 <= t["train_padding_fraction"] < 1.0
    c = s["cpu_target"]
    assert c["share"] == pytest.approx((c["verification_s"] + c["gate_s"]) / s["round_seconds"], abs=2e-3)
    assert ("met" if c["met"] else "NOT MET") in printed and "CPU target" in printed
    assert s["notes"] == []


def test_profile_refuses_an_unfrozen_protocol(tmp_path, capsys):
    proto = make_tiny_protocol(tmp_path, name="never_frozen")
    assert main(["--protocol", str(proto), "--arm", "A", "--results-dir", str(tmp_path / "results")]) == 2
    assert "run `make freeze PROTOCOL=never_frozen RESULTS=" in capsys.readouterr().err


def test_profile_refuses_a_frozen_protocol_whose_source_changed(frozen, tmp_path, capsys):
    """A profile measures the code the protocol was frozen with: the run in the scratch copy checks
    the lock like any run, so a library file changed since the freeze is named and refused."""
    proto, results = frozen
    copy = tmp_path / "results"
    shutil.copytree(frozen_dir(results, proto.name), frozen_dir(copy, proto.name))
    path = frozen_dir(copy, proto.name) / lock.LOCK_NAME
    old = lock.read_lock(path)
    path.unlink()   # as if frozen from another version of sampling.py
    lock.write_lock(path, {**old["entries"], "src/harness/learning/sampling.py": "0" * 64},
                    {k: v for k, v in old["meta"].items() if k != "created"})
    assert main(["--protocol", str(proto), "--arm", "A", "--results-dir", str(copy)]) == 2
    assert "changed: src/harness/learning/sampling.py" in capsys.readouterr().err


@pytest.mark.long  # the benchmark suite end to end (`make bench` runs it for its figures)
def test_bench_small_run_writes_ratios(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run_all", "--n", "16", "--size", "tiny", "--max-bytes", "32",
                           "--train-steps", "2", "--out", str(out)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["checks"] == {"methods_agree": True, "same_outputs": True, "sampler_same_outputs": True,
                                 "heldout_same_value": True}
    r = figures["ratios"]
    v = figures["verifier"]["verdicts_per_s"]
    # verdicts/s are rounded to 0.1: at a few verdicts/s that alone moves the ratio by a few percent
    rounding = 0.05 / v["mp_spawn"] + 0.05 / v["sandbox"]
    assert r["sandbox_over_mp_process"] == pytest.approx(v["sandbox"] / v["mp_spawn"], rel=0.01 + rounding)
    assert r["kv_speedup"] > 1.0          # recomputing every step is slower, even at 32 bytes
    for key in r:
        assert key in proc.stdout


# ----------------------------------------------------------------------------- arithmetic and printing

def _profile(arm="C", stages=None, rounds=2, round_seconds=20.0, **kw) -> Profile:
    stages = stages if stages is not None else {"gate": 1.0, "sampling": 6.0, "verify": 1.0, "update": 8.0,
                                                "probe_eval": 2.0, "verify_greedy": 0.4, "seal": 0.5}
    return Profile(protocol="p", arm=arm, seed=1, device="cpu", rounds=rounds, round_seconds=round_seconds,
                   stages=stages, run_start_seconds=3.0, solver_bytes=8000, train_tokens=40000,
                   decode={"calls": 4, "rows": 10, "bytes": 5000, "row_steps": 10000, "seconds": 2.5},
                   train={"calls": 2, "steps": 4, "rows": 40, "tokens": 40000, "padded_tokens": 50000, "seconds": 4.0},
                   model={"size": "tiny", "params": 1000, "matmul_params": 600, "n_layer": 2, "d_model": 8}, **kw)


def test_stage_rows_other_and_shares():
    rows = {r["stage"]: r for r in stage_rows(_profile())}
    # per round (2 rounds): 0.5 + 3 + 0.5 + 4 + 1 = 9 s named of 10 s; nested and seal are not added
    assert rows["gate"]["seconds"] == 0.5 and rows["update"]["share"] == 0.4
    assert rows["other"]["seconds"] == pytest.approx(1.0) and rows["round"]["seconds"] == 10.0
    assert "verify_greedy" not in rows and "seal" not in rows
    assert list(rows)[:3] == ["gate", "sampling", "verify"]          # a round's order
    unknown = {r["stage"] for r in stage_rows(_profile(stages={"update": 2.0, "new_stage": 1.0}))}
    assert "new_stage" in unknown                                    # a stage added later is shown, not lost


def test_summary_throughput_and_cpu_target():
    s = summary(_profile())
    t = s["throughput"]
    assert t["solver_sampling_bytes_per_s"] == pytest.approx(4000 / 3.0, abs=0.1)   # per round: 4000 bytes in 3 s
    assert t["decode_bytes_per_s"] == 2000.0 and t["decode_useful_fraction"] == 0.5
    assert t["update_tokens_per_s"] == 5000.0 and t["train_padding_fraction"] == 0.2
    assert t["train_flops_per_s"] == pytest.approx((6 * 600 + 6 * 2 * 8 * 1000) * 10000)   # mean length 1000
    c = s["cpu_target"]
    assert c["verification_s"] == pytest.approx(0.7) and c["share"] == pytest.approx(1.2 / 10) and c["met"]
    worse = summary(_profile(stages={"gate": 4.0, "verify": 1.0, "update": 2.0}))
    assert not worse["cpu_target"]["met"] and "NOT MET" in format_table(worse)
    text = format_table(s)
    assert "round total" in text and "sealing (after the last round): 0.500 s" in text and "50% of row-steps" in text
    a = summary(_profile(arm="A", stages={"update": 8.0}))
    assert a["throughput"]["solver_sampling_bytes_per_s"] is None and "sampler: n/a on solver rollouts" in format_table(a)
