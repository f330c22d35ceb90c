"""Chained record logs, manifests and seals: round trips, resume, and tamper detection."""
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from harness.core import records
from harness.core.records import (
    GENESIS,
    RecordLog,
    SealedError,
    TamperError,
    atomic_write_text,
    atomic_writer,
    is_sealed,
    seal,
    sha256_file,
    verify_chain,
    verify_sealed,
    write_manifest,
)


def _rounds(n):
    return [{"round": r, "pass_rate": r / 10, "tasks": ["t%d" % r, "u"], "note": "caf\u00e9"} for r in range(n)]


def _write_log(path, recs, run_dir=None):
    log = RecordLog(path, run_dir=run_dir)
    hashes = [log.append(r) for r in recs]
    return log, hashes


def _rewrite_line(path, lineno, edit):
    """Apply `edit` to the JSON object on 1-based line `lineno`, writing it back without fixing hashes."""
    lines = Path(path).read_text().splitlines()
    obj = json.loads(lines[lineno - 1])
    edit(obj)
    lines[lineno - 1] = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    Path(path).write_text("\n".join(lines) + "\n")


def _writable_copy(src, dst):
    """Copy a sealed tree and make the copy writable, as a tamperer would (root ignores the bits anyway)."""
    shutil.copytree(src, dst)
    for dp, dns, fns in os.walk(dst):
        for n in dns + fns + [""]:
            p = os.path.join(dp, n)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    return Path(dst)


# ---------------------------------------------------------------- record log

def test_round_trip_and_line_format(tmp_path):
    path = tmp_path / "rounds.jsonl"
    log, hashes = _write_log(path, _rounds(4))
    assert log.records() == _rounds(4)
    assert log.head() == hashes[-1] == verify_chain(path)
    lines = path.read_text().splitlines()
    prev = GENESIS
    for raw, h in zip(lines, hashes):
        obj = json.loads(raw)
        assert raw == json.dumps(obj, sort_keys=True, separators=(",", ":"))  # canonical, ASCII
        assert obj["prev"] == prev and obj["hash"] == h
        body = {k: v for k, v in obj.items() if k != "hash"}
        assert h == hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        prev = h


def test_empty_log_and_same_records_same_bytes(tmp_path):
    assert RecordLog(tmp_path / "none.jsonl").head() == GENESIS
    assert RecordLog(tmp_path / "none.jsonl").records() == []
    _write_log(tmp_path / "a.jsonl", _rounds(3))
    _write_log(tmp_path / "b.jsonl", _rounds(3))
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_reopened_log_continues_the_chain(tmp_path):
    path = tmp_path / "r.jsonl"
    _write_log(path, _rounds(2))
    RecordLog(path).append({"round": 2})
    assert [r["round"] for r in RecordLog(path).records()] == [0, 1, 2]


def test_bad_records_are_refused(tmp_path):
    log = RecordLog(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="reserved"):
        log.append({"round": 1, "hash": "x"})
    with pytest.raises(ValueError, match="metrics.loss"):
        log.append({"metrics": {"loss": float("nan")}})
    with pytest.raises(TypeError, match="must be a dict"):
        log.append([1, 2])
    assert not (tmp_path / "r.jsonl").exists() or log.records() == []


@pytest.mark.parametrize("kind, line", [
    ("edit", 3), ("delete", 2), ("swap", 2), ("noncanonical", 4), ("reforge", 3),
])
def test_tampering_is_named_by_line(tmp_path, kind, line):
    path = tmp_path / "r.jsonl"
    _write_log(path, _rounds(5))
    lines = path.read_text().splitlines()
    if kind == "edit":
        _rewrite_line(path, 3, lambda o: o.update(pass_rate=0.99))
    elif kind == "delete":
        path.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    elif kind == "swap":
        path.write_text("\n".join([lines[0], lines[2], lines[1]] + lines[3:]) + "\n")
    elif kind == "noncanonical":
        lines[3] = lines[3].replace(",", ", ", 1)
        path.write_text("\n".join(lines) + "\n")
    elif kind == "reforge":  # line 2 rewritten with a correct own hash: line 3's prev no longer matches
        obj = json.loads(lines[1])
        obj["pass_rate"] = 0.99
        del obj["hash"]
        obj["hash"] = hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        lines[1] = json.dumps(obj, sort_keys=True, separators=(",", ":"))
        path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TamperError) as e:
        RecordLog(path).records()
    assert f"{path}:{line}:" in str(e.value) and e.value.line == line
    with pytest.raises(TamperError, match=f":{line}:"):
        verify_chain(path)


