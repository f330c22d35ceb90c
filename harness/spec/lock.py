"""The protocol lock: sha256 of everything that defines an experiment, written once at freeze time.

The lock lives beside what freeze derived, at `results/<name>/frozen/<LOCK_NAME>` (harness.core.paths;
the protocol's own files under `protocols/<name>/` are hashed, never written). It is JSON:

    {"entries":   {name: sha256},   # protocol files, materialised sets, base checkpoint, harness/arms source
     "meta":      {"python": ..., "torch": ..., "created": ISO time,
                   "environment": {packages, git, cpu, torch, cuda}   # see environment(); informational
                   ...},
     "lock_hash": sha256 of canonical JSON of {"entries", "versions": {python, torch}}}

The timestamp, the environment and any other meta are informational and not hashed: a run on
another machine is allowed (only python and torch are pinned), and `audit` names every difference
between the lock's environment and its own (harness.spec.provenance describes both alike). A frozen protocol is never
re-frozen with different content: a changed protocol is a new protocol with a new name.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import re
import subprocess
from pathlib import Path

from harness import PROJECT_ROOT
from harness.core.errors import HarnessError
from harness.core.paths import LOCK_NAME
from harness.core.records import atomic_write_text, canonical_json, sha256_bytes, sha256_file

VERSION_KEYS = ("python", "torch")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SKIP_DIRS = {"__pycache__"}


class LockError(HarnessError):
    """The lock is missing, malformed, or does not match the protocol as it is now."""


# ---------------------------------------------------------------- entries

def _walk_files(root: Path):
    """Every file under root (sorted, following no __pycache__), as (relative POSIX path, full path)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            full = Path(dirpath) / name
            yield full.relative_to(root).as_posix(), full


def _is_lock_file(rel: str) -> bool:
    # the lock itself, and a temp file left by an interrupted atomic write of it
    return rel == LOCK_NAME or (rel.startswith(f".{LOCK_NAME}.") and rel.endswith(".tmp"))


def compute_entries(protocol_dir, extra_files: dict, source_dirs: list) -> dict[str, str]:
    """name -> sha256 of everything the lock covers.

    - every file in protocol_dir as "protocols/<protocol name>/<relpath>", except the lock itself and
      files also passed in extra_files;
    - each extra file (materialised task sets, base checkpoint) under its given name;
    - every *.py under each source dir as "src/<dir name>/<relpath>" (e.g. "src/harness/tasks/splits.py").
    """
    protocol_dir = Path(protocol_dir)
    if not protocol_dir.is_dir():
        raise LockError(f"protocol directory {protocol_dir} does not exist")
    entries: dict[str, str] = {}

    def add(name: str, path: Path) -> None:
        if name in entries:
            raise LockError(f"lock entry {name!r} is produced twice (second time by {path})")
        entries[name] = sha256_file(path)

    extra_resolved = {}
    for name, path in extra_files.items():
        path = Path(path)
        if not path.is_file():
            raise LockError(f"lock entry {name!r}: generated file {path} does not exist (run make freeze to build it)")
        extra_resolved[path.resolve()] = name
    for rel, full in _walk_files(protocol_dir):
        if not _is_lock_file(rel) and full.resolve() not in extra_resolved:
            add(f"protocols/{protocol_dir.name}/{rel}", full)
    for name, path in extra_files.items():
        add(name, Path(path))
    for src in source_dirs:
        src = Path(src)
        if not src.is_dir():
            raise LockError(f"source directory {src} does not exist")
        for rel, full in _walk_files(src):
            if rel.endswith(".py"):
                add(f"src/{src.name}/{rel}", full)
    return dict(sorted(entries.items()))


def environment_versions() -> dict[str, str]:
    """The versions the lock pins: python and torch (torch imported lazily: it is slow)."""
    import torch
    return {"python": platform.python_version(), "torch": torch.__version__}


KEY_PACKAGES = ("numpy", "scipy", "pandas", "mlflow", "hydra-core", "torch")  # named in every environment record


def installed_packages() -> dict[str, str]:
    """Every installed distribution (importlib.metadata), normalised name -> version, sorted by name."""
    out = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out[re.sub(r"[-_.]+", "-", name).lower()] = dist.version
    return dict(sorted(out.items()))


