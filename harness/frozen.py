"""The one reader of a frozen protocol: its lock entries, the check that everything freeze hashed
still matches, and the materialised sets. Freeze, the runner, the analyzer and the audit all read
through here. No torch: an auditor reading sealed records never imports the training loop."""
from __future__ import annotations

import hashlib
from pathlib import Path

from harness import PROJECT_ROOT, layout, lock
from harness.layout import set_paths
from harness.prereg import PREREG_NAME
from harness.protocol import Protocol
from harness.tasks import Task, load_tasks

SOURCE_DIRS = ("harness", "arms")   # the code a lock hashes (tools/, tests/ and benchmarks/ are not part of it)


def code_version() -> str:
    """sha256 over the harness and arms source (the same files the lock hashes)."""
    h = hashlib.sha256()
    for d in SOURCE_DIRS:
        for p in sorted((PROJECT_ROOT / d).rglob("*.py")):
            h.update(str(p.relative_to(PROJECT_ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def lock_entries(protocol: Protocol, results_dir: Path) -> dict[str, str]:
    """name -> sha256 of every file the lock covers: protocol files, frozen sets, base, freeze summary, source."""
    extra = {f"frozen/{k}{'' if k == 'base' else '.jsonl'}": p for k, p in set_paths(results_dir, protocol.name).items()}
    extra["frozen/freeze.json"] = layout.freeze_summary_path(results_dir, protocol.name)
    prereg = layout.frozen_dir(results_dir, protocol.name) / PREREG_NAME
    if prereg.exists():  # freeze writes it before the lock; a fixture's frozen tree may have none
        extra[f"frozen/{PREREG_NAME}"] = prereg
    if layout.pilot_path(results_dir, protocol.name).exists():  # freeze always has one; a pilot's scratch tree has none
        extra["frozen/pilot.json"] = layout.pilot_path(results_dir, protocol.name)
    return lock.compute_entries(protocol.dir, extra, [PROJECT_ROOT / s for s in SOURCE_DIRS])


def verify_frozen(protocol: Protocol, results_dir: Path) -> dict:
    """Refuse (LockError) unless the lock exists and every hashed file still matches it. Returns the lock."""
    lock_path = layout.lock_path(results_dir, protocol.name)
    if not lock_path.exists():
        raise lock.LockError(f"protocol '{protocol.name}' was never frozen ({lock_path} missing): "
                             f"run `{layout.command_hint('freeze', protocol.name, results_dir)}` first")
    missing = [str(p) for p in set_paths(results_dir, protocol.name).values() if not p.exists()]
    if missing:
        raise lock.LockError(f"protocol '{protocol.name}': frozen file(s) missing: {missing}")
    return lock.verify_lock(lock_path, lock_entries(protocol, results_dir))


def load_sets(results_dir: Path, name: str) -> dict[str, list[Task]]:
    """split -> tasks as materialised by freeze (call verify_frozen first)."""
    return {s: load_tasks(p) for s, p in set_paths(results_dir, name).items() if s != "base"}