def test_append_refuses_a_tampered_log(tmp_path):
    path = tmp_path / "r.jsonl"
    log, _ = _write_log(path, _rounds(3))
    _rewrite_line(path, 2, lambda o: o.update(round=7, note="x" * 40))  # size changes: log re-verifies
    with pytest.raises(TamperError, match=":2:"):
        log.append({"round": 3})


def test_partial_tail_then_resume_gives_identical_bytes(tmp_path):
    full = tmp_path / "full.jsonl"
    _write_log(full, _rounds(5))
    # interrupted run: rounds 0-2 completed, round 3 written, round 4 cut mid-line
    path = tmp_path / "resumed.jsonl"
    _write_log(path, _rounds(4))
    with open(path, "ab") as f:
        f.write(full.read_bytes().splitlines(keepends=True)[4][:25])
    with pytest.raises(TamperError, match=":5: incomplete last line"):
        RecordLog(path).records()
    assert len(RecordLog(path).records(allow_partial_tail=True)) == 4
    log = RecordLog(path)
    log.truncate_after(3)  # drop the partial round
    assert len(log.records()) == 3
    for rec in _rounds(5)[3:]:
        log.append(rec)
    assert path.read_bytes() == full.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(ValueError, match="has 5 complete lines"):
        log.truncate_after(6)


def test_atomic_write_replaces_whole_file(tmp_path):
    p = tmp_path / "sub" / "x.txt"
    atomic_write_text(p, "first")
    atomic_write_text(p, "second")
    assert p.read_text() == "second"
    assert sorted(os.listdir(p.parent)) == ["x.txt"]
    assert stat.S_IMODE(p.stat().st_mode) == 0o600          # owner-only: a second wall behind the sandbox


def test_atomic_writer_streams_and_an_error_leaves_the_old_file(tmp_path, monkeypatch):
    p = tmp_path / "big.bin"
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)) or real_fsync(fd))
    with atomic_writer(p) as f:
        for i in range(4):
            f.write(bytes([i]) * 1000)
        assert not p.exists()                                  # nothing visible before the rename
    assert p.read_bytes() == b"".join(bytes([i]) * 1000 for i in range(4))
    assert synced == [False, True]                             # the file, then its directory
    with pytest.raises(RuntimeError, match="cut short"):
        with atomic_writer(p) as f:
            f.write(b"half")
            raise RuntimeError("cut short")
    assert p.read_bytes()[:1000] == b"\0" * 1000 and sorted(os.listdir(tmp_path)) == ["big.bin"]   # no temp file left


# ---------------------------------------------------------------- manifest and seal

def _make_run(run_dir):
    run_dir.mkdir()
    _write_log(run_dir / "rounds.jsonl", _rounds(3), run_dir=run_dir)
    _write_log(run_dir / "probes" / "round0.jsonl", [{"task": "a", "ok": True}], run_dir=run_dir)
    atomic_write_text(run_dir / "config.yaml", "arm: C\nseed: 1\n", run_dir=run_dir)
    (run_dir / "ckpt.bin").write_bytes(bytes(range(256)) * 4)
    manifest = write_manifest(run_dir, {"lock_hash": "ab" * 32, "arm": "C", "seed": 1})
    seal(run_dir)
    return manifest


