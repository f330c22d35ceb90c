"""`make profile`, `make gpu-check` and `make bench` on CPU: the profile command on the tiny protocol
for arm C, the gpu-check script end to end in tiny mode, a small bench, and the table and
projection arithmetic on hand-made numbers."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT, lock
from harness.freeze import frozen_dir, lock_entries
from harness.profile import (PEAK_BF16_FLOPS, Profile, ProfileError, format_table, main, peak_key, project_wall,
                             scratch_copy, stage_rows, summary)
from harness.protocol import load_protocol
from tests.tiny_protocol import freeze_tiny, make_tiny_protocol

os.environ["HARNESS_NO_TRACKING"] = "1"


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    return freeze_tiny(tmp_path_factory.mktemp("profile"))


def test_profile_command_arm_c_on_the_tiny_protocol(frozen, capsys):
    proto, results = frozen
    before = sorted(p.relative_to(results) for p in results.rglob("*"))
    assert main(["--protocol", str(proto), "--arm", "C", "--results-dir", str(results)]) == 0
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
    t = s["throughput"]
    assert t["solver_sampling_bytes_per_s"] > 0 and t["update_tokens_per_s"] > 0 and t["train_flops_per_s"] > 0
    assert 0 < t["decode_bytes"] <= t["decode_row_steps"]
    assert 0.0 <= t["train_padding_fraction"] < 1.0
    c = s["cpu_target"]
    assert c["share"] == pytest.approx((c["verification_s"] + c["gate_s"]) / s["round_seconds"], abs=2e-3)
    assert ("met" if c["met"] else "NOT MET") in printed and "CPU target" in printed
    assert s["notes"] == []                           # frozen with this very source: no drift


def test_profile_refuses_an_unfrozen_protocol(tmp_path, capsys):
    proto = make_tiny_protocol(tmp_path, name="never_frozen")
    assert main(["--protocol", str(proto), "--arm", "A", "--results-dir", str(tmp_path / "results")]) == 2
    assert "run make freeze PROTOCOL=never_frozen first" in capsys.readouterr().err


def _relock(results, proto, change):
    """Rewrite the lock of a copy with one entry changed (as if it had been frozen from other files)."""
    path = frozen_dir(results, proto.name) / lock.LOCK_NAME
    old = lock.read_lock(path)
    entries = {**old["entries"], change: "0" * 64}
    path.unlink()
    lock.write_lock(path, entries, {k: v for k, v in old["meta"].items() if k != "created"})


def test_scratch_copy_relocks_source_drift_and_refuses_other_drift(frozen, tmp_path):
    proto, results = frozen
    for name, change in (("src", "src/harness/sampling.py"), ("set", "frozen/probe.jsonl")):
        copy = tmp_path / name / "results"
        shutil.copytree(frozen_dir(results, proto.name), frozen_dir(copy, proto.name))
        _relock(copy, proto, change)
        if name == "src":
            _, notes = scratch_copy(str(proto), copy, tmp_path / name / "scratch")
            assert len(notes) == 1 and "harness/sampling.py" in notes[0] and "re-locked" in notes[0]
            scratch = tmp_path / name / "scratch"   # the re-locked copy verifies, as a run will check
            lock.verify_lock(frozen_dir(scratch, proto.name) / lock.LOCK_NAME,
                             lock_entries(load_protocol(str(proto)), scratch))
        else:
            with pytest.raises(ProfileError, match="changed: frozen/probe.jsonl"):
                scratch_copy(str(proto), copy, tmp_path / name / "scratch")


def test_gpu_check_script_runs_end_to_end_in_tiny_mode_on_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "GPU_CHECK_TINY": "1", "GPU_CHECK_OUT": str(out), "GPU_CHECK_VENV": str(PROJECT_ROOT / ".venv"),
           "GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_BASE_STEPS": "30"}
    proc = subprocess.run(["bash", str(PROJECT_ROOT / "scripts" / "gpu_check.sh")], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["protocol"] == "tiny"
    assert any("GPU_CHECK_TINY=1" in n for n in report["notes"])
    assert any("shrunk from 60 to 30 steps" in n for n in report["notes"])
    assert "shrunk from 60 to 30 steps" in proc.stdout
    assert sorted(report["arms"]) == ["A", "B", "C"]
    for arm, a in report["arms"].items():
        assert a["round_seconds"] > 0 and a["train_flops_per_s"] > 0
        assert a["train_fraction_of_peak"] == pytest.approx(a["train_flops_per_s"] / report["peak_flops"], rel=1e-3)
    pj = report["projection"]
    assert (pj["rounds"], pj["seeds"]) == (2, 2)
    # the freeze projection adds the 30 missing warm-up steps to the measured freeze
    assert pj["freeze_s"] > report["freeze_seconds"]
    expected = pj["freeze_s"] + 2 * sum(pj["per_run_s"].values())
    assert pj["total_s"] == pytest.approx(expected, abs=0.5)  # each figure is rounded to 0.1 s
    assert "projected wall time of the full experiment" in proc.stdout


def test_bench_small_run_writes_ratios(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "bench", "--n", "16", "--size", "tiny", "--max-bytes", "32",
                           "--train-steps", "2", "--out", str(out)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["checks"] == {"methods_agree": True, "same_outputs": True, "sampler_same_outputs": True}
    r = figures["ratios"]
    v = figures["verifier"]["verdicts_per_s"]
    assert r["sandbox_over_mp_process"] == pytest.approx(v["sandbox"] / v["mp_spawn"], rel=0.02)
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


def test_projection_arithmetic():
    pj = project_wall({"A": 10.0, "B": 20.0, "C": 30.0}, {"A": 1.0, "B": 2.0, "C": 3.0}, rounds=10, seeds=3, freeze_s=100.0)
    assert pj["per_run_s"] == {"A": 101.0, "B": 202.0, "C": 303.0}
    assert pj["total_s"] == 100.0 + 3 * 606.0 and pj["total_h"] == pytest.approx(1918 / 3600, abs=1e-3)


def test_peak_table_lookup():
    assert peak_key("NVIDIA H200") == "H200" and PEAK_BF16_FLOPS["H200"] == 989e12
    assert peak_key("NVIDIA H100 80GB HBM3") == "H100" and peak_key("NVIDIA H100 PCIe") == "H100 PCIe"
    assert peak_key("NVIDIA GH200 480GB") == "GH200" and peak_key("NVIDIA L40S") == "L40S" and peak_key("NVIDIA L4") == "L4"
    assert peak_key("NVIDIA A100-SXM4-80GB") == "A100" and peak_key("NVIDIA A10G") == "A10G"
    assert peak_key("Tesla T4") is None
