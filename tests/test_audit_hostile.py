"""The audit of an archive someone else made: untrusted input. Every hostile archive is refused in one
bounded line (the CLI: exit status 2, no traceback), nothing is written outside the audit's temporary
folder and that folder is gone afterwards, whatever the archive holds: a gzip bomb, members declaring
huge sizes, duplicates, links, deep directories, YAML alias bombs, 5000-digit integers, bytes that are
not UTF-8, NaN in a sealed record, a family module for the audit to import. A seeded fuzz mutates one
real archive a few hundred ways."""
import gzip
import hashlib
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from harness.core import records
from harness.readout import audit as audit_module
from harness.readout.analyzer import readout
from harness.readout.audit import MESSAGE_CHARS, AuditError, Limits, audit, pack
from tests.fixtures_runs import build_tree

SEED = 20260301
BINARY = (".pt", ".png")


@dataclass
class Archive:
    """The packed fixture: its name, the tar.gz bytes, and its members as (TarInfo, bytes or None)."""
    name: str
    gz: bytes
    tar: bytes
    members: list
    root: Path


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """One real sealed, read-out fixture tree packed once; the cases mutate its bytes."""
    tree = build_tree(tmp_path_factory.mktemp("hostile"))
    readout(tree.protocol_dir, tree.results_dir)
    gz = pack(tree.protocol_dir, tree.results_dir).read_bytes()
    tar = gzip.decompress(gz)
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as t:
        members = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]
    return Archive(tree.name, gz, tar, members, tree.root)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The folder every temporary directory of the audit goes under (tempfile.tempdir), watched; in
    memory (/dev/shm) where there is one, so that a few hundred extractions take seconds."""
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="audit-hostile-", dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) \
        else tmp_path / "scratch"
    root.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    leftover = os.listdir(root)
    shutil.rmtree(root)
    assert leftover == []


def _snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): (p.is_dir() or records.sha256_file(p))
            for p in sorted(root.rglob("*"))}


# ---------------------------------------------------------------- building archives

def _info(name: str, size: int = 0, type_=tarfile.REGTYPE, **kw) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode = size, type_, 0o755 if type_ == tarfile.DIRTYPE else 0o444
    for k, v in kw.items():
        setattr(info, k, v)
    return info


def _tar(members: list) -> bytes:
    """A tar of (TarInfo, bytes or None) in the order given (duplicates kept), with its end blocks."""
    return _raw_tar(members) + b"\0" * 1024


def _copy(info: tarfile.TarInfo) -> tarfile.TarInfo:
    out = tarfile.TarInfo(info.name)
    for k in ("size", "type", "mode", "linkname", "mtime", "uid", "gid", "devmajor", "devminor"):
        setattr(out, k, getattr(info, k))
    return out


def _raw_tar(members: list) -> bytes:
    """The members' headers and data blocks, without the end-of-archive blocks (more may follow)."""
    out = []
    for info, data in members:
        info = _copy(info)
        info.size = len(data) if data is not None else 0
        out.append(info.tobuf(tarfile.PAX_FORMAT))
        if data:
            out.append(data + b"\0" * (-len(data) % 512))
    return b"".join(out)


def _gz(tar: bytes) -> bytes:
    return gzip.compress(tar, compresslevel=1, mtime=0)


def _replace(a: Archive, name: str, data: bytes) -> list:
    assert any(m.name == name for m, _ in a.members), name
    return [(m, data if m.name == name else d) for m, d in a.members]


def _text_members(a: Archive, suffix: tuple = ()) -> list[str]:
    return [m.name for m, d in a.members if d and not m.name.endswith(BINARY) and (not suffix or m.name.endswith(suffix))]


# ---------------------------------------------------------------- mutations: (label, archive bytes, expected words)

def _truncate(rng, a):
    return "truncated", a.gz[:rng.randrange(0, len(a.gz) - 1)], None


def _flip_gz(rng, a):
    data = bytearray(a.gz)
    for _ in range(rng.randint(1, 8)):  # past the gzip header's mtime/OS bytes, which nothing checks
        data[rng.randrange(10, len(data))] ^= 1 << rng.randrange(8)
    return "bit flips in the tar.gz", bytes(data), None


