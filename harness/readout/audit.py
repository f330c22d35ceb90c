"""`make archive` and `make audit`: pack a read-out protocol into one file, and re-run the analyzer on
archived (or sealed) records in a temporary place, comparing verdict.json, report.md and items.html
byte for byte.

The archive is a deterministic tar.gz (members sorted, mtimes and owners zeroed, modes normalised,
no gzip timestamp or name), so packing the same sealed tree twice gives the same bytes:

    protocols/<name>/...                      the frozen protocol files
    results/<name>/frozen/...                 the lock, the materialised sets, the base checkpoint
    results/<name>/<arm>/seed<k>/...          every registered sealed run, without its round
                                              checkpoints unless packed with_checkpoints (the
                                              manifest and the records keep their sha256; the
                                              analyzer never reads them)
    results/<name>/readout/...                the sealed readout

`<archive>.sha256` beside it holds "<sha256>  <file name>" (the sha256sum format).

An archive is untrusted input: whoever made it chose every byte. The audit extracts it within Limits
(each member's size, their total, the total per byte of archive, the member count, a name's length and
depth), checking each member's header before writing a byte of it: only plain files and directories
under protocols/<name>/ and results/<name>/, each once, with clean names; the gzip stream is read to its
end (its CRC). Each member is read as what its name says before it is written (harness.core.bounded:
YAML with aliases and integers bounded, JSON and JSON lines without NaN or huge integers, UTF-8 text;
only .pt and .png are bytes), so the analyzer sees none that is not, and nothing is imported that the
archive names: a family module (tasks.yaml's `family.module`) the auditor's registry does not list is
refused unless the auditor says --trust-family-modules. Anything wrong is an AuditError of one line
naming the member and what was expected (the CLI: exit status 2); the temporary directory is removed
in every case.

The audit never writes into what it audits: it extracts the archive (or hard-links / copies the
sealed tree) into a temporary directory and runs `analyzer.readout` there, the same code path as
the readout. The lock must verify in that copy, including its hash of the harness and arms
source, so an auditor runs the code version the protocol was frozen with (an archive made by another
code version is audited by that version). The audit states where the records came from (the git
commit and environment digest of the freeze and of every run, harness.spec.provenance) and its own;
it compares its environment's description with the recorded ones, like with like (nothing a process
sets for itself, such as torch's threads), and names every field that differs, here and recorded, as
a warning, not a failure (another machine is allowed).
"""
from __future__ import annotations

import difflib
import gzip
import itertools
import json
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from harness.core import bounded, paths, records
from harness.core.bounded import SNIP, one_line, snip
from harness.core.errors import HarnessError
from harness.core.paths import CHECKPOINTS_DIR, frozen_dir, readout_dir, run_dir
from harness.readout.analyzer import (
    HTML_NAME,
    READOUT_NAME,
    REPORT_NAME,
    VERDICT_NAME,
    ITEMS_NAME,
    ReadoutError,
    readout,
    recorded_provenance,
    remove_tree,
)
from harness.spec.deviations import deviations_path
from harness.spec import lock, provenance
from harness.spec.lock import LOCK_NAME, LockError
from harness.spec.protocol import ProtocolError, load_protocol
from harness.tasks import registry

ARCHIVE_SUFFIX = ".audit.tar.gz"
COMPARED = (VERDICT_NAME, REPORT_NAME, ITEMS_NAME)  # byte for byte; the figures and report.html are informational
_SKIP_DIRS = {"__pycache__"}
FILE_MODE, DIR_MODE = 0o444, 0o755


MESSAGE_CHARS = 1000  # an AuditError's message: one line, at most this long
FINDING_LINES, FINDING_WIDTH = 60, 400  # an analyzer's refusal quoted in a finding: at most so many lines, so wide
DIFF_LINES, DIFF_BYTES = 400, 4 << 20   # a compared file's diff: at most so many lines; larger files are not diffed


class AuditError(HarnessError):
    """The archive cannot be made or read (not the audit's finding: that is audit()'s message). Its
    message is one line of at most MESSAGE_CHARS characters, whatever the archive holds."""

    def __init__(self, message: str):
        super().__init__(one_line(message, MESSAGE_CHARS))


