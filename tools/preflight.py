"""What the GPU check needs, checked before anything is installed (standard library only, so the
machine's own python3 runs it as it is).

    python3 tools/preflight.py --wheels wheels [--cpu-ok] [--requirements FILE]   # before installing
    python3 tools/preflight.py --imports [--requirements FILE]                    # after installing
    python3 tools/preflight.py --list-requirements                                # for make wheels

Prints one line per missing piece ("[gpu-check] missing: ...") and exits 1 if any; otherwise prints
the versions found and, on stdout's last line, the requirements still to install from the wheels
(those the interpreter cannot already import at a satisfying version), space-separated.

The requirements are the project's dependencies from pyproject.toml except torch (the machine's
own torch is used, whatever its version), or the lines of --requirements FILE.
"""
from __future__ import annotations

import argparse
import importlib.metadata as metadata
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIN_PYTHON = (3, 11)
# distribution name -> the module it provides, where they differ
MODULES = {"hydra-core": "hydra", "pyyaml": "yaml", "hydra-joblib-launcher": "hydra_plugins.hydra_joblib_launcher",
           "hydra-submitit-launcher": "hydra_plugins.hydra_submitit_launcher"}
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:(?:>=|==)\s*([0-9][0-9.]*))?\s*$")


def requirements(path: Path | None = None) -> list[tuple[str, str | None]]:
    """[(distribution name, minimum version or None)]: pyproject's dependencies but torch, or the
    lines of `path` ("name", "name>=x.y" or "name==x.y", read as a minimum; blank lines and # comments skipped)."""
    if path is None:
        import tomllib
        lines = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    else:
        lines = [ln.split("#", 1)[0] for ln in Path(path).read_text().splitlines()]
    out = []
    for line in (ln.strip() for ln in lines):
        if not line:
            continue
        m = _REQ.match(line)
        if m is None:
            raise SystemExit(f"[gpu-check] error: requirement {line!r}: expected 'name', 'name>=version' or 'name==version'")
        if normalise(m.group(1)) != "torch":
            out.append((m.group(1), m.group(2)))
    return out


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+", 1)[0])[:4])


def satisfied(name: str, minimum: str | None) -> bool:
    """Whether this interpreter already has `name` at `minimum` or later, importable."""
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    if minimum is not None and _version_tuple(version) < _version_tuple(minimum):
        return False
    module = MODULES.get(normalise(name), normalise(name).replace("-", "_"))
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def wheel_names(wheels: Path) -> set[str]:
    """Normalised distribution names of the *.whl files in `wheels`."""
    return {normalise(p.name.split("-", 1)[0]) for p in wheels.glob("*.whl")}


def torch_line(cpu_ok: bool) -> tuple[str | None, str]:
    """(problem or None, a line naming torch, its CUDA build and whether a device is visible)."""
    probe = ("import torch; print(torch.__version__, torch.version.cuda or 'none', int(torch.cuda.is_available()), "
             "torch.cuda.device_count())")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"torch: {sys.executable} cannot import torch ({last}); the check uses the machine's own torch", ""
    version, cuda, available, count = proc.stdout.split()
    found = f"torch {version} (CUDA build {cuda}), CUDA available: {available == '1'} ({count} device(s))"
    if available != "1" and not cpu_ok:
        smi = shutil.which("nvidia-smi")
        why = "a CPU build of torch" if cuda == "none" else f"torch's CUDA {cuda} sees no device (driver? CUDA_VISIBLE_DEVICES?)"
        return (f"a CUDA device: {found}: {why}; nvidia-smi {'at ' + smi if smi else 'not found'}; "
                f"--tiny or --device cpu checks the script on CPU"), found
    return None, found


def preinstall(wheels: Path, reqs, cpu_ok: bool) -> tuple[list[str], list[str], list[str]]:
    """(missing pieces, lines found, requirements to install)."""
    missing, found = [], [f"python {sys.version.split()[0]} at {sys.executable}"]
    if sys.version_info[:2] < MIN_PYTHON:
        missing.append(f"python >= {'.'.join(map(str, MIN_PYTHON))}: {sys.executable} is {sys.version.split()[0]}")
    problem, line = torch_line(cpu_ok)
    missing += [problem] if problem else []
    found += [line] if line else []
    todo = [f"{n}>={v}" if v else n for n, v in reqs if not satisfied(n, v)]
    if todo:
        if importlib.util.find_spec("pip") is None and not list(wheels.glob("pip-*.whl")):
            missing.append(f"pip: {sys.executable} has no pip module and {wheels}/ holds no pip wheel (make wheels adds one)")
        if not wheels.is_dir():
            missing.append(f"the carried wheels: {wheels}/ does not exist (run `make wheels` where a package registry "
                           f"is reachable and carry {wheels}/ along)")
        else:
            have = wheel_names(wheels)
            for req in todo:
                name = re.split(r"[<>=]", req, 1)[0]
                if normalise(name) not in have:
                    missing.append(f"a wheel for {req} in {wheels}/ (run `make wheels` and carry {wheels}/ along)")
    found.append(f"requirements already importable: {len(reqs) - len(todo)} of {len(reqs)}")
    return missing, found, todo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/preflight.py", description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", default=str(ROOT / "wheels"))
    ap.add_argument("--requirements", default=None, help="requirement lines instead of pyproject's dependencies")
    ap.add_argument("--cpu-ok", action="store_true", help="no CUDA device needed (--tiny, --device cpu)")
    ap.add_argument("--imports", action="store_true", help="after installing: every requirement must import")
    ap.add_argument("--list-requirements", action="store_true", help="print the requirements, space-separated")
    args = ap.parse_args(argv)
    reqs = requirements(Path(args.requirements) if args.requirements else None)
    if args.list_requirements:
        print(" ".join(f"{n}>={v}" if v else n for n, v in reqs))
        return 0
    if args.imports:
        missing = [f"{n}{'>=' + v if v else ''}: not importable after installing the carried wheels"
                   for n, v in reqs if not satisfied(n, v)]
        for m in missing:
            print(f"[gpu-check] missing: {m}", file=sys.stderr)
        return 1 if missing else 0
    missing, found, todo = preinstall(Path(args.wheels), reqs, args.cpu_ok)
    for m in missing:
        print(f"[gpu-check] missing: {m}", file=sys.stderr)
    for f in found:
        print(f"[gpu-check] found: {f}", file=sys.stderr)
    print(" ".join(todo))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
