"""Append-only chained records, run manifests and seals.

A record log is JSONL where every line is canonical JSON (sorted keys, compact separators, ASCII)
carrying two extra fields: ``prev``, the hash of the line before it ("0"*64 for the first line), and
``hash``, the sha256 of the line's own canonical JSON without the ``hash`` field. Editing, deleting,
reordering or inserting a line breaks the chain at that line.

A finished run directory gets a manifest (sha256 of every file, head of every chain, plus the
runner's fields) and is then sealed: a ``SEALED`` marker holding the manifest's sha256, and every
file and directory made read-only. Permission bits do not stop root, so read-only only guards
against accidents; `verify_sealed` re-hashes everything and is the real check.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError

GENESIS = "0" * 64  # the "prev" of the first line, and the head of an empty log
MANIFEST_NAME = "manifest.json"
SEALED_NAME = "SEALED"
_RESERVED_RECORD_KEYS = ("prev", "hash")
_RESERVED_MANIFEST_KEYS = ("files", "chain_heads")


class TamperError(HarnessError):
    """A record, manifest or seal does not verify. `path` and `line` (1-based, or None) say where."""

    def __init__(self, path, what: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {what}")


class SealedError(HarnessError):
    """A write was attempted inside a sealed run directory."""


# ---------------------------------------------------------------- hashing and canonical JSON

def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _non_finite_path(obj: Any, path: str = "") -> str | None:
    """Dotted path of the first non-finite float inside obj, or None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "<root>"
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = _non_finite_path(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = _non_finite_path(v, f"{path}[{i}]")
            if found:
                return found
    return None


def canonical_json(obj: Any) -> str:
    """One-line canonical JSON: sorted keys, no spaces, ASCII only, no NaN/Infinity."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except ValueError as e:
        bad = _non_finite_path(obj)
        if bad is None:
            raise
        raise ValueError(f"field {bad!r} is not a finite number; record None or a string instead") from e


# ---------------------------------------------------------------- sealed-directory guard

def sealed_dir_above(path, run_dir=None) -> Path | None:
    """The sealed directory that contains `path`, or None.

    Checks the file's own directory and, when `run_dir` is given and contains the path, every
    directory between them (run_dir included).
    """
    parent = Path(path).absolute().parent
    candidates = [parent]
    if run_dir is not None:
        root = Path(run_dir).absolute()
        if parent == root or root in parent.parents:
            d = parent
            while d != root:
                d = d.parent
                candidates.append(d)
        else:
            candidates.append(root)
    for d in candidates:
        if (d / SEALED_NAME).exists():
            return d
    return None


def _refuse_if_sealed(path, run_dir=None) -> None:
    sealed = sealed_dir_above(path, run_dir)
    if sealed is not None:
        raise SealedError(f"refusing to write {path}: run directory {sealed} is sealed (it holds {SEALED_NAME}); "
                          "a sealed run is never modified, start a new run directory instead")


# ---------------------------------------------------------------- atomic writes

def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return  # some filesystems do not allow opening a directory; the rename is still atomic
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_dirs(path) -> Path:
    """mkdir -p where every directory it creates is 0700: frozen sets, locks, checkpoints and
    results are owner-only (a second wall behind the sandbox's allow-list root)."""
    path = Path(path)
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass
    return Path(*missing[:1]) if missing else path


def open_to_readers(path, top) -> None:
    """Make the document `path` read-only and readable by everyone (0444, like the sealed readout's
    files), and every directory from `top` down to it traversable by group and others (+x, never +r:
    they can open a path they are given but list nothing). The owner-only wall stays around
    everything else: a sibling file keeps its 0600, a sibling directory its 0700. `path` must lie
    under `top`; directories `top` does not contain are left alone."""
    path, top = Path(path), Path(top)
    rel = path.parent.relative_to(top)  # ValueError when path is not under top
    d = top
    for part in ("",) + rel.parts:
        d = d / part if part else d
        mode = stat.S_IMODE(d.stat().st_mode)
        if mode & 0o011 != 0o011:
            os.chmod(d, mode | 0o011)
    os.chmod(path, 0o444)


@contextmanager
def atomic_writer(path, run_dir=None):
    """`with atomic_writer(path) as f: f.write(...)`: the one atomic write of the harness.

    Writes go to a temp file in the same directory (".<name>.<random>.tmp"); on a clean exit it is
    flushed, fsynced and renamed over `path` (owner-only: 0600, in directories created 0700), then
    the directory is fsynced, so readers see the old file or the new one and a crash never leaves
    half of one. On an error the
    temp file is removed and `path` is untouched. Refuses inside a sealed run directory (see
    `sealed_dir_above`).
    """
    path = Path(path)
    _refuse_if_sealed(path, run_dir)
    private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path, data: bytes, run_dir=None) -> None:
    """Write `data` to `path` atomically (`atomic_writer`)."""
    with atomic_writer(path, run_dir) as f:
        f.write(data)


def atomic_write_text(path, text: str, run_dir=None) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), run_dir=run_dir)


