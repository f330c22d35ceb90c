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
import json
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from harness.core import paths, records
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
from harness.spec.lock import LockError
from harness.spec.protocol import ProtocolError, load_protocol

ARCHIVE_SUFFIX = ".audit.tar.gz"
COMPARED = (VERDICT_NAME, REPORT_NAME, ITEMS_NAME)  # byte for byte; the figures and report.html are informational
_SKIP_DIRS = {"__pycache__"}
FILE_MODE, DIR_MODE = 0o444, 0o755


class AuditError(HarnessError):
    """The archive cannot be made or read (not the audit's finding: that is audit()'s message)."""


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
    fields = side.read_text(encoding="ascii", errors="replace").split()
    actual = records.sha256_file(archive)
    if not fields or fields[0] != actual:
        return False, (f"{archive}: sha256 {actual} does not match {side} ({fields[0] if fields else 'empty'}); "
                       "the archive changed after packing")
    return True, f"archive sha256 verified against {side.name}: {actual}"


def _safe_extract(archive: Path, dest: Path, name: str) -> None:
    """Extract only directories and regular files under protocols/<name>/ and results/<name>/."""
    allowed = (f"protocols/{name}", f"results/{name}")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for m in members:
                p = PurePosixPath(m.name)
                inside = m.name in ("protocols", "results") or any(m.name == a or m.name.startswith(a + "/") for a in allowed)
                if p.is_absolute() or ".." in p.parts or not inside or not (m.isfile() or m.isdir()):
                    raise AuditError(f"{archive}: member {m.name!r} is not a file or directory under {list(allowed)}")
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise AuditError(f"{archive}: not a readable tar.gz archive ({err})") from err


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
    old = [] if sealed is None else sealed.decode("utf-8", errors="replace").splitlines(keepends=True)
    new = fresh.decode("utf-8", errors="replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, fromfile=f"sealed/{name}", tofile=f"recomputed/{name}"))


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


def audit(protocol_name, results_dir, archive: Path | None = None, here: dict | None = None) -> tuple[bool, str]:
    """Recompute the readout from `archive` (or from the sealed tree in results_dir) in a temporary
    directory and compare it with the sealed one. Returns (ok, message): "reproduced ..." or the
    reasons and unified diffs, with the provenance notes (provenance_notes; `here`: this process's
    provenance record, default here_record). With an archive, results_dir is not read: the archive is
    the record. Raises AuditError when there is nothing to audit: no sealed readout, an archive that
    does not exist, cannot be read or holds no readout or protocol."""
    name = Path(protocol_name).name
    work = Path(tempfile.mkdtemp(prefix=f"audit-{name}-"))
    try:
        notes = []
        tree, sealed = work / "tree", work / "sealed_readout"
        if archive is not None:
            archive = Path(archive)
            if not archive.is_file():
                raise AuditError(f"archive {archive} does not exist")
            ok, note = _check_sha256_file(archive)
            if not ok:
                return False, note
            notes.append(note)
            _safe_extract(archive, tree, name)
            packed = tree / "results" / name / READOUT_NAME
            if not packed.is_dir():
                raise AuditError(f"{archive}: holds no readout (results/{name}/{READOUT_NAME}/) to audit")
            os.rename(packed, sealed)
            if not (tree / "protocols" / name).is_dir():
                raise AuditError(f"{archive}: holds no protocol directory protocols/{name}/")
        else:
            protocol = load_protocol(protocol_name)
            source = readout_dir(results_dir, protocol.name)
            if not source.is_dir():
                hint = paths.command_hint("readout", protocol.name, results_dir)
                raise AuditError(f"{source} does not exist: there is no sealed readout to audit (run `{hint}` first)")
            _copy_sealed_tree(protocol, Path(results_dir), tree)
            shutil.copytree(source, sealed, copy_function=_link_or_copy)
            notes.append(f"audited the sealed tree under {Path(results_dir) / protocol.name} (copied to a temporary place)")
        try:
            records.verify_sealed(sealed)
            notes.append("sealed readout: seal, manifest and file hashes verify")
            seal_ok = True
        except records.TamperError as err:
            notes.append(f"sealed readout fails its seal check: {err}")
            seal_ok = False
        try:
            fresh = readout(tree / "protocols" / name, tree / "results", checkpoints=archive is None)
        except (ReadoutError, ProtocolError, LockError) as err:
            recorded = _lock_provenance(tree / "results", name)
            notes += provenance_notes(recorded, here if here is not None else here_record(recorded), False)
            return False, "\n".join([f"NOT reproduced: the analyzer refused the audited records:\n{err}"] + notes)
        recorded = json.loads((fresh / VERDICT_NAME).read_text(encoding="ascii")).get("provenance")
        notes += provenance_notes(recorded, here if here is not None else here_record(recorded))
        diffs, info = _compare(sealed, fresh)
        if diffs or not seal_ok:
            head = (f"NOT reproduced: not byte-identical to the sealed readout: {', '.join(diffs)}" if diffs
                    else "NOT reproduced: the sealed readout does not verify")
            return False, "\n".join([head] + notes + info + list(diffs.values()))
        digest = records.sha256_file(fresh / VERDICT_NAME)
        return True, "\n".join([f"reproduced: {_names(COMPARED)} are byte-identical to the sealed readout "
                                f"(verdict sha256 {digest})"] + notes + info)
    finally:
        remove_tree(work)
