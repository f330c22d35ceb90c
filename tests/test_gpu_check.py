"""`make gpu-check` on CPU: the script end to end in tiny mode, the carried-wheel install path with
no package index (hand-built wheels), the missing-piece lines, and the projection and target
arithmetic on hand-made numbers."""
import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from tools.gpu_check import TARGET_EXPERIMENT_S, project_wall, targets
from tools.preflight import requirements

SCRIPT = PROJECT_ROOT / "tools" / "gpu_check.sh"


def _script(env: dict, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PY": sys.executable, **env}
    env.pop("PYTHONPATH", None)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def make_wheel(folder: Path, name: str, version: str = "1.0", requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel: module `name` with VERSION, optional Requires-Dist lines."""
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA": "Metadata-Version: 2.1\n" f"Name: {name}\nVersion: {version}\n"
             + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(t.encode())}\n" for p, t in files.items())
    files[f"{name}-{version}.dist-info/RECORD"] = record + f"{name}-{version}.dist-info/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, t in files.items():
            z.writestr(p, t)
    return path


def test_install_path_uses_only_the_carried_wheels(tmp_path):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("# what the machine lacks\ngpucheckprobe>=1.0\n")
    env = {"WHEELS": str(wheels), "SITE": str(site), "GPU_CHECK_REQUIREMENTS": str(reqs), "GPU_CHECK_INSTALL_ONLY": "1"}
    # nothing carried: one line naming the wheel, nothing installed
    proc = _script(env, "--tiny")
    assert proc.returncode == 1
    assert "[gpu-check] missing: a wheel for gpucheckprobe>=1.0 in" in proc.stderr and not site.exists()
    # a carried wheel whose own dependency was not carried: pip (no index) names it
    make_wheel(wheels, "gpucheckprobe", requires=("gpuchecklost>=2",))
    proc = _script(env, "--tiny")
    assert proc.returncode == 1
    assert "missing: No matching distribution found for gpuchecklost>=2 (from gpucheckprobe) (not among the carried wheels)" in proc.stderr
    # both carried: installed into SITE from the folder alone, and importable from there
    make_wheel(wheels, "gpuchecklost", version="2.1")
    proc = _script(env, "--tiny")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed: every requirement imports" in proc.stdout
    assert (site / "gpucheckprobe" / "__init__.py").exists() and (site / "gpuchecklost" / "__init__.py").exists()
    assert "torch 2.13" in proc.stderr   # the interpreter's own torch, reported, never installed


def test_missing_pieces_are_one_line_each_before_anything_is_installed(tmp_path):
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("gpucheckone\ngpuchecktwo==3.0\n")
    proc = _script({"WHEELS": str(tmp_path / "absent"), "SITE": str(tmp_path / "site"), "GPU_CHECK_REQUIREMENTS": str(reqs)})
    missing = [line for line in proc.stderr.splitlines() if line.startswith("[gpu-check] missing: ")]
    assert proc.returncode == 1 and len(missing) == 2, proc.stderr
    assert "a CUDA device: torch 2.13" in missing[0] and "a CPU build of torch" in missing[0]   # no --tiny here
    assert f"the carried wheels: {tmp_path / 'absent'}/ does not exist" in missing[1]
    proc = _script({"PY": "no-such-python3"})
    assert proc.returncode == 1 and "missing: python: 'no-such-python3' is not on PATH" in proc.stderr


def test_requirements_come_from_pyproject_without_torch():
    reqs = dict(requirements())
    assert "torch" not in reqs and reqs["hydra-core"] == "1.3" and reqs["mlflow"] == "3.0" and reqs["omegaconf"] == "2.3"


@pytest.mark.long  # a minute of a 2-core machine; the install path and the report's arithmetic have their own tests
def test_gpu_check_runs_end_to_end_in_tiny_mode_on_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = _script({"SITE": str(tmp_path / "site")}, "--tiny", "--device", "cpu", "--base-steps", "30", "--out", str(out),
                   timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["protocol"] == "tiny" and r["mode"] == "tiny" and r["environment"]["device"] == "cpu"
    assert r["environment"]["torch"].startswith("2.13") and "torch_cuda" in r["environment"]
    assert r["sandbox"]["ok"] and r["sandbox"]["capabilities"]["degraded"] is False
    assert any("shrunk from 60 to 30 steps" in n for n in r["notes"]) and "shrunk from 60 to 30 steps" in proc.stdout
    assert sorted(r["arms"]) == ["A", "B", "C", "D", "N", "P"]  # every registered arm, controls included
    for arm, s in r["arms"].items():
        assert s["round_seconds"] > 0 and s["stages"][-1]["stage"] == "round"
    tr = r["training"]
    assert tr["fraction_of_matmul"] == pytest.approx(tr["flops_per_s"] / r["matmul"]["flops_per_s"], rel=1e-2)
    assert r["matmul"]["dtype"] == "float32"                 # CPU: the float32 reference, labelled
    assert r["decode"]["full_rows"] and r["decode"]["max_bytes"] == 64 and r["decode"]["bytes_per_s"] > 0
    if importlib.util.find_spec("harness.freeze.pilot") is None:
        assert r["pilot"] == {"available": False, "reason": "harness/freeze/pilot.py does not exist in this checkout"}
    else:   # freeze ran the pilot; its figures come from the pilot.json it left
        assert r["pilot"]["available"] and 0 <= r["pilot"]["base_pass_rate"] <= 1, r["pilot"]
    pj = r["projection"]
    assert (pj["rounds"], pj["seeds"]) == (2, 2) and pj["freeze_s"] > r["freeze"]["seconds"]   # 30 steps projected back
    expected = pj["freeze_s"] + 2 * sum(pj["per_run_s"].values()) + pj["readout_s"]
    assert pj["total_s"] == pytest.approx(expected, abs=0.5)   # each figure is rounded to 0.1 s
    t = r["targets"]
    assert t["sampling_not_largest"]["met"] == all(v["stage"] != "sampling" for v in t["sampling_not_largest"]["largest"].values())
    assert t["experiment_within_1h"]["met"] == (pj["total_s"] <= 3600)
    assert "projected experiment" in proc.stdout


# ----------------------------------------------------------------------------- arithmetic

def test_projection_arithmetic():
    pj = project_wall({"A": 10.0, "B": 20.0, "C": 30.0}, {"A": 1.0, "B": 2.0, "C": 3.0}, rounds=10, seeds=3,
                      freeze_s=100.0, readout_s=12.0)
    assert pj["per_run_s"] == {"A": 101.0, "B": 202.0, "C": 303.0}
    assert pj["total_s"] == 100.0 + 3 * 606.0 + 12.0 and pj["total_h"] == pytest.approx(1930 / 3600, abs=1e-3)


def _arm(stages: dict[str, float]) -> dict:
    total = sum(stages.values())
    rows = [{"stage": k, "seconds": v, "share": v / total} for k, v in stages.items()]
    return {"stages": rows + [{"stage": "other", "seconds": 100.0, "share": 0.0}, {"stage": "round", "seconds": total, "share": 1.0}]}


def test_targets_name_what_holds_them_back():
    arms = {"A": _arm({"update": 5.0, "probe_eval": 1.0}), "B": _arm({"sampling": 6.0, "update": 5.0})}
    training = {"fraction_of_matmul": 0.2, "per_arm": {"A": {"fraction_of_matmul": 0.25}, "B": {"fraction_of_matmul": 0.1}}}
    pj = {"total_s": 4000.0, "per_run_s": {"A": 100.0, "B": 900.0}}
    t = targets(arms, training, pj)
    assert not t["training_vs_matmul"]["met"] and t["training_vs_matmul"]["held_back_by"] == {"A": 0.25, "B": 0.1}
    assert not t["sampling_not_largest"]["met"] and t["sampling_not_largest"]["largest"]["B"]["stage"] == "sampling"
    assert t["sampling_not_largest"]["largest"]["A"]["stage"] == "update"     # "other" is never a stage
    h = t["experiment_within_1h"]
    assert not h["met"] and h["held_back_by"]["slowest_arm"] == "B" and h["held_back_by"]["its_largest_stage"]["stage"] == "sampling"
    ok = targets({"A": arms["A"]}, {"fraction_of_matmul": 0.31, "per_arm": {}}, {"total_s": TARGET_EXPERIMENT_S, "per_run_s": {"A": 1.0}})
    assert all(v["met"] for v in ok.values()) and not any("held_back_by" in v for v in ok.values())
