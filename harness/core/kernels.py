"""The CPU kernel path is part of the recipe: torch, MKL and oneDNN pick their kernels by the host's
instruction set, and the kernels sum floats in different orders, so one frozen protocol trained on
an AVX2 and on an AVX-512 host gives different bases, runs and verdicts. The protocol registers the
path (model.yaml `cpu_capability`, and the intra-op threads `run_threads`); `pin` applies it in
every process that computes with torch, before its first kernel, and refuses a host or a process
that cannot honour it. torch is imported only inside `pin` and `observed`.

What was tried on an AVX-512 host (a 30-step training loop of the smoke model, parameter bytes):
ATEN_CPU_CAPABILITY default / avx2 / avx512 give three different results; under avx2, MKL_CBWR=AVX2,
MKL_ENABLE_INSTRUCTIONS (SSE4_2, AVX2, AVX512), ONEDNN_MAX_CPU_ISA=AVX2 and 1 or 2 threads give the
same bytes as MKL left alone, and MKL_CBWR=COMPATIBLE different ones. MKL's branch is pinned anyway
(MKL_CBWR), as MKL chooses it by vendor and model, not only by flags.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import HarnessError

CAPABILITIES = ("default", "avx2", "avx512")   # ATEN_CPU_CAPABILITY's values on x86-64
_MKL_CBWR = {"default": "COMPATIBLE", "avx2": "AVX2", "avx512": "AVX512"}
_ONEDNN_ISA = {"default": "SSE41", "avx2": "AVX2", "avx512": "AVX512_CORE"}
# the /proc/cpuinfo flags torch needs before it runs a capability's kernels
_HOST_FLAGS = {"default": (), "avx2": ("avx2", "fma"), "avx512": ("avx512f", "avx512bw", "avx512dq", "avx512vl")}
X86_64 = ("x86_64", "amd64")


class KernelPathError(HarnessError):
    """The registered kernel path cannot be honoured here, or records were made on another one."""


@dataclass(frozen=True)
class KernelRecipe:
    """What makes a CPU result's bytes: torch's kernel path and the intra-op threads."""
    cpu_capability: str   # one of CAPABILITIES
    threads: int          # torch intra-op threads every run, pilot and evaluation computes with

    def env(self) -> dict[str, str]:
        """The environment variables that select the path (read by torch, MKL and oneDNN at their first call)."""
        return {"ATEN_CPU_CAPABILITY": self.cpu_capability, "MKL_CBWR": _MKL_CBWR[self.cpu_capability],
                "ONEDNN_MAX_CPU_ISA": _ONEDNN_ISA[self.cpu_capability]}

    def to_dict(self) -> dict:
        """The lock's `recipe/kernels` entry hashes this."""
        return {"cpu_capability": self.cpu_capability, "threads": self.threads, "env": self.env(),
                "flush_denormal": False}


def host_capabilities(flags, machine: str) -> list[str]:
    """The kernel paths (of CAPABILITIES, in that order) a host with these /proc/cpuinfo `flags` and
    this architecture can run: none off x86-64, where no registered path exists."""
    if str(machine).lower() not in X86_64:
        return []
    have = set(flags)
    return [c for c in CAPABILITIES if all(f in have for f in _HOST_FLAGS[c])]


def host_refusal(capability: str, machine: str | None = None, cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """Why this host cannot run `capability`'s kernels (one line), or None when it can."""
    machine = (machine or platform.machine()).lower()
    if machine not in X86_64:
        return (f"this host is {machine}, not x86-64: the registered kernel path cpu_capability={capability} "
                f"exists only on x86-64, and another architecture's kernels give other bytes")
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return None if capability == "default" else f"{cpuinfo} cannot be read to check the host for {capability}"
    flags = next((line.partition(":")[2].split() for line in text.splitlines() if line.startswith("flags")), [])
    missing = [f for f in _HOST_FLAGS[capability] if f not in flags]
    if missing:
        return (f"this CPU lacks {', '.join(missing)}: it cannot run the registered kernel path "
                f"cpu_capability={capability}")
    return None


def pin(recipe: KernelRecipe, where: str) -> dict:
    """Apply `recipe` in this process and check that torch honours it; returns `observed()`.
    Call it before the first torch kernel: torch fixes its path at the first one, MKL at its first
    call. KernelPathError, naming `where`, when the host or this process cannot honour it."""
    refusal = host_refusal(recipe.cpu_capability)
    if refusal:
        raise KernelPathError(f"{where}: {refusal}")
    os.environ.update(recipe.env())  # spawned children (the pilot's and the experiment's jobs) inherit it
    import torch
    got = torch.backends.cpu.get_cpu_capability().lower()
    if got != recipe.cpu_capability:
        raise KernelPathError(f"{where}: torch runs its {got} kernels but the protocol registers cpu_capability="
                              f"{recipe.cpu_capability} (model.yaml); this process computed before the path was set "
                              f"(ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')}), start a fresh one")
    torch.set_num_threads(recipe.threads)
    torch.set_flush_denormal(False)
    return observed()


def observed() -> dict:
    """The kernel path this process computes with, as a start record keeps it."""
    import torch
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability().lower(), "threads": torch.get_num_threads(),
            "mkl_cbwr": os.environ.get("MKL_CBWR"), "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
            "machine": platform.machine().lower()}


def differs(recorded: dict | None, current: dict) -> list[str]:
    """The fields of two kernel paths that differ, as "field a != b" (empty when they agree; a record
    made before kernel paths were recorded, None, differs in everything)."""
    if recorded is None:
        return ["no kernel path recorded"]
    keys = ("cpu_capability", "threads", "mkl_cbwr", "onednn_max_cpu_isa", "machine", "numerics")  # numerics:
    # the host's fingerprint digest, which the runner adds (harness.learning.numerics); the flags alone do not
    # make two CPUs compute alike
    return [f"{k} {recorded.get(k)} != {current.get(k)}" for k in keys if recorded.get(k) != current.get(k)]