def _flip_header(rng, a):
    """One bit of a member's header: its checksum no longer matches (the bytes after the checksum's NUL,
    148-155, are the one place a flip goes unseen, so none lands there)."""
    info = rng.choice([m for m, _ in a.members])
    data = bytearray(a.tar)
    data[info.offset + rng.choice([*range(0, 148), *range(156, 512)])] ^= 1 << rng.randrange(8)
    return f"flipped header of {info.name}", _gz(bytes(data)), None


def _flip_text(rng, a):
    name = rng.choice(_text_members(a))
    data = bytearray(dict((m.name, d) for m, d in a.members)[name])
    at = rng.choice([i for i, b in enumerate(data) if b < 0x80])
    data[at] |= 0x80  # an ASCII byte with its top bit set is never UTF-8 where an ASCII byte was
    return f"non-UTF-8 byte in {name}", _gz(_tar(_replace(a, name, bytes(data)))), "not UTF-8"


def _duplicate(rng, a):
    members = list(a.members)
    i = rng.randrange(len(members))
    info, data = members[i]
    if data is not None and rng.random() < 0.5:
        data = data[: len(data) // 2]  # the second copy differs: the last one would win
    members.insert(rng.randrange(i + 1, len(members) + 1), (info, data))
    return f"{info.name} twice", _gz(_tar(members)), "twice"


_ADDED = ["results/{n}/notes.txt", "results/{n}/A/seed1/extra.jsonl", "protocols/{n}/extra.yaml",
          "results/{n}/frozen/sets/extra.json", "results/{n}/readout/extra.md", "results/{n}/FROZEN.lock"]


def _add_member(rng, a):
    name = rng.choice(_ADDED).format(n=a.name)
    data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))) + b"\xff"
    members = list(a.members)
    members.insert(rng.randrange(len(members) + 1), (_info(name), data))
    return f"random member {name}", _gz(_tar(members)), "not UTF-8"


def _huge_size(rng, a):
    """A header that declares far more bytes than follow (or than any limit allows)."""
    size = rng.choice([Limits().budget(len(a.gz)) + 1, 2 ** 33, 2 ** 40, 2 ** 60, 50 << 20])
    head = _raw_tar(a.members[:rng.randrange(1, len(a.members))])
    info = _info(f"results/{a.name}/readout/huge.md", size)
    body = info.tobuf(tarfile.PAX_FORMAT) + b"x" * rng.randint(0, 4096)
    return f"declares {size} bytes", _gz(head + body + b"\0" * 1024), None


_YAML = {
    "alias bomb": ("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                   + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
                             for i in range(8)), "YAML nodes"),
    "5000-digit integer": ("size: " + "9" * 5000 + "\n", "5000 digits"),
    "not UTF-8": ("size: 4\nname: caf\udce9\n", "not UTF-8"),
    "NaN": ("rounds: .nan\n", "not a finite number"),
    "infinity": ("rounds: -.inf\n", "not a finite number"),
    "deep nesting": ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nest"),
    "recursive alias": ("a: &a [1, *a]\n", "recursive"),
    "a key twice": ("rounds: 2\nrounds: 3\n", "twice"),
    "a python tag": ("x: !!python/object/apply:os.system ['touch /tmp/pwned']\n", "not valid YAML"),
    "a broken document": ("a: [1, 2\n", "not valid YAML"),
}


def _hostile_yaml(rng, a):
    label = rng.choice(sorted(_YAML))
    text, words = _YAML[label]
    name = rng.choice(_text_members(a, (".yaml",)))
    return f"{label} in {name}", _gz(_tar(_replace(a, name, text.encode("utf-8", "surrogateescape")))), words


def _hostile_json(rng, a):
    name = rng.choice(_text_members(a, (".json", ".jsonl", ".lock", ".log")))
    data = dict((m.name, d) for m, d in a.members)[name]
    label, bad, words = rng.choice([
        ("NaN", b'{"a": NaN}', "finite"), ("Infinity", b'{"a": -Infinity}', "finite"),
        ("1e999", b'{"a": 1e999}', "finite"), ("5000-digit integer", b'{"a": ' + b"7" * 5000 + b"}", "5000 digits"),
        ("deep nesting", b"[" * 100_000 + b"]" * 100_000, "nested too deep"), ("a key twice", b'{"k": 1, "k": 2}', "twice"),
        ("not UTF-8", b'{"a": "\xc3\x28"}', "not UTF-8"), ("not JSON", b'{"a": ', "not valid JSON")])
    lines = data.split(b"\n")
    # one line of a record log: a sealed record holding NaN (whoever made the archive re-makes hashes and seals)
    if name.endswith((".jsonl", ".log")):
        lines[rng.randrange(max(1, len(lines) - 1))] = bad
        data = b"\n".join(lines)
    else:
        data = bad
    return f"{label} in {name}", _gz(_tar(_replace(a, name, data))), words


