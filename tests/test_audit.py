"""`archive` and `audit`: a deterministic archive of the sealed tree, and a recomputation in a temporary
place that reproduces verdict.json and report.md byte for byte, or says where and how they differ."""
import gzip
import io
import json
import os
import shutil
import tarfile

import pytest

from harness import PROJECT_ROOT
from harness.core import records
from harness.readout.analyzer import readout
from harness.readout.audit import AuditError, archive_path, audit, pack
from harness.spec import frozen, lock
from harness.spec.lock import LOCK_NAME, read_lock
from tests.fixtures_runs import build_tree, edit_bytes, edit_line, writable_copy


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """One sealed, read-out tree shared by the tests that only read it (the others tamper with copies)."""
    t = build_tree(tmp_path_factory.mktemp("sealed"))
    readout(t.protocol_dir, t.results_dir)
    return t


def _snapshot(root):
    """Every path under root with its sha256 (None for directories) and mode."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = (None if os.path.isdir(p) else records.sha256_file(p), os.stat(p).st_mode)
    return out


def test_audit_of_the_sealed_tree_reproduces_and_writes_nothing_there(tree):
    before = _snapshot(tree.root)
    ok, message = audit(tree.protocol_dir, tree.results_dir)
    assert ok, message
    assert message.startswith("reproduced: verdict.json and report.md are byte-identical")
    assert "sealed readout: seal, manifest and file hashes verify" in message
    assert "figure probe_pass_rate.png: identical" in message  # same process, same matplotlib
    assert _snapshot(tree.root) == before


def test_pack_is_deterministic_and_holds_exactly_the_sealed_tree(tree):
    path = pack(tree.protocol_dir, tree.results_dir)
    assert path == archive_path(tree.results_dir, tree.name) and path.is_file()
    first = path.read_bytes()
    assert (path.parent / (path.name + ".sha256")).read_text() == f"{records.sha256_bytes(first)}  {path.name}\n"
    assert pack(tree.protocol_dir, tree.results_dir).read_bytes() == first
    assert gzip.GzipFile(fileobj=io.BytesIO(first)).read()  # readable, and its header carries no timestamp:
    assert first[4:8] == b"\x00\x00\x00\x00"

    with tarfile.open(path, "r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" for m in members)
    files = {m.name for m in members if m.isfile()}
    n = tree.name
    assert {f"protocols/{n}/decision.yaml", f"protocols/{n}/bootstrap.yaml", f"results/{n}/frozen/{LOCK_NAME}",
            f"results/{n}/frozen/sets/probe.jsonl", f"results/{n}/frozen/base.pt", f"results/{n}/readout/verdict.json",
            f"results/{n}/readout/SEALED", f"results/{n}/B/seed1/ledger.jsonl"} <= files
    assert all(f.startswith((f"protocols/{n}/", f"results/{n}/")) for f in files)
    assert len([f for f in files if f.endswith("/SEALED")]) == 6 + 1
    assert not [f for f in files if "/checkpoints/" in f]  # left out by default: the audit never reads them


def test_with_checkpoints_keeps_them_and_both_archives_reproduce(tree, tmp_path):
    small = tmp_path / "small.tar.gz"
    shutil.copy(pack(tree.protocol_dir, tree.results_dir), small)
    full = pack(tree.protocol_dir, tree.results_dir, with_checkpoints=True)
    with tarfile.open(full, "r:gz") as tar:
        files = {m.name for m in tar.getmembers() if m.isfile()}
    with tarfile.open(small, "r:gz") as tar:
        small_files = {m.name for m in tar.getmembers() if m.isfile()}
    n = tree.name
    assert f"results/{n}/C/seed2/checkpoints/round1.pt" in files
    assert files - small_files == {f for f in files if "/checkpoints/" in f} != set()
    for archive in (small, full):
        ok, message = audit(tree.name, tmp_path, archive)
        assert ok, message
    pack(tree.protocol_dir, tree.results_dir)  # leave the default archive for the other tests


def test_the_audit_names_each_environment_difference_as_a_warning(tree, monkeypatch):
    locked = read_lock(tree.frozen / LOCK_NAME)["meta"]["environment"]
    other = json.loads(json.dumps(locked))
    other["packages"]["numpy"] = "0.0.1"
    other["cpu"]["model"] = "Another CPU"
    monkeypatch.setattr(lock, "environment", lambda device="cpu": other)
    ok, message = audit(tree.protocol_dir, tree.results_dir)
    assert ok, message  # another machine is allowed, and named
    assert "WARNING: environment: 2 difference(s) from the one the lock records" in message
    assert f"  package numpy: locked {locked['packages']['numpy']}, running 0.0.1" in message
    assert f"  cpu.model: locked {locked['cpu']['model']!r}, running 'Another CPU'" in message
    monkeypatch.setattr(lock, "environment", lambda device="cpu": locked)
    assert "environment: identical to the one the lock records" in audit(tree.protocol_dir, tree.results_dir)[1]


def test_audit_from_the_archive_alone_reproduces(tree, tmp_path):
    archive = pack(tree.protocol_dir, tree.results_dir)
    elsewhere = tmp_path / "auditor"
    elsewhere.mkdir()
    for p in (archive, archive.parent / (archive.name + ".sha256")):
        shutil.copy(p, elsewhere / p.name)
    hidden = tree.root.with_name(tree.root.name + "-hidden")
    os.rename(tree.root, hidden)  # the original tree is out of reach: only the archive remains
    try:
        ok, message = audit(tree.name, elsewhere, elsewhere / archive.name)
    finally:
        os.rename(hidden, tree.root)
    assert ok, message
    assert "archive sha256 verified" in message and message.startswith("reproduced")


def test_an_altered_sealed_report_is_reported_with_its_diff(tree, tmp_path):
    copy = writable_copy(tree.root, tmp_path / "copy")
    report = copy / "results" / tree.name / "readout" / "report.md"
    edit_bytes(report, b"**Verdict: keep_both**", b"**Verdict: drop_heircommit**")
    ok, message = audit(copy / "protocols" / tree.name, copy / "results")
    assert not ok
    assert message.startswith("NOT reproduced: not byte-identical to the sealed readout: report.md\n")
    assert "sealed readout fails its seal check" in message and "report.md: sha256 differs" in message
    assert "--- sealed/report.md\n+++ recomputed/report.md" in message
    assert "\n-**Verdict: drop_heircommit**" in message and "\n+**Verdict: keep_both**" in message
    assert "verdict.json" not in message.split("\n")[0]


def test_an_altered_verdict_in_an_archive_is_reported(tree, tmp_path):
    copy = writable_copy(tree.root, tmp_path / "copy")
    verdict = copy / "results" / tree.name / "readout" / "verdict.json"
    edit_bytes(verdict, b'"outcome": "keep_both"', b'"outcome": "keep_none"')
    results = copy / "results"
    with pytest.raises(AuditError, match=r"do not verify: .*readout/verdict\.json: sha256 differs"):
        pack(copy / "protocols" / tree.name, results)  # pack refuses what does not verify
    out = tmp_path / "hand.tar.gz"  # an archive that carries the altered verdict anyway, packed by hand
    with tarfile.open(out, "w:gz") as tar:
        tar.add(copy / "protocols", arcname="protocols")
        tar.add(results / tree.name, arcname=f"results/{tree.name}")
    ok, message = audit(tree.name, tmp_path, out)
    assert not ok and message.split("\n")[0].endswith("sealed readout: verdict.json"), message
    assert '\n-      "outcome": "keep_none"\n+      "outcome": "keep_both"\n' in message


def test_an_archive_that_changed_after_packing_is_refused(tree, tmp_path):
    packed = pack(tree.protocol_dir, tree.results_dir)
    archive = tmp_path / packed.name
    shutil.copy(packed.parent / (packed.name + ".sha256"), tmp_path)
    data = bytearray(packed.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    ok, message = audit(tree.name, tmp_path, archive)
    assert not ok and "does not match" in message and archive.name + ".sha256" in message


def test_a_tampered_run_fails_the_audit_naming_the_line(tree, tmp_path):
    copy = writable_copy(tree.root, tmp_path / "copy")
    edit_line(copy / "results" / tree.name / "B" / "seed1" / "ledger.jsonl", 3, '"k":2', '"k":3')
    ok, message = audit(copy / "protocols" / tree.name, copy / "results")
    assert not ok
    assert "the analyzer refused the audited records" in message and "B/seed1/ledger.jsonl:3" in message


def test_another_code_version_is_reported_as_such(tree, tmp_path, monkeypatch):
    fake_root = tmp_path / "checkout"
    for d in ("harness", "arms", "families"):
        shutil.copytree(PROJECT_ROOT / d, fake_root / d, ignore=shutil.ignore_patterns("__pycache__"))
    with open(fake_root / "harness" / "stats" / "contrasts.py", "a") as f:
        f.write("\n# another code version\n")
    monkeypatch.setattr(frozen, "PROJECT_ROOT", fake_root)
    ok, message = audit(tree.protocol_dir, tree.results_dir)
    assert not ok
    assert "changed: src/harness/stats/contrasts.py" in message and "not the code version the protocol was frozen with" in message


def test_pack_refuses_without_a_sealed_readout(tmp_path):
    t = build_tree(tmp_path)  # sealed runs, no readout yet
    with pytest.raises(AuditError, match=r"not a sealed readout: run `make readout PROTOCOL=fixture RESULTS=\S*results`"):
        pack(t.protocol_dir, t.results_dir)
    ok, message = audit(t.protocol_dir, t.results_dir)
    assert not ok and "no sealed readout to audit" in message


def test_an_archive_member_outside_the_protocol_is_refused(tmp_path):
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("results/fixture/../../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(AuditError, match=r"member 'results/fixture/\.\./\.\./escape\.txt'"):
        audit("fixture", tmp_path, evil)
    assert not (tmp_path.parent / "escape.txt").exists()