def test_manifest_lists_files_and_chain_heads(tmp_path):
    run = tmp_path / "seed1"
    m = _make_run(run)
    assert m["arm"] == "C" and m["seed"] == 1
    assert sorted(m["files"]) == ["ckpt.bin", "config.yaml", "probes/round0.jsonl", "rounds.jsonl"]
    assert m["files"]["ckpt.bin"] == hashlib.sha256(bytes(range(256)) * 4).hexdigest()
    assert m["chain_heads"] == {"rounds.jsonl": verify_chain(run / "rounds.jsonl"),
                                "probes/round0.jsonl": verify_chain(run / "probes" / "round0.jsonl")}
    assert json.loads((run / "manifest.json").read_text()) == m
    with pytest.raises(ValueError, match="computed by write_manifest"):
        write_manifest(tmp_path, {"files": {}})


def test_seal_marks_read_only_and_verifies(tmp_path):
    run = tmp_path / "seed1"
    m = _make_run(run)
    assert is_sealed(run)
    assert (run / "SEALED").read_text().strip() == sha256_file(run / "manifest.json")
    for dp, dns, fns in os.walk(run):
        for p in [dp] + [os.path.join(dp, n) for n in fns]:
            assert os.stat(p).st_mode & 0o222 == 0, p
    assert verify_sealed(run) == m


def test_sealed_run_refuses_the_harness_writers(tmp_path):
    run = tmp_path / "seed1"
    _make_run(run)
    with pytest.raises(SealedError, match="sealed"):
        RecordLog(run / "rounds.jsonl").append({"round": 9})
    with pytest.raises(SealedError, match="sealed"):
        RecordLog(run / "probes" / "round0.jsonl", run_dir=run).append({"task": "b"})
    with pytest.raises(SealedError, match="sealed"):
        RecordLog(run / "rounds.jsonl").truncate_after(1)
    with pytest.raises(SealedError, match="sealed"):
        atomic_write_text(run / "probes" / "new.txt", "x", run_dir=run)
    with pytest.raises(SealedError, match="sealed"):
        write_manifest(run, {})
    with pytest.raises(SealedError, match="already sealed"):
        seal(run)
    assert verify_sealed(run)["arm"] == "C"  # nothing was changed by the refused calls


def test_seal_refuses_a_stale_manifest(tmp_path):
    run = tmp_path / "seed1"
    run.mkdir()
    _write_log(run / "rounds.jsonl", _rounds(2))
    write_manifest(run, {"arm": "A"})
    RecordLog(run / "rounds.jsonl").append({"round": 2})
    with pytest.raises(TamperError, match="rounds.jsonl"):
        seal(run)
    assert not is_sealed(run)


def _tamper_edit_byte(d):
    p = d / "ckpt.bin"
    data = bytearray(p.read_bytes())
    data[100] ^= 1
    p.write_bytes(bytes(data))


def _tamper_rechain(d):
    """Rewrite rounds.jsonl as a fully valid chain with different content."""
    p = d / "rounds.jsonl"
    recs = RecordLog(p).records()
    recs[1]["pass_rate"] = 0.99
    forged = d.parent / "forged.jsonl"  # the harness refuses to write inside a sealed dir, so forge outside
    _write_log(forged, recs)
    shutil.copyfile(forged, p)


