"""Provenance: an environment's canonical description and its digest hold what decides a result's
bytes and nothing a process sets for itself; differences are named field by field; the readout
records the freeze's and every run's commit and environment, and says which runs differ and how."""
import copy
import json

import pytest

from harness.core.kernels import host_capabilities
from harness.readout.analyzer import ReadoutError, readout
from harness.readout.report import provenance_line, render_report
from harness.spec import lock, provenance
from tests.fixtures_runs import build_tree

AVX512 = "avx512f avx512bw avx512dq avx512vl"
ENV = {"python": "3.11.9", "platform": "Linux-6.1-x86_64-with-glibc2.36",
       "packages": {"numpy": "2.1.0", "torch": "2.13.0+cpu"}, "key_packages": {"numpy": "2.1.0"},
       "packages_sha256": "ab" * 32, "git": {"commit": "c0ffee" * 6 + "c0ff", "clean": True, "changed_paths": 0},
       "cpu": {"model": "Test CPU 9000", "flags": f"sse2 avx2 fma {AVX512}", "logical_cpus": 8, "machine": "x86_64"},
       "torch": {"version": "2.13.0+cpu", "threads": 1, "interop_threads": 1, "config": "CPU capability usage: AVX2",
                 "parallel": "at::get_num_threads() : 1", "cuda_build": None,
                 "backends": {"mkldnn": True, "openmp": True, "mkl": True, "cpu_capability": "AVX2"}}}


def _changed(**paths) -> dict:
    """ENV with "a.b.c"-style fields set to new values."""
    env = copy.deepcopy(ENV)
    for path, value in paths.items():
        *parents, last = path.split("__")
        d = env
        for p in parents:
            d = d[p]
        d[last] = value
    return env


def test_a_description_keeps_what_decides_bytes_and_nothing_a_process_sets():
    d = provenance.describe(ENV)
    assert d == {"python": "3.11.9", "machine": "x86_64",
                 "torch": {"version": "2.13.0+cpu", "cuda": None, "mkl": True, "mkldnn": True, "openmp": True},
                 "cpu": {"model": "Test CPU 9000", "kernel_paths": ["default", "avx2", "avx512"]},
                 "gpu": None, "packages": {"numpy": "2.1.0", "torch": "2.13.0+cpu"}}
    # an unpinned audit process on the same machine: other threads, torch's own kernel choice, another
    # git state, CPU count and kernel release; none of it is the environment
    same_machine = _changed(torch__threads=2, torch__interop_threads=2, torch__config="CPU capability usage: AVX512",
                            torch__parallel="at::get_num_threads() : 2", torch__backends__cpu_capability="AVX512",
                            git={"commit": "beef" * 10, "clean": False, "changed_paths": 3},
                            cpu__logical_cpus=2, platform="Linux-6.8-x86_64-with-glibc2.36")
    assert provenance.digest(provenance.describe(same_machine)) == provenance.digest(d)
    rec = provenance.record(same_machine)
    assert rec["git"] == {"commit": "beef" * 10, "clean": False}  # the commit is kept beside, not in the digest
    assert rec["environment"] == {"sha256": provenance.digest(d), "description": d}


@pytest.mark.parametrize("field, value, line", [
    ("python", "3.11.10", "python: here 3.11.10, recorded 3.11.9"),
    ("packages", {"numpy": "2.2.0", "torch": "2.13.0+cpu", "rich": "13.0"},
     "package numpy: here 2.2.0, recorded 2.1.0|package rich: here 13.0, recorded not installed"),
    ("cpu__flags", "sse2 avx2 fma", "cpu kernel_paths: here default avx2, recorded default avx2 avx512"),
    ("cpu__model", "Other CPU", "cpu model: here Other CPU, recorded Test CPU 9000"),
    ("torch__version", "2.13.1+cpu", "torch version: here 2.13.1+cpu, recorded 2.13.0+cpu"),
    ("torch__cuda", {"gpu": "H200", "capability": [9, 0]},
     "gpu: here H200 (compute capability 9 0), recorded none"),
])
def test_every_difference_is_named_with_both_values(field, value, line):
    here, recorded = provenance.describe(_changed(**{field: value})), provenance.describe(ENV)
    assert provenance.differences(here, recorded) == line.split("|")
    assert provenance.digest(here) != provenance.digest(recorded)
    assert provenance.differences(recorded, recorded) == []


def test_kernel_paths_follow_the_flags_and_the_architecture():
    assert host_capabilities("sse2 avx2 fma".split(), "x86_64") == ["default", "avx2"]
    assert host_capabilities(f"avx2 fma {AVX512}".split(), "AMD64") == ["default", "avx2", "avx512"]
    assert host_capabilities("avx2".split(), "x86_64") == ["default"]  # avx2 without fma is not torch's avx2 path
    assert host_capabilities(f"avx2 fma {AVX512}".split(), "aarch64") == []