def archive_path(results_dir, name: str) -> Path:
    return Path(results_dir) / f"{name}{ARCHIVE_SUFFIX}"


# ---------------------------------------------------------------- pack

def _walk(root: Path, arc_root: str, leave_out: tuple[str, ...] = ()) -> list[tuple[str, Path]]:
    """(archive name, path) for root and every directory and regular file under it, __pycache__ and
    the top-level folders named in `leave_out` skipped."""
    out = [(arc_root, root)]
    for dirpath, dirnames, filenames in os.walk(root):
        top = Path(dirpath) == root
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not (top and d in leave_out))
        for name in dirnames + sorted(filenames):
            full = Path(dirpath) / name
            mode = full.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise AuditError(f"{full}: not a regular file or directory (links are not archived)")
            out.append((f"{arc_root}/{full.relative_to(root).as_posix()}", full))
    return out


def _members(protocol, results_dir: Path, with_checkpoints: bool = False) -> list[tuple[str, Path]]:
    name = protocol.name
    leave_out = () if with_checkpoints else (CHECKPOINTS_DIR.rstrip("/"),)
    members = [("protocols", None), (f"protocols/{name}", None), ("results", None), (f"results/{name}", None)]
    members += _walk(protocol.dir, f"protocols/{name}")[1:]
    members += _walk(frozen_dir(results_dir, name), f"results/{name}/frozen")
    for arm in protocol.arm_names:
        members += [(f"results/{name}/{arm}", None)]
        for seed in protocol.run_seeds:
            members += _walk(run_dir(results_dir, name, arm, seed), f"results/{name}/{arm}/seed{seed}", leave_out)
    members += _walk(readout_dir(results_dir, name), f"results/{name}/{READOUT_NAME}")
    log = deviations_path(results_dir, name)
    if log.exists():
        members.append((f"results/{name}/{log.name}", log))
    return sorted(members, key=lambda m: m[0])


def _write_tar(members: list[tuple[str, Path | None]], out: Path) -> None:
    """Deterministic tar.gz at `out`, written atomically (records.atomic_writer)."""
    with records.atomic_writer(out) as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for arcname, path in members:
                    info = tarfile.TarInfo(arcname)
                    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                    if path is None or path.is_dir():
                        info.type, info.mode = tarfile.DIRTYPE, DIR_MODE
                        tar.addfile(info)
                    else:
                        info.mode, info.size = FILE_MODE, path.stat().st_size
                        with open(path, "rb") as f:
                            tar.addfile(info, f)


def pack(protocol_name, results_dir, with_checkpoints: bool = False) -> Path:
    """Pack the protocol, its frozen files, every registered sealed run and the sealed readout into
    results/<name>.audit.tar.gz (+ .sha256). Refuses unless the readout and every run verify sealed.
    The runs' round checkpoints are left out unless `with_checkpoints` (the audit does not need them)."""
    protocol = load_protocol(protocol_name)
    results_dir = Path(results_dir)
    rdir = readout_dir(results_dir, protocol.name)
    if not records.is_sealed(rdir):
        raise AuditError(f"{rdir} is not a sealed readout: run "
                         f"`{paths.command_hint('readout', protocol.name, results_dir)}` before packing")
    try:
        for d in [rdir] + [run_dir(results_dir, protocol.name, a, s) for a in protocol.arm_names for s in protocol.run_seeds]:
            records.verify_sealed(d)
    except records.TamperError as err:
        raise AuditError(f"refusing to pack records that do not verify: {err}") from err
    out = archive_path(results_dir, protocol.name)
    _write_tar(_members(protocol, results_dir, with_checkpoints), out)
    digest = records.sha256_file(out)
    records.atomic_write_text(out.with_name(out.name + ".sha256"), f"{digest}  {out.name}\n")
    return out


# ---------------------------------------------------------------- audit

def _check_sha256_file(archive: Path) -> tuple[bool, str]:
    side = archive.with_name(archive.name + ".sha256")
    if not side.exists():
        return True, f"no {side.name} beside the archive: its sha256 is {records.sha256_file(archive)}"
    with open(side, "rb") as f:  # "<sha256>  <name>\n": a few dozen bytes are all that is read
        fields = f.read(4096).decode("ascii", errors="replace").split()
    actual = records.sha256_file(archive)
    if not fields or fields[0] != actual:
        return False, (f"{archive}: sha256 {actual} does not match {side} ({snip(fields[0], 80) if fields else 'empty'}); "
                       "the archive changed after packing")
    return True, f"archive sha256 verified against {side.name}: {actual}"