def _tamper_manifest(d):
    m = json.loads((d / "manifest.json").read_text())
    m["seed"] = 2
    (d / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("tamper, named", [
    (lambda d: _rewrite_line(d / "rounds.jsonl", 2, lambda o: o.update(pass_rate=0.99)), "rounds.jsonl:2:"),
    (_tamper_edit_byte, "ckpt.bin: sha256 differs"),
    (_tamper_rechain, "rounds.jsonl: chain head"),
    (lambda d: (d / "extra.txt").write_text("x"), "extra.txt: present but not listed"),
    (lambda d: (d / "config.yaml").unlink(), "config.yaml: listed in the manifest but missing"),
    (_tamper_manifest, "manifest.json: manifest sha256 does not match"),
    (lambda d: (d / "SEALED").unlink(), "SEALED: run directory is not sealed"),
    (lambda d: (d / "probes" / "round0.jsonl").write_bytes(b""), "round0.jsonl: chain head"),
    (lambda d: os.symlink(d / "config.yaml", d / "link.yaml"), "link.yaml: not a regular file"),
])
def test_tampered_sealed_copy_is_detected(tmp_path, tamper, named):
    run = tmp_path / "seed1"
    _make_run(run)
    copy = _writable_copy(run, tmp_path / "copy")
    assert verify_sealed(copy)  # an untouched copy verifies
    tamper(copy)
    with pytest.raises(TamperError) as e:
        verify_sealed(copy)
    assert named in str(e.value)
    assert verify_sealed(run)  # the original is untouched


def test_open_to_readers_opens_one_document_and_the_way_to_it(tmp_path):
    """The document 0444, each folder from the top down to it +x for group and others (no +r), its
    siblings as they were; a path outside the top is refused."""
    top = tmp_path / "results"
    doc = top / "p" / "frozen" / "DOC.md"
    records.atomic_write_text(doc, "text\n")
    records.atomic_write_text(top / "p" / "frozen" / "sets" / "answers.jsonl", "[1]\n")
    records.open_to_readers(doc, top)
    mode = lambda q: q.stat().st_mode & 0o777  # noqa: E731
    assert mode(doc) == 0o444
    assert [mode(d) for d in (top, top / "p", top / "p" / "frozen")] == [0o711, 0o711, 0o711]
    assert mode(top / "p" / "frozen" / "sets") == 0o700 and mode(top / "p" / "frozen" / "sets" / "answers.jsonl") == 0o600
    with pytest.raises(ValueError):
        records.open_to_readers(doc, tmp_path / "elsewhere")


# ---------------------------------------------------------------- typed records (harness.core.typed)

def test_a_typed_record_reads_and_writes_back_the_same_dict():
    from harness.core.typed import RoundRecord
    raw = {"kind": "round", "round": 1, "budget": {"learner_steps": 5}, "checkpoint": "ab", "ledger_lines": 3,
           "experience_lines": 0, "eval": {"probe_passed": "0110", "probe_pass_rate": 0.5, "eval_rollouts": 4},
           "heircommit": {"confirm": {"decision": "commit"}, "recovery": {"ran": False}, "screen": None},
           "a_later_section": [1, 2]}
    rec = RoundRecord.from_dict(raw)
    assert rec.to_dict() == raw  # undeclared keys kept, absent optional fields stay absent, None stays None
    assert rec.eval.probe_passed == "0110" and rec.heircommit.confirm["decision"] == "commit"
    assert rec.heircommit.screen is None and rec.monitors is None and not rec.has("monitors")
    assert rec.eval.value("eval_rollouts") == 4 and rec.eval.value("monitor_cross_mi") is None
    assert rec.has("a_later_section") and rec.has("eval") and not rec.has("train")


def test_a_typed_record_names_the_file_and_the_missing_or_malformed_field():
    from harness.core.typed import RecordError, RoundRecord, StartRecord
    with pytest.raises(RecordError, match=r"^run/records\.jsonl:3: lacks field 'checkpoint' \(RoundRecord\)$"):
        RoundRecord.from_dict({"kind": "round", "round": 1, "budget": {}, "eval": {"probe_passed": "1"},
                               "ledger_lines": 0, "experience_lines": 0}, "run/records.jsonl:3")
    with pytest.raises(RecordError, match=r"^records\.jsonl:1\.base_eval: lacks field 'probe_passed'"):
        StartRecord.from_dict({"kind": "start", "protocol": "p", "arm": "A", "seed": 1, "lock_hash": None,
                               "code_version": "", "budget": {}, "base_eval": {}}, "records.jsonl:1")
    with pytest.raises(RecordError, match=r"^m\.json\.budget: expected an object, got list"):
        StartRecord.from_dict({"kind": "start", "protocol": "p", "arm": "A", "seed": 1, "lock_hash": None,
                               "code_version": "", "budget": [], "base_eval": {"probe_passed": "1"}}, "m.json")
