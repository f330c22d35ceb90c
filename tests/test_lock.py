"""The protocol lock: entries, freeze once, drift refused with the changed file named."""
import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess

import pytest
import torch

from harness import PROJECT_ROOT
from harness.core.records import canonical_json
from harness.spec.lock import (
    KEY_PACKAGES,
    LOCK_NAME,
    LockError,
    compute_entries,
    cpu_info,
    diff_entries,
    environment,
    environment_versions,
    git_state,
    read_lock,
    verify_lock,
    write_lock,
)

VERSIONS = {"python": "3.11.9", "torch": "2.13.0+cpu"}


@pytest.fixture
def world(tmp_path):
    """A protocol dir (with a materialised set inside it), a base checkpoint outside, and two source dirs."""
    proto = tmp_path / "protocols" / "smoke"
    (proto / "sets").mkdir(parents=True)
    (proto / "arms.yaml").write_text("arms: [A, B, C]\n")
    (proto / "protocol.yaml").write_text("seeds: [1, 2]\nprobe_size: 128\n")
    (proto / "sets" / "probe.jsonl").write_text('{"task": 1}\n')
    (tmp_path / "base.pt").write_bytes(b"\x01\x02weights")
    for d in ("harness", "arms"):
        (tmp_path / d / "__pycache__").mkdir(parents=True)
        (tmp_path / d / "__init__.py").write_text("")
        (tmp_path / d / f"{d}_core.py").write_text("X = 1\n")
        (tmp_path / d / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
        (tmp_path / d / "notes.txt").write_text("not source")
    extra = {"materialised/probe.jsonl": proto / "sets" / "probe.jsonl", "checkpoint/base.pt": tmp_path / "base.pt"}
    sources = [tmp_path / "harness", tmp_path / "arms"]

    def entries():
        return compute_entries(proto, extra, sources)

    return proto, entries


def test_entries_cover_protocol_generated_files_and_source(world):
    proto, entries = world
    e = entries()
    assert sorted(e) == [
        "checkpoint/base.pt", "materialised/probe.jsonl",
        "protocols/smoke/arms.yaml", "protocols/smoke/protocol.yaml",
        "src/arms/__init__.py", "src/arms/arms_core.py", "src/harness/__init__.py", "src/harness/harness_core.py",
    ]
    assert e["protocols/smoke/arms.yaml"] == hashlib.sha256(b"arms: [A, B, C]\n").hexdigest()
    write_lock(proto / LOCK_NAME, e, dict(VERSIONS))
    assert entries() == e  # the lock file itself is not an entry


def test_lock_written_and_verified(world):
    proto, entries = world
    lock = write_lock(proto / LOCK_NAME, entries(), {**VERSIONS, "protocol": "smoke"})
    on_disk = json.loads((proto / LOCK_NAME).read_text())
    assert on_disk == lock == read_lock(proto / LOCK_NAME)
    assert lock["meta"]["protocol"] == "smoke" and "created" in lock["meta"]
    assert len(lock["lock_hash"]) == 64
    assert verify_lock(proto / LOCK_NAME, entries(), VERSIONS) == lock
    # the build tag of torch (cpu / cuda) does not count as a different version
    assert verify_lock(proto / LOCK_NAME, entries(), {**VERSIONS, "torch": "2.13.0+cu128"}) == lock


def test_lock_hash_ignores_the_timestamp(world, tmp_path):
    proto, entries = world
    a = write_lock(tmp_path / "a" / LOCK_NAME, entries(), {**VERSIONS, "created": "2020-01-01T00:00:00+00:00"})
    b = write_lock(tmp_path / "b" / LOCK_NAME, entries(), {**VERSIONS, "created": "2030-01-01T00:00:00+00:00"})
    c = write_lock(tmp_path / "c" / LOCK_NAME, entries(), {**VERSIONS, "python": "3.12.0"})
    assert a["lock_hash"] == b["lock_hash"] != c["lock_hash"]


@pytest.mark.parametrize("kind, named", [
    ("protocol file", "changed: protocols/smoke/arms.yaml"),
    ("materialised set", "changed: materialised/probe.jsonl"),
    ("base checkpoint", "changed: checkpoint/base.pt"),
    ("harness source", "changed: src/harness/harness_core.py"),
    ("new source file", "added: src/arms/extra.py"),
    ("removed protocol file", "removed: protocols/smoke/protocol.yaml"),
])
def test_drift_is_refused_with_the_file_named(world, kind, named):
    proto, entries = world
    write_lock(proto / LOCK_NAME, entries(), dict(VERSIONS))
    root = proto.parent.parent
    if kind == "protocol file":
        (proto / "arms.yaml").write_text("arms: [A, C]\n")
    elif kind == "materialised set":
        (proto / "sets" / "probe.jsonl").write_text('{"task": 2}\n')
    elif kind == "base checkpoint":
        (root / "base.pt").write_bytes(b"\x01\x02weightz")
    elif kind == "harness source":
        (root / "harness" / "harness_core.py").write_text("X = 2\n")
    elif kind == "new source file":
        (root / "arms" / "extra.py").write_text("")
    elif kind == "removed protocol file":
        (proto / "protocol.yaml").unlink()
    with pytest.raises(LockError) as e:
        verify_lock(proto / LOCK_NAME, entries(), VERSIONS)
    msg = str(e.value)
    assert named in msg and "refusing to run" in msg
    assert msg.count("\n  ") == 1  # exactly one differing line, the right one


def test_version_mismatch_is_refused(world):
    proto, entries = world
    write_lock(proto / LOCK_NAME, entries(), dict(VERSIONS))
    with pytest.raises(LockError, match="torch: locked 2.13.0\\+cpu, running 2.14.0"):
        verify_lock(proto / LOCK_NAME, entries(), {**VERSIONS, "torch": "2.14.0"})
    with pytest.raises(LockError, match="python: locked 3.11.9, running 3.11.10"):
        verify_lock(proto / LOCK_NAME, entries(), {**VERSIONS, "python": "3.11.10"})


def test_refreeze_same_is_noop_and_changed_is_refused(world):
    proto, entries = world
    first = write_lock(proto / LOCK_NAME, entries(), {**VERSIONS, "created": "2020-01-01T00:00:00+00:00"})
    before = (proto / LOCK_NAME).read_bytes()
    again = write_lock(proto / LOCK_NAME, entries(), {**VERSIONS, "created": "2031-01-01T00:00:00+00:00"})
    assert again == first and (proto / LOCK_NAME).read_bytes() == before
    (proto / "protocol.yaml").write_text("seeds: [1, 2, 3]\nprobe_size: 128\n")
    with pytest.raises(LockError, match="a changed protocol is a new protocol: copy it to protocols/<new name>") as e:
        write_lock(proto / LOCK_NAME, entries(), dict(VERSIONS))
    assert "changed: protocols/smoke/protocol.yaml" in str(e.value)
    assert (proto / LOCK_NAME).read_bytes() == before


def test_never_frozen_and_malformed_locks(world):
    proto, entries = world
    with pytest.raises(LockError, match="protocol smoke was never frozen: run make freeze PROTOCOL=smoke first"):
        read_lock(proto / LOCK_NAME)
    with pytest.raises(LockError, match="never frozen"):
        verify_lock(proto / LOCK_NAME, entries(), VERSIONS)
    (proto / LOCK_NAME).write_text('{"entries": {')
    with pytest.raises(LockError, match=f"{proto / LOCK_NAME}: malformed lock, not valid JSON"):
        read_lock(proto / LOCK_NAME)
    (proto / LOCK_NAME).write_text('{"entries": {"a": "zz"}, "meta": {}, "lock_hash": "x"}')
    with pytest.raises(LockError, match="entry 'a' has 'zz', expected a 64-digit"):
        read_lock(proto / LOCK_NAME)
    (proto / LOCK_NAME).unlink()
    write_lock(proto / LOCK_NAME, entries(), dict(VERSIONS))
    lock = json.loads((proto / LOCK_NAME).read_text())
    lock["entries"]["protocols/smoke/arms.yaml"] = "0" * 64  # hand-edited to match a changed file
    (proto / LOCK_NAME).write_text(json.dumps(lock))
    with pytest.raises(LockError, match="lock_hash does not match"):
        read_lock(proto / LOCK_NAME)


def test_missing_generated_file_is_named(world, tmp_path):
    proto, _ = world
    with pytest.raises(LockError, match="checkpoint/base.pt.*missing.pt does not exist"):
        compute_entries(proto, {"checkpoint/base.pt": tmp_path / "missing.pt"}, [])


def test_environment_versions_are_the_running_ones(world):
    proto, entries = world
    assert environment_versions() == {"python": platform.python_version(), "torch": torch.__version__}
    lock = write_lock(proto / LOCK_NAME, entries(), {})
    assert lock["meta"]["torch"] == torch.__version__
    assert verify_lock(proto / LOCK_NAME, entries()) == lock


def test_diff_entries_lines():
    assert diff_entries({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "9", "d": "4"}) == [
        "changed: b", "removed: c", "added: d"]
    assert diff_entries({"a": "1"}, {"a": "1"}) == []


def test_the_environment_names_packages_git_cpu_and_torch(world):
    proto, entries = world
    env = environment()
    for name in KEY_PACKAGES:
        assert env["key_packages"][name] == importlib.metadata.version(name), name
    assert env["packages"]["numpy"] == importlib.metadata.version("numpy") and len(env["packages"]) > 20
    assert env["packages_sha256"] == hashlib.sha256(canonical_json(env["packages"]).encode()).hexdigest()
    head = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert env["git"]["commit"] == head.stdout.strip() and isinstance(env["git"]["clean"], bool)
    assert env["cpu"]["model"] and env["cpu"]["logical_cpus"] == os.cpu_count()
    assert env["torch"]["version"] == torch.__version__ and env["torch"]["threads"] == torch.get_num_threads()
    assert "PyTorch built with" in env["torch"]["config"] and "cuda" not in env["torch"]  # no GPU used on cpu
    lock = write_lock(proto / LOCK_NAME, entries(), dict(VERSIONS))  # recorded as information, not hashed
    assert lock["meta"]["environment"]["key_packages"] == env["key_packages"]
    assert lock["lock_hash"] == write_lock(proto.parent / "other.lock", entries(), {**VERSIONS, "environment": {}})["lock_hash"]


def test_no_git_is_said_not_raised(tmp_path):
    state = git_state(tmp_path)
    assert state["commit"] is None and state["clean"] is None and "not a git checkout" in state["note"]


def test_cpu_info_reads_model_and_flags(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: sse2 avx2 fma\n\n"
                 "processor\t: 1\nmodel name\t: Test CPU 9000\nflags\t\t: sse2 avx2 fma\n")
    info = cpu_info(f)
    assert info["model"] == "Test CPU 9000" and info["flags"] == "avx2 fma sse2"
