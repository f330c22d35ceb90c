"""A tiny protocol for end-to-end tests: the smoke protocol's files, shrunk to seconds."""
import hashlib
import json
import os
import shutil
from pathlib import Path

import yaml

from harness.spec.protocol import protocols_root

SHRINK = {
    "model.yaml": {"size": "tiny", "base": {"steps": 60, "batch_size": 8, "lr": 0.003, "weight_decay": 0.0, "seed": 7,
                                            "torch_threads": 1},
                   "cpu_capability": "avx2", "run_threads": 1, "base_pass_range": [0.0, 1.0]},
    "tasks.yaml": {"warmup": {"size": 300}, "seed_set": {"size": 24}, "probe": {"size": 16}, "confirm": {"per_round": 8},
                   "calibration": {"size": 16}},
    "budget.yaml": {"rounds": 2, "learner_steps_per_round": 3, "lr_warmup_steps": 2, "batch_size": 8, "tasks_per_round": 4, "G": 4,
                    "max_bytes": 64, "proposals_per_batch": 12, "monitor_probes": 4, "monitor_samples": 2,
                    "intermediate_eval_probes": 8},
    "arms.yaml": {"C": {"recovery_steps": 2, "recovery_pool": 8}},
    "bootstrap.yaml": {"n_resamples": 999},
    "decision.yaml": {"design": {"replicates": 100, "bootstrap_resamples": 99}},  # a fast design analysis
    # the tiny base passes almost nothing: a band that admits every group keeps the pilot's expected
    # reuse finite (3 steps x 8 rows over 4 x 4 rollouts per round), so freeze accepts the protocol
    "gates.yaml": {"band": {"low": 0.0, "high": 1.0}},
}


def _merge(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v


def make_tiny_protocol(parent: Path, name: str = "tiny", source: str = "smoke", family: dict | None = None,
                       operators: list[str] | None = None, **overrides) -> Path:
    """Copy protocols/<source> to parent/name and shrink it. `family` replaces tasks.yaml's task family
    (name, module, settings) and `operators` every self-play arm's proposer operators (a family's
    own); `overrides` maps file stem -> dict to merge."""
    d = Path(parent) / name
    shutil.copytree(protocols_root() / source, d)
    for fname, change in list(SHRINK.items()) + [(f"{k}.yaml", v) for k, v in overrides.items()]:
        data = yaml.safe_load((d / fname).read_text())
        _merge(data, change)
        if fname == "seeds.yaml" and "pilot_seeds" not in change:  # fewer run seeds: the pilot runs what there is
            data["pilot_seeds"] = min(data["pilot_seeds"], len(data["run_seeds"]))
        (d / fname).write_text(yaml.safe_dump(data, sort_keys=False))
    for fname, key, value in (("tasks.yaml", "family", family), ("arms.yaml", "operators", operators)):
        if value is None:
            continue
        data = yaml.safe_load((d / fname).read_text())
        if fname == "tasks.yaml":
            data["family"] = value
        else:
            for spec in data.values():
                if "operators" in spec:
                    spec["operators"] = list(value)
        (d / fname).write_text(yaml.safe_dump(data, sort_keys=False))
    return d


# Where the session keeps the frozen trees freeze_tiny has made (tests/conftest.py sets it to a folder
# every xdist worker of the session shares); None: every call freezes anew.
FROZEN_CACHE: Path | None = None


def protocol_key(proto: Path) -> str:
    """sha256 (hex, 32 characters) of what a lock hashes besides the frozen files: the protocol folder
    (its name, every file's name and bytes) and the source; a source edited meanwhile is another key."""
    from harness import PROJECT_ROOT
    from harness.spec.frozen import SOURCE_DIRS
    from harness.spec.lock import compute_entries
    entries = compute_entries(proto, {}, [PROJECT_ROOT / d for d in SOURCE_DIRS])
    return hashlib.sha256(json.dumps([Path(proto).name, entries], sort_keys=True).encode()).hexdigest()[:32]


def freeze_tiny(parent: Path, name: str = "tiny", **overrides) -> tuple[Path, Path]:
    """A tiny protocol under `parent`, frozen into parent/results. Returns (protocol dir, results dir).
    A freeze is a function of the protocol's files and the code: with FROZEN_CACHE set, the first
    call for given files freezes them once for the whole session (under a file lock) and every call
    gets its own copy of that frozen tree (the results tree holds no path of its own)."""
    from harness.freeze.freeze import freeze
    proto = make_tiny_protocol(parent, name, **overrides)
    results = Path(parent) / "results"
    if FROZEN_CACHE is None:
        freeze(str(proto), results, out=lambda *a: None)
        return proto, results
    from filelock import FileLock
    cached = FROZEN_CACHE / protocol_key(proto)
    with FileLock(f"{cached}.lock"):
        if not cached.exists():
            work = FROZEN_CACHE / f"{cached.name}.tmp"
            shutil.rmtree(work, ignore_errors=True)  # what a failed freeze left
            freeze(str(make_tiny_protocol(work, name, **overrides)), work / "results", out=lambda *a: None)
            os.rename(work, cached)
    shutil.copytree(cached / "results", results, dirs_exist_ok=True)
    return proto, results