@dataclass(frozen=True)
class Limits:
    """What the audit extracts from an archive at most; past any of them it refuses, naming the limit.
    `make archive` writes far less: a protocol, its sets, a base and a few hundred small records (with
    checkpoints: the checkpoints' bytes, which do not compress)."""
    member_bytes: int = 16 << 30   # one member's bytes
    total_bytes: int = 64 << 30    # every member's bytes together
    ratio: int = 100               # extracted bytes per byte of the archive (JSON records: about 5)...
    ratio_floor: int = 1 << 20     # ...except that any archive may extract 1 MiB
    text_bytes: int = 256 << 20    # one member read as text (every member but .pt and .png), read whole
    members: int = 20_000          # files and directories
    depth: int = 16                # path components (results/<name>/<arm>/seed<k>/checkpoints/round0.pt: 6)
    name_chars: int = 512          # one member's name

    def budget(self, archive_bytes: int) -> int:
        """The bytes every member together may extract to, for an archive of `archive_bytes`."""
        return min(self.total_bytes, max(self.ratio_floor, self.ratio * archive_bytes))


_HEADER_ALLOWANCE = 1 << 20  # decompressed bytes beyond the members' own: tar headers, padding, the end
_PER_MEMBER = 4096           # ... and per member (a header, a pax header, the padding of its last block)
_READ_ERRORS = (tarfile.TarError, OSError, EOFError, zlib.error, ValueError, UnicodeError, OverflowError)
_BINARY = (".pt", ".png")    # members read as bytes; every other member is UTF-8 text
_JSON_LINES = ("timing.log",)


class _Capped:
    """A file's read() that refuses (AuditError) once more than `cap` bytes came through; the extractor
    raises the cap as it accepts members, so the decompressed stream never runs ahead of what the
    accepted headers declare (a gzip bomb stops at its first megabyte past them)."""

    def __init__(self, raw, cap: int, archive: Path):
        self.raw, self.cap, self.archive, self.count = raw, cap, archive, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(self.cap - self.count + 1 if n is None or n < 0 else n)
        self.count += len(data)
        if self.count > self.cap:
            raise AuditError(f"{self.archive}: decompresses to more than its members' declared sizes allow "
                             f"({self.cap} bytes at that point); expected a tar.gz that `make archive` writes")
        return data


