"""`archive` and `audit`: a deterministic archive of the sealed tree, and a recomputation in a temporary
place that reproduces verdict.json, report.md and items.html byte for byte, or says where and how they
differ; the provenance of the records and of the audit, compared like with like."""
import copy
import gzip
import io
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from harness import PROJECT_ROOT
from harness.core import records
from harness.readout.analyzer import readout
from harness.readout.audit import AuditError, archive_path, audit, pack
from harness.spec import frozen, provenance
from harness.spec.lock import LOCK_NAME
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
    assert message.startswith("reproduced: verdict.json, report.md and items.html are byte-identical")
    assert "sealed readout: seal, manifest and file hashes verify" in message
    sealed = tree.readout
    for name in ("verdict.json", "report.md", "items.html"):
        assert f"compared {name}: identical (recomputed sha256 {records.sha256_file(sealed / name)})" in message
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


def test_the_audit_names_each_environment_difference_with_both_values(tree):
    here = provenance.current()
    other = copy.deepcopy(here)
    desc = other["environment"]["description"]
    numpy = desc["packages"]["numpy"]
    desc["packages"]["numpy"], desc["cpu"]["model"] = "0.0.1", "Another CPU"
    other["environment"]["sha256"] = provenance.digest(desc)
    ok, message = audit(tree.protocol_dir, tree.results_dir, here=other)
    assert ok, message  # another machine is allowed, and named
    recorded = here["environment"]["sha256"]  # the fixture's lock and runs were made in this process
    assert (f"WARNING: environment: 2 difference(s) from the one recorded by the freeze and every run (6) "
            f"({recorded[:12]}; here {other['environment']['sha256'][:12]}; informational: another machine is "
            f"allowed):\n  cpu model: here Another CPU, recorded {here['environment']['description']['cpu']['model']}\n"
            f"  package numpy: here 0.0.1, recorded {numpy}\n") in message
    assert f"provenance: every run (6): git commit {here['git']['commit'][:12]}" in message
    other["git"]["commit"] = "beef" * 10
    message = audit(tree.protocol_dir, tree.results_dir, here=other)[1]
    assert f"git commit: this audit runs beefbeefbeef, the records were made at {here['git']['commit'][:12]}" in message


def test_an_audit_in_another_process_on_this_machine_reports_no_difference(tree):
    """The lock was written in a process that pinned torch's kernel path and one thread; the CLI's
    audit pins neither (torch picks its own kernels and threads): nothing of that is a difference."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    p = subprocess.run([sys.executable, "-m", "harness", "audit", "--protocol", str(tree.protocol_dir),
                        "--results-dir", str(tree.results_dir)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    sha = provenance.current()["environment"]["sha256"]
    assert f"environment: the same as recorded by the freeze and every run (6) ({sha[:12]}): no difference" in p.stdout
    assert "WARNING" not in p.stdout, p.stdout
    assert [ln for ln in p.stdout.splitlines() if "differ" in ln and "no difference" not in ln] == [], p.stdout


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


def test_an_altered_items_page_is_compared_and_reported(tree, tmp_path):
    copy_ = writable_copy(tree.root, tmp_path / "copy")
    edit_bytes(copy_ / "results" / tree.name / "readout" / "items.html", b"<th>probe</th>", b"<th>item</th>")
    ok, message = audit(copy_ / "protocols" / tree.name, copy_ / "results")
    assert not ok and message.startswith("NOT reproduced: not byte-identical to the sealed readout: items.html\n")
    assert "compared items.html: DIFFERS (diff below)" in message and "compared report.md: identical" in message
    assert "--- sealed/items.html\n+++ recomputed/items.html" in message


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
    here = copy.deepcopy(provenance.current())
    made_at, here["git"]["commit"] = here["git"]["commit"], "beef" * 10
    ok, message = audit(tree.protocol_dir, tree.results_dir, here=here)
    assert not ok
    assert "changed: src/harness/stats/contrasts.py" in message and "not the code version the protocol was frozen with" in message
    # the commits are named, and nothing claims that the source checked out
    assert message.endswith(f"git commit: this audit runs beefbeefbeef, the records were made at {made_at[:12]}")


def test_pack_refuses_without_a_sealed_readout(tmp_path):
    t = build_tree(tmp_path)  # sealed runs, no readout yet
    with pytest.raises(AuditError, match=r"not a sealed readout: run `make readout PROTOCOL=fixture RESULTS=\S*results`"):
        pack(t.protocol_dir, t.results_dir)
    with pytest.raises(AuditError, match=r"readout does not exist: there is no sealed readout to audit \(run `make readout"):
        audit(t.protocol_dir, t.results_dir)
    p = subprocess.run([sys.executable, "-m", "harness", "audit", "--protocol", str(t.protocol_dir), "--results-dir",
                        str(t.results_dir)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: ") and "no sealed readout to audit" in p.stderr


def test_an_archive_member_outside_the_protocol_is_refused(tmp_path):
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("results/fixture/../../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(AuditError, match=r"member 'results/fixture/\.\./\.\./escape\.txt'"):
        audit("fixture", tmp_path, evil)
    assert not (tmp_path.parent / "escape.txt").exists()