def test_this_process_is_described_once_from_the_real_environment():
    rec = provenance.current()
    assert rec == provenance.current() and rec is not provenance.current()  # a copy each time, same content
    assert rec["environment"]["sha256"] == provenance.digest(rec["environment"]["description"])
    assert rec["git"]["commit"] == lock.git_state()["commit"]
    assert rec["environment"]["description"]["packages"]["torch"].startswith("2.")


# ---------------------------------------------------------------- in the readout

@pytest.fixture(scope="module")
def other_env(tmp_path_factory):
    """A tree whose run B/seed2 was made in another environment (python and numpy), recorded
    consistently, and whose run C/seed1 was sealed before runs recorded their provenance."""
    here = provenance.current()
    env = copy.deepcopy(here["environment"]["description"])
    env["python"], env["packages"]["numpy"] = "9.9.9", "0.0.1"
    other = {"git": {"commit": "beef" * 10, "clean": True},
             "environment": {"sha256": provenance.digest(env), "description": env}}

    def edit(arm, seed, fields):
        if (arm, seed) == ("B", 2):
            fields["provenance"] = other
        elif (arm, seed) == ("C", 1):
            del fields["provenance"]
    tree = build_tree(tmp_path_factory.mktemp("prov"), edit_manifest=edit)
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)
    return tree, json.loads((out / "verdict.json").read_text()), (out / "report.md").read_text(), here, other


def test_the_verdict_records_every_runs_commit_and_environment(other_env):
    tree, verdict, _, here, other = other_env
    prov = verdict["format"] == 2 and verdict["provenance"]
    locked = provenance.record(lock.read_lock(tree.frozen / lock.LOCK_NAME)["meta"]["environment"])
    assert prov["freeze"] == {"git_commit": locked["git"]["commit"], "git_clean": locked["git"]["clean"],
                              "environment_sha256": locked["environment"]["sha256"]}
    assert prov["runs"]["B/seed2"] == {"git_commit": "beef" * 10, "git_clean": True,
                                       "environment_sha256": other["environment"]["sha256"]}
    assert prov["runs"]["C/seed1"] is None
    assert prov["runs"]["A/seed1"]["environment_sha256"] == here["environment"]["sha256"]
    assert prov["environments"][other["environment"]["sha256"]] == other["environment"]["description"]
    py = locked["environment"]["description"]["python"]
    numpy = locked["environment"]["description"]["packages"]["numpy"]
    assert prov["differences"] == {other["environment"]["sha256"]: [
        f"python: runs 9.9.9, freeze {py}", f"package numpy: runs 0.0.1, freeze {numpy}"]}


def test_the_report_header_and_provenance_say_which_runs_differ(other_env):
    tree, verdict, report, _, other = other_env
    header = report.split("\n\n")[1]
    assert header == provenance_line(verdict)
    freeze = verdict["provenance"]["freeze"]
    assert header.startswith(f"**Provenance:** frozen at git commit `{freeze['git_commit'][:12]}`")
    assert f"environment `{freeze['environment_sha256'][:12]}` (python " in header
    assert header.endswith("; 1 of 6 runs on another commit or environment (see Provenance); 1 of 6 runs record none.")
    section = report[report.index("## Provenance"):]
    assert f"Environment `{other['environment']['sha256'][:12]}`" in section and "runs B/seed2: 2 difference(s)" in section
    assert "- python: runs 9.9.9, freeze " in section
    assert "| `B/seed2` |" in section and "| `beefbeefbeef` | " in section
    assert [ln for ln in section.splitlines() if ln.startswith("| `C/seed1`")][0].endswith("| not recorded | not recorded |")


def test_a_verdict_without_provenance_still_renders(other_env):
    _, verdict, _, _, _ = other_env
    old = {k: v for k, v in verdict.items() if k != "provenance"}
    old["format"] = 1
    text = render_report(old, [])
    assert "**Provenance:** not recorded in this verdict (format 1)." in text
    assert "git commits and environments: not recorded in this verdict (format 1)" in text


def test_a_manifest_whose_digest_does_not_match_its_description_is_refused(tmp_path):
    def edit(arm, seed, fields):
        if (arm, seed) == ("A", 1):
            fields["provenance"] = json.loads(json.dumps(fields["provenance"]))
            fields["provenance"]["environment"]["description"]["python"] = "0.0.0"
    tree = build_tree(tmp_path, edit_manifest=edit)
    with pytest.raises(ReadoutError, match=r"A/seed1/manifest\.json: 'provenance\.environment\.sha256' is \w{12}\.\.\., "
                                           r"its description digests to \w{12}\.\.\."):
        readout(tree.protocol_dir, tree.results_dir)