def _deep(rng, a):
    depth = rng.choice([17, 40, 300, 1100])
    members = list(a.members)
    path = f"results/{a.name}/frozen"
    for _ in range(depth):
        path += "/" + rng.choice("dDx") * rng.randint(1, 3)
        members.append((_info(path, type_=tarfile.DIRTYPE), None))
    members.append((_info(path + "/leaf.txt"), b"leaf\n"))
    return f"{depth} directories deep", _gz(_tar(members)), "levels deep"


def _bad_name(rng, a):
    name = rng.choice(["/etc/passwd", f"results/{a.name}/../../escape.txt", f"results/{a.name}/./x.txt",
                       f"results/{a.name}/a\nb.txt", f"results/{a.name}/" + "n" * 600, "protocols/other/x.yaml",
                       "results", f"results/{a.name}/caf\udce9.txt", f"results/{a.name}/bell\x07.txt", "escape.txt"])
    members = list(a.members)
    members.insert(rng.randrange(len(members) + 1), (_info(name), b"x\n"))
    return f"member named {name!r}", _gz(_tar(members)), "member"


def _bad_type(rng, a):
    kind, extra = rng.choice([(tarfile.SYMTYPE, {"linkname": "/etc/passwd"}), (tarfile.LNKTYPE, {"linkname": "x"}),
                              (tarfile.FIFOTYPE, {}), (tarfile.CHRTYPE, {"devmajor": 1, "devminor": 3}),
                              (tarfile.BLKTYPE, {"devmajor": 8}), (tarfile.CONTTYPE, {})])
    name = f"results/{a.name}/frozen/odd"
    members = list(a.members)
    members.insert(rng.randrange(len(members) + 1), (_info(name, type_=kind, **extra), None))
    return f"a member of type {kind!r}", _gz(_tar(members)), "not a regular file or directory"


def _trailing(rng, a):
    junk = bytes(rng.randrange(1, 256) for _ in range(rng.randint(1, 2000)))
    if rng.random() < 0.5:
        return "data after the tar's end", _gz(a.tar + junk), None
    return "data after the gzip stream", a.gz + junk, None


def _family(rng, a):
    name = f"protocols/{a.name}/tasks.yaml"
    text = dict((m.name, d) for m, d in a.members)[name].decode()
    module = rng.choice(["this", "subprocess", "tests.toy_family", "http.server"])
    assert "family:\n" in text
    text = text.replace("family:\n", f"family:\n  module: {module}\n", 1)
    return f"family module {module}", _gz(_tar(_replace(a, name, text.encode()))), "family.module"


MUTATIONS = [(_truncate, 30), (_flip_gz, 50), (_flip_header, 35), (_flip_text, 20), (_duplicate, 20),
             (_add_member, 20), (_huge_size, 15), (_hostile_yaml, 30), (_hostile_json, 30), (_deep, 8),
             (_bad_name, 15), (_bad_type, 12), (_trailing, 12), (_family, 4)]  # 301 archives


def _audit_case(archive_dir: Path, a: Archive, data: bytes, sidecar: bool = True, **kw) -> AuditError:
    """Write the archive (and a sidecar .sha256 that matches it: whoever made it made both), audit it, and
    return the refusal; a case the audit does not refuse fails the test."""
    path = archive_dir / f"{a.name}.audit.tar.gz"
    path.write_bytes(data)
    if sidecar:
        (archive_dir / (path.name + ".sha256")).write_text(f"{hashlib.sha256(data).hexdigest()}  {path.name}\n")
    with pytest.raises(AuditError) as caught:
        audit(a.name, archive_dir, path, **kw)
    return caught.value


