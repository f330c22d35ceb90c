"""A recipe protocol's frozen registration (harness.freeze.recipe writes it): what its lock hashes, the
lock verified, the plan it froze, and where each registered base's tree lives. No torch."""
from __future__ import annotations

import json
from pathlib import Path

from harness.core import paths
from harness.spec import lock
from harness.spec.frozen import entries_with
from harness.spec.protocol import Protocol

SHARED = ("numerics.json", "conformance.json")  # frozen/ files every base's tree holds as the registration's


def registration_entries(protocol: Protocol, results_dir: Path) -> dict[str, str]:
    """What the registration's lock hashes: the protocol's files, the splits, recipe.json, the numerics
    fingerprint and the family's conformance report, PREREGISTRATION.md, the source, the kernel recipe
    and the family (harness.spec.frozen.entries_with)."""
    name = protocol.name
    extra = {f"frozen/sets/{s}.jsonl": p for s, p in paths.set_paths(results_dir, name).items() if s != "base"}
    extra["frozen/recipe.json"] = paths.recipe_plan_path(results_dir, name)
    for f in SHARED:
        if (paths.frozen_dir(results_dir, name) / f).exists():
            extra[f"frozen/{f}"] = paths.frozen_dir(results_dir, name) / f
    prereg = paths.frozen_dir(results_dir, name) / paths.PREREG_NAME
    if prereg.exists():
        extra[f"frozen/{paths.PREREG_NAME}"] = prereg
    return entries_with(protocol, extra)


def verify_registration(protocol: Protocol, results_dir: Path) -> dict:
    """The registration's lock, verified against the files as they are now (LockError with a diff)."""
    path = paths.lock_path(results_dir, protocol.name)
    if not path.exists():
        raise lock.LockError(f"protocol '{protocol.name}' was never frozen ({path} missing): run "
                             f"`{paths.command_hint('freeze', protocol.name, results_dir)}` first")
    return lock.verify_lock(path, registration_entries(protocol, results_dir))


def read_plan(results_dir: Path, name: str) -> dict:
    """frozen/recipe.json (call verify_registration first)."""
    return json.loads(paths.recipe_plan_path(results_dir, name).read_text())


def base_tree(protocol: Protocol, results_dir: Path, k: int) -> Path:
    return paths.base_tree(results_dir, protocol.name, protocol.seeds.bases.draw(k).label)
