"""The one reader of a frozen protocol: its lock entries, the check that everything freeze hashed
still matches, and the materialised sets. Freeze, the runner, the analyzer and the audit all read
through here. No torch: an auditor reading sealed records never imports the training loop."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness import PROJECT_ROOT
from harness.core import paths, records
from harness.core.records import canonical_json
from harness.core.paths import PREREG_NAME, set_paths
from harness.spec import lock
from harness.spec.protocol import Protocol
from harness.tasks import registry
from harness.tasks.contract import Task
from harness.tasks.splits import load_tasks

KERNELS_ENTRY = "recipe/kernels"   # the registered kernel path as the harness applies it (harness.core.kernels)
SOURCE_DIRS = ("harness", "arms", "families")  # the code a lock hashes (tools/, tests/ and benchmarks/ are not part of it)
FAMILY_ENTRY = "recipe/family"     # the task family as registered: name, version, settings and its module's source


def code_version() -> str:
    """sha256 over the harness, arms and families source (the same files the lock hashes)."""
    h = hashlib.sha256()
    for d in SOURCE_DIRS:
        for p in sorted((PROJECT_ROOT / d).rglob("*.py")):
            h.update(str(p.relative_to(PROJECT_ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def lock_entries(protocol: Protocol, results_dir: Path) -> dict[str, str]:
    """name -> sha256 of every file the lock covers: protocol files, frozen sets, base, the base's
    evaluation, freeze summary, source; and of the kernel recipe the harness applies (KERNELS_ENTRY)."""
    extra = {f"frozen/{k}{'' if k == 'base' else '.jsonl'}": p for k, p in set_paths(results_dir, protocol.name).items()}
    extra["frozen/freeze.json"] = paths.freeze_summary_path(results_dir, protocol.name)
    extra["frozen/base_eval.json"] = paths.base_eval_path(results_dir, protocol.name)
    if paths.pilot_path(results_dir, protocol.name).exists():  # freeze always has one; a pilot's scratch tree has none
        extra["frozen/pilot.json"] = paths.pilot_path(results_dir, protocol.name)
    if paths.numerics_path(results_dir, protocol.name).exists():  # freeze always has one; a fixture's tree may not
        extra["frozen/numerics.json"] = paths.numerics_path(results_dir, protocol.name)
    if paths.conformance_path(results_dir, protocol.name).exists():  # freeze always has one; a fixture's tree may not
        extra["frozen/conformance.json"] = paths.conformance_path(results_dir, protocol.name)
    prereg = paths.frozen_dir(results_dir, protocol.name) / PREREG_NAME
    if prereg.exists():  # freeze writes it before the lock; a fixture's frozen tree may have none
        extra[f"frozen/{PREREG_NAME}"] = prereg
    return entries_with(protocol, extra)


def entries_with(protocol: Protocol, extra: dict) -> dict[str, str]:
    """name -> sha256 of the protocol's files, the `extra` files (name -> path) and the source, with the
    kernel recipe (KERNELS_ENTRY) and the task family (FAMILY_ENTRY): what every lock covers."""
    entries = lock.compute_entries(protocol.dir, extra, [PROJECT_ROOT / s for s in SOURCE_DIRS])
    entries[KERNELS_ENTRY] = records.sha256_bytes(canonical_json(protocol.model.kernels().to_dict()).encode())
    entries[FAMILY_ENTRY] = records.sha256_bytes(canonical_json(family_record(protocol)).encode())
    return dict(sorted(entries.items()))


def family_record(protocol: Protocol) -> dict:
    """What the lock hashes of the protocol's task family: its name, version and settings, and the
    sha256 of its module's source (a family registered by the protocol may live outside the source
    directories the lock hashes)."""
    cls = type(protocol.family)
    files = registry.source_files(cls)
    return {**protocol.family.identity(), "module": cls.__module__,
            "source": {str(p.relative_to(PROJECT_ROOT)) if p.is_relative_to(PROJECT_ROOT) else p.name: records.sha256_file(p)
                       for p in files}}


def verify_frozen(protocol: Protocol, results_dir: Path) -> dict:
    """Refuse (LockError) unless the lock exists and every hashed file still matches it. Returns the lock."""
    lock_path = paths.lock_path(results_dir, protocol.name)
    if not lock_path.exists():
        raise lock.LockError(f"protocol '{protocol.name}' was never frozen ({lock_path} missing): "
                             f"run `{paths.command_hint('freeze', protocol.name, results_dir)}` first")
    missing = [str(p) for p in [*set_paths(results_dir, protocol.name).values(), paths.base_eval_path(results_dir, protocol.name)]
               if not p.exists()]
    if missing:
        raise lock.LockError(f"protocol '{protocol.name}': frozen file(s) missing: {missing}")
    return lock.verify_lock(lock_path, lock_entries(protocol, results_dir))


BASE_EVAL_KEYS = ("eval", "budget", "monitor_seed", "base_sha256", "n_probes")


def load_base_eval(results_dir: Path, name: str) -> dict:
    """The base's one evaluation as freeze wrote it (call verify_frozen first): {eval: the round -1
    evaluation dict, budget: what it spent, monitor_seed, base_sha256, n_probes}. LockError when
    missing or malformed, naming the file."""
    path = paths.base_eval_path(results_dir, name)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise lock.LockError(f"{path}: the frozen base evaluation cannot be read ({e}); freeze writes it") from None
    missing = [k for k in BASE_EVAL_KEYS if k not in data]
    if missing:
        raise lock.LockError(f"{path}: missing key(s) {missing}; expected {list(BASE_EVAL_KEYS)}")
    return data


def load_sets(results_dir: Path, protocol: Protocol) -> dict[str, list[Task]]:
    """split -> tasks as materialised by freeze, read by the protocol's family (call verify_frozen first)."""
    return {s: load_tasks(p, protocol.family) for s, p in set_paths(results_dir, protocol.name).items() if s != "base"}