@dataclass
class _Extraction:
    """What the extractor has accepted so far."""
    archive: Path
    dest: Path
    allowed: tuple[str, ...]
    limits: Limits
    budget: int
    kinds: dict = field(default_factory=dict)   # member name -> "dir" | "file" | "implicit" (a parent made)
    data: int = 0                               # bytes of the accepted members
    made: set = field(default_factory=set)      # directories made under dest (member names)
    parsed: dict = field(default_factory=dict)  # member name -> value of each YAML member

    def refuse(self, member: str, what: str) -> AuditError:
        return AuditError(f"{self.archive}: member {snip(member, 120)}: {what}")

    def check(self, m: tarfile.TarInfo) -> None:
        """Refuse a member that is not a plain file or directory with a clean name under `allowed`, that
        comes twice, sits under a file, or exceeds a limit."""
        name, lim = m.name, self.limits
        if len(self.kinds) >= lim.members:
            raise self.refuse(name, f"more than {lim.members} members; expected an archive of one protocol")
        try:
            encoded = name.encode("utf-8")
        except UnicodeError:
            raise self.refuse(name, "a name that is not UTF-8") from None
        parts = name.split("/")
        if len(name) > lim.name_chars or any(len(p) > 255 for p in encoded.split(b"/")):
            raise self.refuse(name, f"a name longer than {lim.name_chars} characters or with a part over 255 bytes")
        if any(ord(c) < 32 or c == "\x7f" for c in name) or "" in parts or "." in parts or ".." in parts:
            raise self.refuse(name, "a name with a control character, an empty, '.' or '..' part or a leading '/'")
        inside = name in ("protocols", "results") or any(name == a or name.startswith(a + "/") for a in self.allowed)
        if not inside:
            raise self.refuse(name, f"not under {list(self.allowed)}")
        if len(parts) > lim.depth:
            raise self.refuse(name, f"{len(parts)} levels deep; expected at most {lim.depth}")
        if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE):
            raise self.refuse(name, "not a regular file or directory (links, devices, fifos and sparse files are "
                                    "refused)")
        if self.kinds.get(name) in ("dir", "file"):
            raise self.refuse(name, "in the archive twice; expected each member once")
        if self.kinds.get(name) == "implicit" and m.type != tarfile.DIRTYPE:
            raise self.refuse(name, "a file where earlier members put a directory")
        for i in range(1, len(parts)):
            if self.kinds.get("/".join(parts[:i])) == "file":
                raise self.refuse(name, f"under {snip('/'.join(parts[:i]), 120)}, which is a file")
        if m.type != tarfile.DIRTYPE:
            if m.size > lim.member_bytes:
                raise self.refuse(name, f"declares {m.size} bytes; expected at most {lim.member_bytes}")
            if m.size > lim.text_bytes and not name.endswith(_BINARY):
                raise self.refuse(name, f"declares {m.size} bytes of text; expected at most {lim.text_bytes} "
                                        f"(only {' and '.join(_BINARY)} members are bytes)")
            if self.data + m.size > self.budget:
                raise self.refuse(name, f"would bring the extracted bytes to {self.data + m.size}, past "
                                        f"{self.budget} (at most {lim.ratio} times the archive's "
                                        f"{self.archive.stat().st_size} bytes, {lim.ratio_floor} bytes for any "
                                        f"archive, {lim.total_bytes} in all)")

    def write(self, tar: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        """Write one checked member under dest (directories 0755, files 0444, never through a link, never
        over an existing path); a text member is read as what its name says first (_read_member), so a
        bad one is refused before it is written."""
        parts = m.name.split("/")
        for i in range(1, len(parts)):
            self._mkdir("/".join(parts[:i]))
        if m.type == tarfile.DIRTYPE:
            self._mkdir(m.name)
            self.kinds[m.name] = "dir"
            return
        self.kinds[m.name] = "file"
        self.data += m.size
        src = tar.extractfile(m)
        text = None if m.name.endswith(_BINARY) else src.read()
        if text is not None:
            try:
                value = _read_member(m.name, text, f"{self.archive.name} member {m.name}")
            except bounded.ParseError as err:
                raise AuditError(str(err)) from None
            if value is not None:
                self.parsed[m.name] = value
        fd = os.open(self.dest.joinpath(*parts), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        with os.fdopen(fd, "wb") as out:
            if text is not None:
                out.write(text)
            else:
                shutil.copyfileobj(src, out, 1 << 20)

    def _mkdir(self, name: str) -> None:
        if name not in self.made:
            self.dest.joinpath(*name.split("/")).mkdir(mode=DIR_MODE)
            self.made.add(name)
            self.kinds.setdefault(name, "implicit")


def _read_member(name: str, data: bytes, where: str):
    """Read a member's bytes as what its name says, bounded (harness.core.bounded): YAML (returned),
    JSON, JSON lines, else UTF-8 text. ParseError (one line) naming `where` and what was expected."""
    fname = name.rsplit("/", 1)[-1]
    if fname.endswith(".jsonl") or fname in _JSON_LINES:
        bounded.json_lines(data, where)
    elif fname.endswith(".json") or fname == LOCK_NAME:
        bounded.json_value(bounded.text(data, where), where)
    elif fname.endswith((".yaml", ".yml")):
        return bounded.yaml_value(data, where)
    else:
        bounded.text(data, where)
    return None


def _safe_extract(archive: Path, dest: Path, name: str, limits: Limits = Limits()) -> dict:
    """Extract only directories and regular files under protocols/<name>/ and results/<name>/, each
    checked before a byte of it is written (_Extraction.check) and, but .pt and .png, read as what its
    name says (_read_member), reading the gzip stream no further than the accepted headers declare
    (_Capped), then to its end, so its CRC is checked. Returns {member name: value} of the YAML members;
    AuditError (one line) on anything else."""
    state = _Extraction(archive, dest, (f"protocols/{name}", f"results/{name}"), limits,
                        limits.budget(archive.stat().st_size))
    dest.mkdir(mode=DIR_MODE)
    try:
        with open(archive, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            stream = _Capped(gz, _HEADER_ALLOWANCE, archive)
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for m in tar:
                    state.check(m)
                    stream.cap = _HEADER_ALLOWANCE + state.data + m.size + _PER_MEMBER * (len(state.kinds) + 1)
                    state.write(tar, m)
            while chunk := stream.read(1 << 20):  # to the gzip stream's end: its CRC and length are checked there
                if chunk.strip(b"\0"):
                    raise AuditError(f"{archive}: data after the tar archive's end; expected a tar.gz that "
                                     f"`make archive` writes")
    except _READ_ERRORS as err:
        raise AuditError(f"{archive}: not a readable tar.gz archive ({type(err).__name__}: {one_line(err, SNIP)})") from None
    if not state.kinds:
        raise AuditError(f"{archive}: an empty archive; expected protocols/{name}/ and results/{name}/")
    return state.parsed


def _check_family(parsed: dict, archive: Path, name: str, trust_modules: bool) -> None:
    """Refuse an archive whose tasks.yaml names a family module the auditor's registry does not list
    (harness.tasks.registry.FAMILIES): loading the protocol would import it, and it is the archive that
    names it, before the lock is verified. `trust_modules` (--trust-family-modules) imports it anyway."""
    rel = f"protocols/{name}/tasks.yaml"
    tasks = parsed.get(rel)
    family = tasks.get("family") if isinstance(tasks, dict) else None
    if not isinstance(family, dict) or "module" not in family or trust_modules:
        return
    module = family["module"]
    if module not in registry.FAMILIES.values():
        raise AuditError(f"{archive.name} member {rel}: key 'family.module' is {snip(module, 120)}, a module this "
                         f"auditor's registry does not list ({sorted(registry.FAMILIES.values())}); the audit "
                         f"imports no module an archive names: audit with --trust-family-modules to import it")


def _link_or_copy(src, dst) -> None:
    """Hard-link a sealed file into the audit copy (no bytes copied; never written), else copy it."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _copy_sealed_tree(protocol, results_dir: Path, tree: Path) -> None:
    """protocols/<name> and everything in results/<name> but the readout (extra runs included, so the
    analyzer sees them) into tree/."""
    ignore = shutil.ignore_patterns(*_SKIP_DIRS)
    shutil.copytree(protocol.dir, tree / "protocols" / protocol.name, copy_function=_link_or_copy, ignore=ignore)
    dest = tree / "results" / protocol.name
    dest.mkdir(parents=True)
    for entry in sorted((results_dir / protocol.name).iterdir()):
        if entry.name == READOUT_NAME or entry.name.startswith(".readout-"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, dest / entry.name, copy_function=_link_or_copy, ignore=ignore)
        else:
            _link_or_copy(entry, dest / entry.name)


def _lock_provenance(results_dir: Path, name: str) -> dict | None:
    """The freeze's provenance alone, from the lock (when the analyzer refused the runs), or None
    when the lock cannot be read (the analyzer names what is wrong with it)."""
    try:
        return recorded_provenance(lock.read_lock(paths.lock_path(results_dir, name)), [])
    except LockError:
        return None


def here_record(recorded: dict | None) -> dict:
    """This process's provenance (harness.spec.provenance.current), described on the device kind the
    freeze recorded (a GPU's name is part of an environment computed on one): like with like."""
    freeze = (recorded or {}).get("freeze")
    described = (recorded or {}).get("environments", {}).get(freeze["environment_sha256"]) if freeze else None
    return provenance.current("cuda" if described and described.get("gpu") else "cpu")


def provenance_notes(recorded: dict | None, here: dict, source_verified: bool = True) -> list[str]:
    """What the audit says about provenance: the freeze's and the runs' git commits and environment
    digests (`recorded`: a verdict's "provenance" section, analyzer.recorded_provenance), this audit's,
    and, for each recorded environment that is not this one, every field that differs (a warning:
    another machine is allowed). `source_verified`: whether the lock verified the harness and arms
    source, which makes another git commit harmless."""
    if not recorded:
        return ["provenance: the lock cannot be read, nothing recorded to compare"]
    env, git = here["environment"], here["git"]
    lines = [f"provenance: this audit: git commit {_commit(git)}, environment {provenance.short(env['sha256'])} "
             f"({provenance.summary(env['description'])})"]
    freeze, runs = recorded["freeze"], recorded["runs"]
    if freeze is None:
        lines.append("WARNING: provenance: the lock records no environment (frozen before environments were recorded)")
    else:
        lines.append(f"provenance: frozen at git commit {_commit(freeze)}, environment "
                     f"{provenance.short(freeze['environment_sha256'])}")
    groups: dict[tuple, list[str]] = {}
    for key, r in sorted(runs.items()):
        groups.setdefault((r["git_commit"], r["git_clean"], r["environment_sha256"]) if r else None, []).append(key)
    for group, keys in groups.items():
        who = f"every run ({len(keys)})" if len(keys) == len(runs) else f"run(s) {', '.join(keys)}"
        lines.append(f"provenance: {who}: " + ("no provenance recorded (written before runs recorded it)" if group is None
                     else f"git commit {_commit({'commit': group[0], 'clean': group[1]})}, environment "
                          f"{provenance.short(group[2])}"))
    for sha, who in _recorders(freeze, runs).items():
        diffs = provenance.differences(env["description"], recorded["environments"][sha], "here", "recorded")
        if not diffs:
            lines.append(f"environment: the same as recorded by {who} ({provenance.short(sha)}): no difference")
            continue
        lines.append(f"WARNING: environment: {len(diffs)} difference(s) from the one recorded by {who} "
                     f"({provenance.short(sha)}; here {provenance.short(env['sha256'])}; informational: another "
                     f"machine is allowed):")
        lines += [f"  {d}" for d in diffs]
    commits = {freeze["git_commit"]} if freeze else set()
    commits |= {r["git_commit"] for r in runs.values() if r}
    if git.get("commit") and commits - {git["commit"]}:
        lines.append(f"git commit: this audit runs {provenance.short(git['commit'])}, the records were made at "
                     f"{', '.join(sorted(provenance.short(c) for c in commits))}"
                     + (" (informational: the lock verified that the harness and arms source is the one they were "
                        "made with)" if source_verified else ""))
    return lines


def _recorders(freeze: dict | None, runs: dict) -> dict[str, str]:
    """Each recorded environment's sha256 -> who recorded it ("the freeze and every run", "runs A/seed1,
    B/seed2"), the freeze's first."""
    keys: dict[str, list[str]] = {freeze["environment_sha256"]: []} if freeze else {}
    for key, r in sorted(runs.items()):
        if r is not None:
            keys.setdefault(r["environment_sha256"], []).append(key)
    out = {}
    for sha, made in keys.items():
        who = ["the freeze"] if freeze and sha == freeze["environment_sha256"] else []
        if made:
            who.append(f"every run ({len(made)})" if len(made) == len(runs) else f"run(s) {', '.join(made)}")
        out[sha] = " and ".join(who)
    return out


def _commit(git: dict) -> str:
    """"f9b20ef5e547" (+ " with uncommitted changes") of a {"commit"/"git_commit", "clean"/"git_clean"} dict."""
    commit, clean = git.get("commit", git.get("git_commit")), git.get("clean", git.get("git_clean"))
    return provenance.short(commit) + (" with uncommitted changes" if clean is False else "")


def _diff(name: str, sealed: bytes | None, fresh: bytes) -> str:
    """The unified diff sealed -> fresh, at most DIFF_LINES lines; files over DIFF_BYTES are not diffed."""
    if max(len(sealed or b""), len(fresh)) > DIFF_BYTES:
        return (f"{name}: not diffed (sealed {len(sealed or b'')} bytes, recomputed {len(fresh)}; "
                f"at most {DIFF_BYTES} are diffed)\n")
    old = [] if sealed is None else sealed.decode("utf-8", errors="replace").splitlines(keepends=True)
    new = fresh.decode("utf-8", errors="replace").splitlines(keepends=True)
    lines = list(itertools.islice(difflib.unified_diff(old, new, fromfile=f"sealed/{name}", tofile=f"recomputed/{name}"),
                                  DIFF_LINES + 1))
    cut = f"... (the diff goes on past {DIFF_LINES} lines)\n" if len(lines) > DIFF_LINES else ""
    return "".join(line[:FINDING_WIDTH] + ("\n" if len(line) > FINDING_WIDTH else "")
                   for line in lines[:DIFF_LINES]) + cut


def _bounded_lines(text: str) -> str:
    """An analyzer's refusal as quoted in a finding: at most FINDING_LINES lines of FINDING_WIDTH characters."""
    lines = str(text).splitlines()
    out = [line if len(line) <= FINDING_WIDTH else f"{line[:FINDING_WIDTH]}...(+{len(line) - FINDING_WIDTH} chars)"
           for line in lines[:FINDING_LINES]]
    return "\n".join(out + ([f"... ({len(lines) - FINDING_LINES} more lines)"] if len(lines) > FINDING_LINES else []))


def _compare(sealed: Path, fresh: Path) -> tuple[dict[str, str], list[str]]:
    """({compared file that differs: its unified diff}, a line per file: each compared one, then the
    informational figures and report.html)."""
    diffs, info = {}, []
    for name in COMPARED:
        old = (sealed / name).read_bytes() if (sealed / name).is_file() else None
        new = (fresh / name).read_bytes()
        if old != new:
            diffs[name] = _diff(name, old, new) or f"{name}: bytes differ (no line difference: line endings?)\n"
        info.append(f"compared {name}: " + ("identical" if old == new else "not in the sealed readout" if old is None
                                            else "DIFFERS (diff below)") + f" (recomputed sha256 {records.sha256_bytes(new)})")
    for png in sorted(fresh.glob("*.png")) + [fresh / HTML_NAME]:
        rel = png.relative_to(fresh).as_posix()
        old = sealed / rel
        same = old.is_file() and records.sha256_file(old) == records.sha256_file(png)
        info.append(f"{'report' if rel == HTML_NAME else 'figure'} {rel}: "
                    f"{'identical' if same else 'differs (informational: PNG bytes depend on the matplotlib build)'}")
    return diffs, info


def _names(names) -> str:
    """"a, b and c"."""
    names = list(names)
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def audit(protocol_name, results_dir, archive: Path | None = None, here: dict | None = None,
          trust_family_modules: bool = False, limits: Limits = Limits()) -> tuple[bool, str]:
    """Recompute the readout from `archive` (or from the sealed tree in results_dir) in a temporary
    directory and compare it with the sealed one. Returns (ok, message): "reproduced ..." or the
    reasons and unified diffs, with the provenance notes (provenance_notes; `here`: this process's
    provenance record, default here_record). With an archive, results_dir is not read: the archive is
    the record, and untrusted: it is extracted within `limits`, every member is read bounded before
    the analyzer sees it, and a family module that the auditor's registry does not list is refused
    unless `trust_family_modules`. Raises AuditError (one line) when there is nothing to audit: no
    sealed readout, an archive that does not exist, cannot be read, breaks a limit or holds no readout
    or protocol. The temporary directory is removed whatever happens."""
    name = Path(protocol_name).name
    work = Path(tempfile.mkdtemp(prefix=f"audit-{name}-"))
    try:
        if archive is None:
            return _audit_sealed_tree(protocol_name, Path(results_dir), work, here)
        archive = Path(archive)
        try:
            return _audit_archive(archive, name, work, here, trust_family_modules, limits)
        except AuditError:
            raise
        except HarnessError as err:
            raise AuditError(f"{archive}: {err}") from None
        except Exception as err:  # untrusted bytes reached a reader that did not expect them: one line, no traceback
            raise AuditError(f"{archive}: the audit failed on the archived records ({type(err).__name__}: "
                             f"{one_line(err, SNIP)}); expected records that `make archive` packed") from None
    finally:
        _remove_scratch(work)


def _remove_scratch(work: Path) -> None:
    """Remove the audit's temporary directory; if the tree is odd (no write bit, very deep), once more
    with shutil's descriptor-based walk, which needs no path under PATH_MAX."""
    try:
        remove_tree(work)
    except (OSError, RecursionError):
        shutil.rmtree(work, ignore_errors=True)


def _audit_archive(archive: Path, name: str, work: Path, here: dict | None, trust_family_modules: bool,
                   limits: Limits) -> tuple[bool, str]:
    if not archive.is_file():
        raise AuditError(f"archive {archive} does not exist")
    ok, note = _check_sha256_file(archive)
    if not ok:
        return False, note
    tree, sealed = work / "tree", work / "sealed_readout"
    parsed = _safe_extract(archive, tree, name, limits)
    _check_family(parsed, archive, name, trust_family_modules)
    packed = tree / "results" / name / READOUT_NAME
    if not packed.is_dir():
        raise AuditError(f"{archive}: holds no readout (results/{name}/{READOUT_NAME}/) to audit")
    os.rename(packed, sealed)
    if not (tree / "protocols" / name).is_dir():
        raise AuditError(f"{archive}: holds no protocol directory protocols/{name}/")
    return _recompute(tree, sealed, name, [note], here, checkpoints=False)


def _audit_sealed_tree(protocol_name, results_dir: Path, work: Path, here: dict | None) -> tuple[bool, str]:
    protocol = load_protocol(protocol_name)
    source = readout_dir(results_dir, protocol.name)
    if not source.is_dir():
        hint = paths.command_hint("readout", protocol.name, results_dir)
        raise AuditError(f"{source} does not exist: there is no sealed readout to audit (run `{hint}` first)")
    tree, sealed = work / "tree", work / "sealed_readout"
    _copy_sealed_tree(protocol, results_dir, tree)
    shutil.copytree(source, sealed, copy_function=_link_or_copy)
    note = f"audited the sealed tree under {results_dir / protocol.name} (copied to a temporary place)"
    return _recompute(tree, sealed, protocol.name, [note], here, checkpoints=True)


def numerics_note(results_dir: Path, name: str) -> str:
    """Which numerics fingerprint (harness.learning.numerics) the sealed runs computed on: the digests their
    start records keep and the CPU that froze the protocol. The audit itself computes no torch kernel."""
    digests = set()
    for rec in sorted(Path(results_dir, name).glob("*/seed*/records.jsonl")):
        with rec.open("rb") as f:
            first = json.loads(f.readline() or b"{}")
        digests.add(str((first.get("kernels") or {}).get("numerics") or "not recorded"))
    frozen = paths.numerics_path(results_dir, name)
    cpu = json.loads(frozen.read_text()).get("cpu", "?") if frozen.is_file() else "not recorded"
    return (f"numerics: the runs computed on fingerprint {', '.join(sorted(digests)) or 'none'} (frozen on {cpu}); "
            f"the audit recomputes the analysis only, which no host's numerics enter")


def _recompute(tree: Path, sealed: Path, name: str, notes: list[str], here: dict | None,
               checkpoints: bool) -> tuple[bool, str]:
    """Verify the sealed readout, run the analyzer on tree/, compare (the audit's finding)."""
    try:
        records.verify_sealed(sealed)
        notes.append("sealed readout: seal, manifest and file hashes verify")
        seal_ok = True
    except records.TamperError as err:
        notes.append(f"sealed readout fails its seal check: {one_line(err, FINDING_WIDTH)}")
        seal_ok = False
    try:
        fresh = readout(tree / "protocols" / name, tree / "results", checkpoints=checkpoints)
    except (ReadoutError, ProtocolError, LockError) as err:
        recorded = _lock_provenance(tree / "results", name)
        notes += provenance_notes(recorded, here if here is not None else here_record(recorded), False)
        return False, "\n".join([f"NOT reproduced: the analyzer refused the audited records:\n{_bounded_lines(err)}"]
                                 + notes)
    recorded = json.loads((fresh / VERDICT_NAME).read_text(encoding="ascii")).get("provenance")
    notes += provenance_notes(recorded, here if here is not None else here_record(recorded))
    notes.append(numerics_note(tree / "results", name))
    diffs, info = _compare(sealed, fresh)
    if diffs or not seal_ok:
        head = (f"NOT reproduced: not byte-identical to the sealed readout: {', '.join(diffs)}" if diffs
                else "NOT reproduced: the sealed readout does not verify")
        return False, "\n".join([head] + notes + info + list(diffs.values()))
    digest = records.sha256_file(fresh / VERDICT_NAME)
    return True, "\n".join([f"reproduced: {_names(COMPARED)} are byte-identical to the sealed readout "
                            f"(verdict sha256 {digest})"] + notes + info)
