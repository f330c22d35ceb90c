"""The kernel path is part of the recipe (harness.core.kernels): the harness applies the registered
path itself, whatever the caller's environment, and refuses what cannot honour it; `replicate`
re-runs a sealed run and names the first difference."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT
from harness.core import kernels, paths, records
from harness.core.kernels import KernelRecipe
from harness.core.settings import RunSettings
from harness.readout.analyzer import ReadoutError, compute_verdict
from harness.running import replicate as rep
from harness.running.runner import RunError, execute, run
from harness.spec.frozen import KERNELS_ENTRY, load_sets, verify_frozen
from harness.spec.protocol import load_protocol
from harness.tasks.splits import load_tasks
from tests.fixtures_runs import OUTCOMES, _bits, build_tree, kernel_path, write_run
from tests.tiny_protocol import freeze_tiny

HOST_SETTINGS = {  # what a caller's shell could hold; the harness must override every one of them
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"},
}

ONE_ROUND = """
import sys
from pathlib import Path
from harness.freeze.freeze import freeze
from harness.running.runner import run
proto, results = sys.argv[1], Path(sys.argv[2])
freeze(proto, results, out=lambda *a: None, progress=False)
run(proto, "A", 1, results, progress=False, tracking=False, stop_after_round=0)
"""


def _clean_env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    return {**env, **extra, "PYTHONPATH": str(PROJECT_ROOT)}


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    return freeze_tiny(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(scope="module")
def sealed_a(frozen):
    proto, results = frozen
    return run(str(proto), "A", 1, results, progress=False, tracking=False)


def test_two_host_settings_give_the_same_base_and_round(frozen, sealed_a, tmp_path):
    """The same base and round 0 of A, built in fresh processes whose environment asks torch for
    the default (scalar) and the AVX-512 kernels: byte-identical to the registered path's (AVX2),
    because the harness pins the path before torch computes. The pilot, a function of the same
    inputs, is copied in so that the check costs a base and a round."""
    proto, results = frozen
    want_base = (results / proto.name / "frozen" / "base.pt").read_bytes()
    want_records = (sealed_a / "records.jsonl").read_bytes().splitlines()[:2]  # start + round 0
    want_ckpt = (sealed_a / "checkpoints" / "round0.pt").read_bytes()
    for host, env in HOST_SETTINGS.items():
        other = tmp_path / host / "results"
        paths.frozen_dir(other, proto.name).mkdir(parents=True)
        shutil.copyfile(paths.pilot_path(results, proto.name), paths.pilot_path(other, proto.name))
        done = subprocess.run([sys.executable, "-c", ONE_ROUND, str(proto), str(other)], env=_clean_env(env),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert (other / proto.name / "frozen" / "base.pt").read_bytes() == want_base, host
        rdir = paths.run_dir(other, proto.name, "A", 1)
        assert (rdir / "records.jsonl").read_bytes().splitlines() == want_records, host
        assert (rdir / "checkpoints" / "round0.pt").read_bytes() == want_ckpt, host
        assert json.loads(want_records[0])["kernels"]["cpu_capability"] == "avx2"


def test_a_process_that_computed_on_another_path_is_refused():
    """torch fixes its path at its first kernel: pinning after that refuses, naming both paths."""
    code = ("import torch; torch.ones(3) + 1\n"
            "from harness.core.kernels import KernelRecipe, pin\n"
            "pin(KernelRecipe('avx2', 1), 'the test')\n")
    done = subprocess.run([sys.executable, "-c", code], env=_clean_env({"ATEN_CPU_CAPABILITY": "default"}),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "the test: torch runs its default kernels but the protocol registers cpu_capability=avx2" in done.stderr


def test_a_host_without_the_path_is_refused(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx\n")
    assert "lacks avx2, fma" in kernels.host_refusal("avx2", "x86_64", info)
    assert kernels.host_refusal("default", "x86_64", info) is None
    info.write_text("flags\t\t: avx2 fma avx512f\n")
    assert kernels.host_refusal("avx2", "x86_64", info) is None
    assert "lacks avx512bw, avx512dq, avx512vl" in kernels.host_refusal("avx512", "x86_64", info)
    assert "not x86-64" in kernels.host_refusal("avx2", "aarch64", info)


def test_the_lock_hashes_the_kernel_recipe(frozen, tmp_path):
    proto, results = frozen
    lock = verify_frozen(load_protocol(str(proto)), results)
    recipe = load_protocol(str(proto)).model.kernels().to_dict()
    assert lock["entries"][KERNELS_ENTRY] == records.sha256_bytes(records.canonical_json(recipe).encode())
    assert recipe["env"] == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def test_resume_on_another_kernel_path_is_refused(frozen, tmp_path):
    """Round 0 computed with 2 threads, then a resume with the registered 1: refused, naming both."""
    proto, results = frozen
    protocol = load_protocol(str(proto))
    lock = verify_frozen(protocol, results)
    from harness.running.runner import frozen_base_eval
    rdir = tmp_path / "A" / "seed1"
    args = (protocol, "A", 1, load_sets(results, protocol), paths.set_paths(results, protocol.name)["base"],
            frozen_base_eval(results, protocol, lock), rdir, RunSettings(results_dir=results, tracking=False,
                                                                          progress="off"))
    execute(*args, lock=lock, stop_after_round=0, kernel_recipe=KernelRecipe("avx2", 2))
    with pytest.raises(RunError, match=r"another kernel path \(threads 2 != 1[;,].*recorded != here\)"):
        execute(*args, lock=lock)


def test_readout_refuses_a_sweep_that_mixes_kernel_paths(tmp_path):
    tree = build_tree(tmp_path, skip=(("B", 2),))
    lock = verify_frozen(tree.protocol, tree.results_dir)
    probe_hash = load_tasks(paths.set_paths(tree.results_dir, tree.protocol.name)["probe"], tree.protocol.family)[0].canonical_hash
    write_run(tree.protocol, tree.results_dir, lock["lock_hash"], "B", 2, _bits(OUTCOMES["keep_both"]["B"], 2),
              probe_hash, kernels=kernel_path(tree.protocol, mkl_cbwr="AVX512"))
    with pytest.raises(ReadoutError, match=r"runs A/seed1 and B/seed2 were computed on different kernel paths "
                                           r"\(mkl_cbwr AVX2 != AVX512\)"):
        compute_verdict(tree.protocol, tree.results_dir, lock)


def test_replicate_is_identical_and_touches_nothing_sealed(frozen, sealed_a):
    proto, results = frozen
    before = {p: p.read_bytes() for p in sealed_a.rglob("*") if p.is_file()}
    assert rep.replicate(str(proto), "A", 1, results, out=lambda *a: None) == []
    assert rep.replicate(str(proto), "A", 1, results, from_round=1, out=lambda *a: None) == []
    assert {p: p.read_bytes() for p in sealed_a.rglob("*") if p.is_file()} == before
    assert not paths.replicate_dir(results, proto.name, "A", 1).exists()  # removed when identical


def test_replicate_names_a_changed_byte_of_a_sealed_record(frozen, sealed_a, tmp_path):
    proto, results = frozen
    copy = tmp_path / "results"
    shutil.copytree(results / proto.name / "frozen", copy / proto.name / "frozen")
    rdir = paths.run_dir(copy, proto.name, "A", 1)
    shutil.copytree(sealed_a, rdir)
    path = rdir / "records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    rec = json.loads(lines[2])
    old = rec["eval"]["heldout_bpb"]
    text = lines[2].decode()
    changed = text.replace(f'"heldout_bpb":{json.dumps(old)}', f'"heldout_bpb":{json.dumps(old + 1)}', 1)
    assert changed != text
    os.chmod(path, 0o600)
    path.write_bytes(b"".join(lines[:2]) + changed.encode() + b"".join(lines[3:]))
    found = rep.replicate(str(proto), "A", 1, copy, out=lambda *a: None)
    assert found[0].round == 1 and found[0].where == "records.jsonl line 3 field eval.heldout_bpb"
    assert (found[0].sealed, found[0].replicated) == (old + 1, old)
    assert paths.replicate_dir(copy, proto.name, "A", 1).exists()  # kept for inspection


def test_replicate_names_the_first_tensor_when_the_path_changes(frozen, sealed_a, tmp_path):
    """Replicated on the default (scalar) kernels instead of the registered AVX2 ones: the start
    record names the path, and the first round's checkpoint names a tensor that moved."""
    proto, results = frozen
    done = subprocess.run([sys.executable, "-m", "harness", "replicate", "--protocol", str(proto), "--results-dir",
                           str(results), "--arm", "A", "--seed", "1", "--cpu-capability", "default", "--progress", "off"],
                          env=_clean_env({}), capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT)
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("first difference")]
    assert lines[0] == ("first difference, the start record: records.jsonl line 1 field kernels.cpu_capability: "
                        "sealed avx2 != replicated default")
    assert any(line.startswith("first difference, round 0: checkpoints/round0.pt tensor ") for line in lines), lines
    shutil.rmtree(paths.replicate_dir(results, proto.name, "A", 1).parent.parent.parent)