# ---------------------------------------------------------------- chained record log

def _line_hash(body: dict) -> str:
    """Hash of a line: sha256 of the canonical JSON of everything but the "hash" field."""
    return sha256_bytes(canonical_json(body).encode("ascii"))


def _read_lines(path: Path) -> tuple[list[bytes], bool]:
    """(complete lines without their newline, whether a partial last line follows them)."""
    data = path.read_bytes()
    if not data:
        return [], False
    parts = data.split(b"\n")
    partial = parts[-1] != b""  # no final newline: the last write did not complete
    return parts[:-1], partial


def _verify_lines(path: Path, lines: list[bytes]) -> tuple[list[dict], str]:
    """Verify a chain of lines. Returns (records without prev/hash, head). Raises TamperError(path:line)."""
    prev = GENESIS
    out = []
    for i, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("ascii")
            obj = json.loads(text)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise TamperError(path, f"not a canonical JSON line ({str(e)[:200]})", i) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("hash"), str) or not isinstance(obj.get("prev"), str):
            raise TamperError(path, "line is not an object with string 'prev' and 'hash' fields", i)
        try:
            canonical = canonical_json(obj)
        except ValueError as e:  # NaN or Infinity: never written by RecordLog.append
            raise TamperError(path, f"not a canonical JSON line ({str(e)[:200]})", i) from None
        if canonical != text:
            raise TamperError(path, "line is not in canonical form (edited by hand?)", i)
        claimed = obj.pop("hash")
        if obj["prev"] != prev:
            raise TamperError(path, f"chain broken: prev {obj['prev'][:12]}... but the line before hashes to {prev[:12]}...", i)
        actual = _line_hash(obj)
        if actual != claimed:
            raise TamperError(path, f"line content does not match its hash {claimed[:12]}... (content changed)", i)
        del obj["prev"]
        out.append(obj)
        prev = claimed
    return out, prev


def verify_chain(path) -> str:
    """Verify a whole record log; return its head hash. Raises TamperError naming path:line."""
    path = Path(path)
    if not path.exists():
        raise TamperError(path, "record log is missing")
    lines, partial = _read_lines(path)
    _, head = _verify_lines(path, lines)
    if partial:
        raise TamperError(path, "incomplete last line (a write was interrupted)", len(lines) + 1)
    return head