def _one_line(err: Exception, label: str) -> str:
    text = str(err)
    assert "\n" not in text and "\r" not in text, f"{label}: {text[:300]}"
    assert 0 < len(text) <= MESSAGE_CHARS + 40, f"{label}: {len(text)} chars"  # "...(+N chars)"
    assert "Traceback" not in text, f"{label}: {text[:300]}"
    return text


def test_a_few_hundred_mutated_archives_each_end_in_one_line(packed, scratch, tmp_path):
    rng = random.Random(SEED)
    before = _snapshot(packed.root)
    archive_dir = tmp_path / "auditor"
    archive_dir.mkdir()
    modules = set(sys.modules)
    seen = {}
    for mutate, n in MUTATIONS:
        for i in range(n):
            label, data, words = mutate(rng, packed)
            err = _audit_case(archive_dir, packed, data)
            text = _one_line(err, label)
            if words:
                assert words in text, f"{label}: {text}"
            assert os.listdir(scratch) == [], f"{label}: the temporary folder was left behind"
            assert sorted(os.listdir(archive_dir)) == sorted([f"{packed.name}.audit.tar.gz",
                                                              f"{packed.name}.audit.tar.gz.sha256"]), label
            seen[mutate.__name__] = seen.get(mutate.__name__, 0) + 1
    assert sum(seen.values()) >= 300 and len(seen) == len(MUTATIONS)
    assert _snapshot(packed.root) == before  # the sealed tree the archive came from: untouched
    assert "this" not in set(sys.modules) - modules  # no family module the archive named was imported


class _Zeros(io.RawIOBase):
    """n zero bytes, read in chunks (a bomb is built without holding it)."""

    def __init__(self, n: int):
        self.left = n

    def readable(self):
        return True

    def readinto(self, buf) -> int:
        k = min(len(buf), self.left)
        buf[:k] = bytes(k)
        self.left -= k
        return k


