"""Provenance: which code and which environment made a record.

Every record that says where it came from (a run's manifest, the readout's, an MLflow run, the
audit's answer) carries the same two things, `record(env)`:

    {"git":         {"commit": 40-hex or None, "clean": bool or None},
     "environment": {"sha256": 64-hex, "description": {...}}}

The description is canonical: what decides a result's bytes and stays put from one process to the
next on one machine,

    python      the interpreter's version
    machine     the architecture (x86_64, aarch64)
    torch       {"version" (with its build tag), "cuda" (the CUDA it was built for, or None), "mkl",
                 "mkldnn", "openmp" (bools)}
    cpu         {"model": the CPU's model name, "kernel_paths": the registered kernel paths this CPU
                 can run (harness.core.kernels.CAPABILITIES, in that order)}
    gpu         {"name", "capability"} of the CUDA device a record was computed on, else None
    packages    every installed distribution, normalised name -> version

and its digest is the sha256 of its canonical JSON. Left out on purpose: torch's thread counts and
the kernel path a process runs (the registered recipe pins both in every process that computes, and
each run's start record keeps them: an audit, which never computes with torch, would otherwise always
"differ"), the host name, the OS kernel's release, the CPU count, the git state and the time.

A description is made from `lock.environment()`'s full record, so the environment of a lock written
before descriptions existed is described, and digested, the same way from what it recorded.
"""
from __future__ import annotations

import functools
import json

from harness.core.kernels import host_capabilities
from harness.core.records import canonical_json, sha256_bytes
from harness.spec import lock

NOT_RECORDED = "not recorded"


def describe(env: dict) -> dict:
    """The canonical description of one `lock.environment()` record (missing fields become None)."""
    env = env or {}
    cpu, torch = env.get("cpu") or {}, env.get("torch") or {}
    backends, cuda = torch.get("backends") or {}, torch.get("cuda")
    machine = cpu.get("machine")
    return {
        "python": env.get("python"),
        "machine": machine,
        "torch": {"version": torch.get("version"), "cuda": torch.get("cuda_build"),
                  "mkl": backends.get("mkl"), "mkldnn": backends.get("mkldnn"), "openmp": backends.get("openmp")},
        "cpu": {"model": cpu.get("model"),
                "kernel_paths": host_capabilities(str(cpu.get("flags") or "").split(), machine or "")},
        "gpu": {"name": cuda.get("gpu"), "capability": cuda.get("capability")} if isinstance(cuda, dict) else None,
        "packages": dict(sorted((env.get("packages") or {}).items())),
    }


def digest(description: dict) -> str:
    """sha256 (hex) of a description's canonical JSON."""
    return sha256_bytes(canonical_json(description).encode("ascii"))


def record(env: dict) -> dict:
    """{"git": {"commit", "clean"}, "environment": {"sha256", "description"}} of one
    `lock.environment()` record."""
    git = env.get("git") or {}
    description = describe(env)
    return {"git": {"commit": git.get("commit"), "clean": git.get("clean")},
            "environment": {"sha256": digest(description), "description": description}}


@functools.lru_cache(maxsize=None)
def _current(device: str) -> str:
    return canonical_json(record(lock.environment(device)))


def current(device: str = "cpu") -> dict:
    """This process's record (`record(lock.environment(device))`), made once per process and device:
    the code a process runs is the code it imported when it started, whatever is committed later."""
    return json.loads(_current(device))


def short(sha256: str | None) -> str:
    """The first 12 hex digits of a digest or commit, as the report and the CLI print it."""
    return str(sha256)[:12] if sha256 else NOT_RECORDED


def summary(description: dict) -> str:
    """One line: "python 3.11.9, torch 2.13.0+cpu, x86_64 CPU <model> (kernel paths default/avx2),
    142 packages" (plus the GPU when there is one)."""
    d = description
    cpu = d.get("cpu") or {}
    gpu = d.get("gpu")
    return (f"python {d.get('python')}, torch {(d.get('torch') or {}).get('version')}, {d.get('machine')} CPU "
            f"{cpu.get('model')} (kernel paths {'/'.join(cpu.get('kernel_paths') or []) or 'none'})"
            + (f", GPU {gpu.get('name')}" if gpu else "") + f", {len(d.get('packages') or {})} packages")


def differences(a: dict, b: dict, a_label: str = "here", b_label: str = "recorded") -> list[str]:
    """One line per field that differs between two descriptions, "<field>: <a_label> <value>, <b_label>
    <value>": python, the machine, each torch build field, the CPU's model and kernel paths, the GPU,
    each package by name. Empty when the two are the same description."""
    def line(field: str, x, y) -> str:
        return f"{field}: {a_label} {x}, {b_label} {y}"

    lines = [line(key, a.get(key), b.get(key)) for key in ("python", "machine") if a.get(key) != b.get(key)]
    for group in ("torch", "cpu"):
        x, y = a.get(group) or {}, b.get(group) or {}
        lines += [line(f"{group} {key}", _words(x.get(key)), _words(y.get(key)))
                  for key in sorted(set(x) | set(y)) if x.get(key) != y.get(key)]
    if a.get("gpu") != b.get("gpu"):
        lines.append(line("gpu", _gpu(a.get("gpu")), _gpu(b.get("gpu"))))
    x, y = a.get("packages") or {}, b.get("packages") or {}
    lines += [line(f"package {name}", x.get(name, "not installed"), y.get(name, "not installed"))
              for name in sorted(set(x) | set(y)) if x.get(name) != y.get(name)]
    return lines


def _words(value) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value)) or "none"
    return str(value)


def _gpu(gpu: dict | None) -> str:
    return "none" if not gpu else f"{gpu.get('name')} (compute capability {_words(gpu.get('capability'))})"