def git_state(root=PROJECT_ROOT) -> dict:
    """{"commit": hex, "clean": bool, "changed_paths": n} of the checkout at root; without git (not
    installed, not a checkout) {"commit": None, "clean": None, "note": why}. Never raises."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": None, "clean": None, "note": f"not a git checkout ({head.stderr.strip()[:200]})"}
        status = git("status", "--porcelain")
    except (OSError, subprocess.SubprocessError) as e:
        return {"commit": None, "clean": None, "note": f"git unavailable ({e})"}
    changed = [ln for ln in status.stdout.splitlines() if ln.strip()]
    return {"commit": head.stdout.strip(), "clean": status.returncode == 0 and not changed,
            "changed_paths": len(changed)}


def cpu_info(cpuinfo=Path("/proc/cpuinfo")) -> dict:
    """{"model": str, "flags": space-separated sorted flags, "logical_cpus": n, "machine": arch}:
    the CPU the base and the runs were computed on (kernels, hence float sums, may depend on it)."""
    model, flags = None, ""
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model", "cpu model") and model is None:
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    model = model or platform.processor() or None
    return {"model": model, "flags": flags, "logical_cpus": os.cpu_count(), "machine": platform.machine()}


def torch_info(device: str = "cpu") -> dict:
    """torch's threads and backends (torch.__config__), its CUDA/cuDNN build, and the GPU when
    `device` is a CUDA device. torch is imported here, lazily: it is slow to import."""
    import torch
    info = {"version": torch.__version__, "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(), "config": torch.__config__.show().strip(),
            "parallel": torch.__config__.parallel_info().strip(),
            "backends": {"mkldnn": torch.backends.mkldnn.is_available(), "openmp": torch.backends.openmp.is_available(),
                         "mkl": torch.backends.mkl.is_available(), "cpu_capability": torch.backends.cpu.get_cpu_capability()},
            "cuda_build": torch.version.cuda}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0
        info["cuda"] = {"version": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                        "gpu": torch.cuda.get_device_name(index), "capability": list(torch.cuda.get_device_capability(index))}
    return info


def environment(device: str = "cpu") -> dict:
    """The software and machine that make a lock: the python, every installed package, the key
    packages named, the git commit and whether the tree was clean, the CPU, torch's threads and
    backends, and CUDA/cuDNN/GPU when `device` is CUDA. JSON-ready; informational (not hashed)."""
    packages = installed_packages()
    return {"python": platform.python_version(), "platform": platform.platform(),
            "key_packages": {k: packages.get(k) for k in KEY_PACKAGES}, "packages": packages,
            "packages_sha256": sha256_bytes(canonical_json(packages).encode("ascii")),
            "git": git_state(), "cpu": cpu_info(), "torch": torch_info(device)}


def lock_hash(entries: dict[str, str], versions: dict[str, str]) -> str:
    """sha256 of canonical JSON of the entries and the pinned versions (no timestamp)."""
    return sha256_bytes(canonical_json({"entries": entries, "versions": versions}).encode("ascii"))


def diff_entries(locked: dict[str, str], current: dict[str, str]) -> list[str]:
    """Readable differences, sorted by name: "changed: x", "added: y" (new now), "removed: z" (gone now)."""
    lines = []
    for name in sorted(set(locked) | set(current)):
        if name not in current:
            lines.append(f"removed: {name}")
        elif name not in locked:
            lines.append(f"added: {name}")
        elif locked[name] != current[name]:
            lines.append(f"changed: {name}")
    return lines


def _public_version(v: str) -> str:
    # "2.13.0+cpu" and "2.13.0+cu128" are the same release; the build variant is a device choice (conf/)
    return v.split("+", 1)[0]


def diff_versions(locked: dict[str, str], current: dict[str, str]) -> list[str]:
    """Lines naming each pinned version that differs (torch compared without its +local build tag)."""
    lines = []
    for key in VERSION_KEYS:
        a, b = str(locked.get(key)), str(current.get(key))
        if (key == "torch" and _public_version(a) != _public_version(b)) or (key != "torch" and a != b):
            lines.append(f"{key}: locked {a}, running {b}")
    return lines


# ---------------------------------------------------------------- read / write / verify

def _check_entries(entries, where: str) -> None:
    if not isinstance(entries, dict) or not entries:
        raise LockError(f"{where}: 'entries' must be a non-empty object of name -> sha256")
    for name, digest in entries.items():
        if not isinstance(digest, str) or not _HEX64.match(digest):
            raise LockError(f"{where}: entry {name!r} has {digest!r}, expected a 64-digit lowercase hex sha256")


def _versions_of(meta: dict, where: str) -> dict[str, str]:
    missing = [k for k in VERSION_KEYS if not isinstance(meta.get(k), str)]
    if missing:
        raise LockError(f"{where}: meta lacks version string(s) {missing}")
    return {k: meta[k] for k in VERSION_KEYS}


def read_lock(lock_path) -> dict:
    """Load and self-check a lock. LockError if it is missing, malformed, or its lock_hash does not match."""
    lock_path = Path(lock_path)
    name = lock_path.parent.name
    if not lock_path.exists():
        raise LockError(f"protocol {name} was never frozen: run make freeze PROTOCOL={name} first "
                        f"({lock_path} does not exist)")
    try:
        lock = json.loads(lock_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise LockError(f"{lock_path}: malformed lock, not valid JSON ({e})") from None
    if not isinstance(lock, dict) or not isinstance(lock.get("meta"), dict) or not isinstance(lock.get("lock_hash"), str):
        raise LockError(f"{lock_path}: malformed lock, expected an object with 'entries', 'meta' and 'lock_hash'")
    _check_entries(lock.get("entries"), str(lock_path))
    versions = _versions_of(lock["meta"], str(lock_path))
    if lock_hash(lock["entries"], versions) != lock["lock_hash"]:
        raise LockError(f"{lock_path}: lock_hash does not match the lock's entries and versions (edited by hand?)")
    return lock


def write_lock(lock_path, entries: dict[str, str], meta: dict) -> dict:
    """Write the lock atomically, or return the existing one if its entries are identical.

    `meta` may carry "python"/"torch" (else the running versions are used), "environment" (else
    environment() on CPU) and any informational fields; "created" is added. Refuses (LockError) to replace a lock whose entries differ.
    """
    lock_path = Path(lock_path)
    _check_entries(entries, f"{lock_path} (new)")
    entries = dict(sorted(entries.items()))
    if lock_path.exists():
        existing = read_lock(lock_path)
        if existing["entries"] == entries:
            return existing
        diff = "\n  ".join(diff_entries(existing["entries"], entries))
        raise LockError(f"{lock_path}: protocol {lock_path.parent.name} is already frozen and its content changed:\n  {diff}\n"
                        f"a changed protocol is a new protocol: copy it to protocols/<new name> and freeze that")
    meta = dict(meta)
    if not all(isinstance(meta.get(k), str) for k in VERSION_KEYS):
        meta = {**environment_versions(), **meta}
    if "environment" not in meta:
        meta["environment"] = environment()
    versions = _versions_of(meta, f"{lock_path} (new)")
    meta.setdefault("created", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    lock = {"entries": entries, "meta": meta, "lock_hash": lock_hash(entries, versions)}
    atomic_write_text(lock_path, json.dumps(lock, sort_keys=True, indent=2, ensure_ascii=True) + "\n")
    return lock


def verify_lock(lock_path, current_entries: dict[str, str], current_versions: dict[str, str] | None = None) -> dict:
    """Check the protocol as it is now against its lock; return the lock or raise LockError with a diff.

    `current_versions` defaults to the running python/torch.
    """
    lock = read_lock(lock_path)
    current_versions = current_versions if current_versions is not None else environment_versions()
    problems = diff_entries(lock["entries"], current_entries) + diff_versions(lock["meta"], current_versions)
    if problems:
        listing = "\n  ".join(problems)
        name = lock["meta"].get("protocol", Path(lock_path).parent.name)
        raise LockError(f"{lock_path}: protocol {name} does not match its lock:\n  {listing}\n"
                        f"refusing to run; a changed protocol is a new protocol: copy it to protocols/<new name> and freeze that")
    return lock