class RecordLog:
    """Append-only JSONL where each line carries the sha256 of the previous line ("prev") and of itself.

    `run_dir`, when given, is the run directory whose SEALED marker forbids writes (the file's own
    directory is always checked). One writer per log; the log re-verifies itself if the file changed
    size behind its back.
    """

    def __init__(self, path, run_dir=None):
        self.path = Path(path)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self._head: str | None = None
        self._size: int | None = None  # file size when _head was computed

    def _current_head(self) -> str:
        size = self.path.stat().st_size if self.path.exists() else 0
        if self._head is None or size != self._size:
            self._head = verify_chain(self.path) if self.path.exists() else GENESIS
            self._size = size
        return self._head

    def append(self, record: dict) -> str:
        """Append one record (a JSON-serialisable dict without "prev"/"hash"); flush + fsync; return its hash."""
        if not isinstance(record, dict):
            raise TypeError(f"{self.path}: a record must be a dict, got {type(record).__name__}")
        clash = [k for k in _RESERVED_RECORD_KEYS if k in record]
        if clash:
            raise ValueError(f"{self.path}: record field(s) {clash} are reserved for the chain")
        _refuse_if_sealed(self.path, self.run_dir)
        body = dict(record, prev=self._current_head())
        try:
            h = _line_hash(body)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{self.path}: record cannot be written as canonical JSON: {e}") from e
        line = (canonical_json(dict(body, hash=h)) + "\n").encode("ascii")
        private_dirs(self.path.parent)
        with open(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self._head = h
        self._size = (self._size or 0) + len(line)
        return h

    def records(self, allow_partial_tail: bool = False) -> list[dict]:
        """Verified read: every record (without "prev"/"hash"), in order. Raises TamperError(path:line).

        `allow_partial_tail=True` ignores an incomplete last line (a write cut short by a crash) so a
        resuming runner can count its completed lines and then `truncate_after` them.
        """
        if not self.path.exists():
            return []
        lines, partial = _read_lines(self.path)
        recs, _ = _verify_lines(self.path, lines)
        if partial and not allow_partial_tail:
            raise TamperError(self.path, "incomplete last line (a write was interrupted)", len(lines) + 1)
        return recs

    def head(self) -> str:
        """Hash of the last line ("0"*64 for an empty or missing log), after verifying the chain."""
        return verify_chain(self.path) if self.path.exists() else GENESIS

    def __len__(self) -> int:
        return len(self.records())

    def truncate_after(self, keep: int) -> None:
        """Keep the first `keep` lines (verified) and drop the rest, atomically. Used on resume."""
        if keep < 0:
            raise ValueError(f"{self.path}: keep must be >= 0, got {keep}")
        lines, _ = _read_lines(self.path) if self.path.exists() else ([], False)
        if keep > len(lines):
            raise ValueError(f"{self.path}: cannot keep {keep} lines, the log has {len(lines)} complete lines")
        _verify_lines(self.path, lines[:keep])
        data = b"".join(raw + b"\n" for raw in lines[:keep])
        atomic_write_bytes(self.path, data, run_dir=self.run_dir)
        self._head, self._size = None, None


# ---------------------------------------------------------------- manifest and seal

def _run_files(run_dir: Path) -> list[str]:
    """Relative POSIX paths of every regular file under run_dir except the manifest and seal marker.

    Symlinks and special files are refused: a record must be the bytes in the directory itself.
    """
    out = []
    for dirpath, dirnames, filenames in os.walk(run_dir):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = Path(dirpath) / name
            rel = full.relative_to(run_dir).as_posix()
            if rel in (MANIFEST_NAME, SEALED_NAME):
                continue
            mode = full.lstat().st_mode
            if not stat.S_ISREG(mode):
                raise TamperError(full, "not a regular file (symlinks and special files are not allowed in a run directory)")
            out.append(rel)
    return sorted(out)


def write_manifest(run_dir, fields: dict) -> dict:
    """Write run_dir/manifest.json: `fields` plus "files" {relpath: sha256} and "chain_heads" {relpath: head}.

    Every *.jsonl is verified as a chain first (TamperError on a break). Returns the manifest.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    clash = [k for k in _RESERVED_MANIFEST_KEYS if k in fields]
    if clash:
        raise ValueError(f"manifest field(s) {clash} are computed by write_manifest, do not pass them")
    rels = _run_files(run_dir)
    manifest = dict(fields)
    manifest["chain_heads"] = {r: verify_chain(run_dir / r) for r in rels if r.endswith(".jsonl")}
    manifest["files"] = {r: sha256_file(run_dir / r) for r in rels}
    text = json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"
    atomic_write_text(run_dir / MANIFEST_NAME, text, run_dir=run_dir)
    return manifest


def _load_manifest(run_dir: Path) -> dict:
    path = run_dir / MANIFEST_NAME
    if not path.exists():
        raise TamperError(path, "manifest is missing")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TamperError(path, f"manifest is not valid JSON ({str(e)[:200]})") from None
    for key in _RESERVED_MANIFEST_KEYS:
        if not isinstance(manifest.get(key), dict):
            raise TamperError(path, f"manifest field {key!r} is missing or not an object")
    return manifest


def _check_files(run_dir: Path, manifest: dict, may_be_absent: tuple[str, ...] = ()) -> None:
    """Compare run_dir's files, hashes and chain heads with the manifest; TamperError on any difference.
    A listed file under one of the `may_be_absent` prefixes (e.g. "checkpoints/") may be missing;
    when present it is checked like any other."""
    on_disk = set(_run_files(run_dir))
    listed = set(manifest["files"])
    missing, extra = sorted(listed - on_disk), sorted(on_disk - listed)
    missing = [m for m in missing if not m.startswith(tuple(may_be_absent))] if may_be_absent else missing
    if missing:
        raise TamperError(run_dir / missing[0], f"listed in the manifest but missing ({len(missing)} missing in all)")
    if extra:
        raise TamperError(run_dir / extra[0], f"present but not listed in the manifest ({len(extra)} extra in all)")
    chains = {r for r in on_disk if r.endswith(".jsonl")}
    if chains != set(manifest["chain_heads"]):
        raise TamperError(run_dir / MANIFEST_NAME, f"chain_heads lists {sorted(manifest['chain_heads'])}, "
                                                   f"the directory holds logs {sorted(chains)}")
    for rel in sorted(chains):
        head = verify_chain(run_dir / rel)  # names the broken line first, if any
        if head != manifest["chain_heads"][rel]:
            raise TamperError(run_dir / rel, f"chain head {head[:12]}... differs from the manifest's "
                                             f"{str(manifest['chain_heads'][rel])[:12]}... (lines rewritten or dropped)")
    for rel in sorted(on_disk):
        if sha256_file(run_dir / rel) != manifest["files"][rel]:
            raise TamperError(run_dir / rel, "sha256 differs from the manifest (content changed)")


def _make_read_only(run_dir: Path) -> None:
    """chmod a-w on every file and directory, deepest first so the walk is never blocked."""
    paths = [Path(dp) / n for dp, dns, fns in os.walk(run_dir) for n in fns + dns]
    for p in sorted(paths, key=lambda p: len(p.parts), reverse=True) + [run_dir]:
        mode = p.lstat().st_mode
        os.chmod(p, stat.S_IMODE(mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def seal(run_dir) -> None:
    """Seal a run directory whose manifest is current: write SEALED (the manifest's sha256), make all read-only.

    Refuses if already sealed or if any file differs from the manifest.
    """
    run_dir = Path(run_dir)
    if is_sealed(run_dir):
        raise SealedError(f"{run_dir} is already sealed")
    manifest_path = run_dir / MANIFEST_NAME
    _check_files(run_dir, _load_manifest(run_dir))
    atomic_write_text(run_dir / SEALED_NAME, sha256_file(manifest_path) + "\n")
    _make_read_only(run_dir)


def is_sealed(run_dir) -> bool:
    return (Path(run_dir) / SEALED_NAME).is_file()


def verify_sealed(run_dir, may_be_absent: tuple[str, ...] = ()) -> dict:
    """Full check of a sealed run directory; returns its manifest.

    Checks the SEALED marker against the manifest's sha256, every chain (line by line) and its head,
    every file's sha256, and refuses extra or missing files. Raises TamperError naming the file.
    Files under a `may_be_absent` prefix (an archive without checkpoints) may be missing: the
    manifest still holds their sha256.
    """
    run_dir = Path(run_dir)
    marker = run_dir / SEALED_NAME
    if not marker.is_file():
        raise TamperError(marker, "run directory is not sealed (no SEALED marker)")
    manifest_path = run_dir / MANIFEST_NAME
    manifest = _load_manifest(run_dir)
    if marker.read_text(encoding="ascii", errors="replace").strip() != sha256_file(manifest_path):
        raise TamperError(manifest_path, f"manifest sha256 does not match the one in {SEALED_NAME} (manifest changed after sealing)")
    _check_files(run_dir, manifest, may_be_absent)
    return manifest