def _bomb(a: Archive, sizes: list[int]) -> bytes:
    """A tar.gz of the archive's first members, then members of zeros of `sizes` bytes under readout/."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as t:
            for info, data in a.members[:3]:
                t.addfile(_copy(info), io.BytesIO(data) if data is not None else None)
            for i, n in enumerate(sizes):
                t.addfile(_info(f"results/{a.name}/readout/zeros{i}.md", n), io.BufferedReader(_Zeros(n)))
    return buf.getvalue()


def test_a_gzip_bomb_is_refused_before_its_bytes_are_written(packed, scratch, tmp_path, monkeypatch):
    """256 MiB of zeros in one member (an archive of a few hundred KiB): refused at its header, before a
    byte of it is written (past the budget: 100 times the archive's bytes); spread over 1 MiB members,
    refused at the first member past that budget."""
    written = []
    real_write = audit_module._Extraction.write
    monkeypatch.setattr(audit_module._Extraction, "write", lambda self, tar, m: (written.append((m.name, m.size)),
                                                                                   real_write(self, tar, m)))
    bomb = _bomb(packed, [256 << 20])
    assert len(bomb) < 400 << 10
    text = _one_line(_audit_case(tmp_path, packed, bomb), "bomb")
    assert "member 'results/fixture/readout/zeros0.md': would bring the extracted bytes to" in text
    assert f"past {Limits().budget(len(bomb))} (at most 100 times the archive's {len(bomb)} bytes" in text
    assert sum(size for _, size in written) < 1 << 20 and not [n for n, _ in written if "zeros" in n]
    written.clear()
    spread = _bomb(packed, [1 << 20] * 256)
    budget = Limits().budget(len(spread))
    text = _one_line(_audit_case(tmp_path, packed, spread), "spread bomb")
    assert f"zeros{budget >> 20}.md': would bring the extracted bytes to" in text
    assert sum(size for _, size in written) <= budget
    assert os.listdir(scratch) == []


@pytest.mark.parametrize("limits, words", [
    (Limits(members=10), "more than 10 members"),
    (Limits(depth=3), "member 'results/fixture/A/seed1': 4 levels deep; expected at most 3"),
    (Limits(name_chars=20), "member 'protocols/fixture/arms.yaml': a name longer than 20 characters"),
    (Limits(member_bytes=1000), "member 'protocols/fixture/gates.yaml': declares 1007 bytes; expected at most 1000"),
    (Limits(ratio=1, ratio_floor=0), "would bring the extracted bytes to"),
    (Limits(total_bytes=10_000), "past 10000"),
    (Limits(text_bytes=1000), "member 'protocols/fixture/gates.yaml': declares 1007 bytes of text; expected at most 1000"),
])
def test_each_limit_is_named_when_the_real_archive_breaks_it(packed, scratch, tmp_path, limits, words):
    assert words in _one_line(_audit_case(tmp_path, packed, packed.gz, limits=limits), words)
    assert os.listdir(scratch) == []


def test_a_deep_directory_is_refused_and_the_scratch_folder_removed(packed, scratch, tmp_path):
    members = list(packed.members)
    path = f"results/{packed.name}/frozen"
    for _ in range(1100):
        path += "/d"
        members.append((_info(path, type_=tarfile.DIRTYPE), None))
    text = _one_line(_audit_case(tmp_path, packed, _gz(_tar(members))), "1100 deep")
    assert "frozen/d/d/d/d/d/d/d/d/d/d/d/d/d/d': 17 levels deep; expected at most 16" in text
    assert os.listdir(scratch) == []


def test_a_family_module_the_registry_does_not_list_is_never_imported(packed, scratch, tmp_path, capsys):
    name = f"protocols/{packed.name}/tasks.yaml"
    text = dict((m.name, d) for m, d in packed.members)[name].decode()
    hostile = text.replace("family:\n", "family:\n  module: this\n", 1)  # `import this` prints the Zen of Python
    err = _audit_case(tmp_path, packed, _gz(_tar(_replace(packed, name, hostile.encode()))))
    assert "key 'family.module' is 'this'" in _one_line(err, "family") and "--trust-family-modules" in str(err)
    assert "Zen of Python" not in capsys.readouterr().out
    # the family's own registered module is the registry's: no refusal for it (the archive then reproduces)
    listed = text.replace("family:\n", "family:\n  module: families.code\n", 1)
    data = _gz(_tar(_replace(packed, name, listed.encode())))
    path = tmp_path / f"{packed.name}.audit.tar.gz"
    path.write_bytes(data)
    (tmp_path / (path.name + ".sha256")).unlink()
    ok, message = audit(packed.name, tmp_path, path)
    assert not ok and "family" not in message.split("\n")[0] and "lock does not verify" in message  # its bytes changed
    assert os.listdir(scratch) == []


def test_the_cli_answers_a_hostile_archive_in_one_line_with_status_2(packed, tmp_path):
    """The command line, as an auditor runs it: status 2, one line on stderr, nothing on stdout, for a
    bomb of aliases, a sealed record holding NaN and a duplicate member."""
    alias = _YAML["alias bomb"][0].encode()
    nan_record = dict((m.name, d) for m, d in packed.members)[f"results/{packed.name}/A/seed1/records.jsonl"]
    nan_record = nan_record.replace(b'"heldout_bpb":2.0', b'"heldout_bpb":NaN', 1)
    cases = {"alias bomb": _gz(_tar(_replace(packed, f"protocols/{packed.name}/gates.yaml", alias))),
             "NaN": _gz(_tar(_replace(packed, f"results/{packed.name}/A/seed1/records.jsonl", nan_record))),
             "duplicate": _gz(_tar([*packed.members, packed.members[-1]]))}
    env = {**os.environ, "TMPDIR": str(tmp_path / "scratch")}
    (tmp_path / "scratch").mkdir()
    for label, data in cases.items():
        archive = tmp_path / label.replace(" ", "_") / f"{packed.name}.audit.tar.gz"
        archive.parent.mkdir()
        archive.write_bytes(data)
        p = subprocess.run([sys.executable, "-m", "harness", "audit", "--protocol", packed.name, "--results-dir",
                            str(archive.parent), "--archive", str(archive)], cwd=PROJECT_ROOT, capture_output=True,
                           text=True, env=env, timeout=300)
        assert p.returncode == 2 and p.stdout == "", (label, p.stdout, p.stderr[-2000:])
        assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), (label, p.stderr[-2000:])
        assert len(p.stderr) < MESSAGE_CHARS + 100 and "Traceback" not in p.stderr, label
        assert os.listdir(tmp_path / "scratch") == [], label
        assert os.listdir(archive.parent) == [archive.name], label
