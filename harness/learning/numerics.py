"""The numerics fingerprint: what this host's kernels make of a short canonical computation at the
protocol's model size, hashed per component. Two hosts with the same fingerprint compute the same
bytes for the protocol's base, runs and checkpoints; two that differ do not, whatever their CPU flags
and environment variables say (an Intel and an AMD host under one kernel pin gave two bases, and so two
verdicts, from one frozen protocol).

Freeze computes it once per thread count the recipe uses (the base's and the runs') and writes
frozen/numerics.json, which the lock hashes; every process that computes for the protocol (the base,
the pilot's jobs, each run, `make replicate`) recomputes its own thread count's before its first step
(`check`), and a host whose fingerprint differs is refused in one line naming the first differing
component and both CPUs. HARNESS_ALLOW_OTHER_NUMERICS=1 runs anyway; the caller logs a deviation.

The components, in the order a difference is reported, go from the narrowest to the widest, so the
first one that differs says where two hosts part: plain matmuls at the model's shapes (the GEMM
library's branch), one forward (attention, norms, activations), one backward, sqrt/exp/log of a seeded
vector (MKL's vector math), three AdamW updates of a seeded vector (elementwise only, its sqrt
included), and a training loop hashed after 1, 10 and 30 steps. At the
`smoke` size the matmuls, forward, backward and train_30_steps are the same computation, seeds and
order as the standalone tool whose lines the project's host list (docs/reproducibility.md) records,
so a host's lines compare with those of hosts measured with it. Call `pin` first: the fingerprint is of
the kernel path pinned in this process.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from harness.core import paths, records
from harness.core.errors import HarnessError
from harness.learning.model import Transformer
from harness.learning.sizes import ModelConfig

ALLOW_ENV = "HARNESS_ALLOW_OTHER_NUMERICS"   # "1": run on a host whose fingerprint differs, as a deviation
TRAIN_STEPS = 30
ROWS, COLS = 16, 64                          # the batch: 16 sequences of 64 bytes


_HERE: dict[tuple[ModelConfig, int], dict[str, str]] = {}   # this process's fingerprint, by (size, threads)


class NumericsError(HarnessError):
    """This host's numerics fingerprint differs from the one the protocol was frozen with."""


def _h(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def _loss(model: Transformer, x: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


def compute(cfg: ModelConfig, threads: int, steps: int = TRAIN_STEPS) -> dict[str, str]:
    """component -> sha256 (first 16 hex) of its float32 bytes, computed with `threads` intra-op threads
    (this process's count is restored after). About a second at the smoke size on one core."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(0)  # one stream, drawn in the order the host list's tool draws it
        out = _matmuls(cfg, g)
        out.update(_training(cfg, steps, g))
        return out
    finally:
        torch.set_num_threads(before)


@torch.no_grad()
def _matmuls(cfg: ModelConfig, g: torch.Generator) -> dict[str, str]:
    """The model's GEMM shapes (qkv, up, down, out projections; one decoding row) and one off-model shape."""
    d, f, rows = cfg.d_model, cfg.d_ff, ROWS * COLS
    out = {}
    for m, k, n in [(rows, d, 3 * d), (rows, d, f), (rows, f, d), (rows, d, d), (1, d, f), (333, 1000, 77)]:
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        out[f"matmul_{m}x{k}x{n}"] = _h(a @ b)
    return out


def _training(cfg: ModelConfig, steps: int, g: torch.Generator) -> dict[str, str]:
    """Forward, backward and `steps` AdamW steps of a seeded model on bytes drawn from `g`."""
    model = Transformer(cfg, seed=7)
    x = torch.randint(0, 256, (ROWS, COLS), generator=g)
    out = {"forward": _h(model(x))}
    _loss(model, x).backward()
    out["backward"] = _h(torch.cat([p.grad.flatten() for p in model.parameters()]))
    out["sqrt_exp_log"] = _elementwise()
    out["adamw_update"] = _adamw_update()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    for step in range(1, steps + 1):
        opt.zero_grad()
        _loss(model, torch.randint(0, 256, (ROWS, COLS), generator=g)).backward()
        opt.step()
        if step in (1, 10) and step < steps:  # where along the loop two hosts part, when only its end differs
            out[f"train_{step}_step{'s' if step > 1 else ''}"] = _h(torch.cat([p.flatten() for p in model.parameters()]))
    out[f"train_{steps}_steps"] = _h(torch.cat([p.flatten() for p in model.parameters()]))
    return out


def _elementwise() -> str:
    """sqrt, exp and log of a seeded contiguous vector: torch hands these to MKL's vector math library, whose
    results follow MKL's branch (under MKL_CBWR=COMPATIBLE its sqrt is not IEEE's correctly rounded one)."""
    x = torch.rand(4096, generator=torch.Generator().manual_seed(2)) * 10 + 1e-3
    return _h(torch.cat([torch.sqrt(x), torch.exp(-x), torch.log(x)]))


def _adamw_update() -> str:
    """Three AdamW steps on a seeded 4096-vector with seeded gradients (no matmul, no model)."""
    g = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(torch.randn(4096, generator=g))
    opt = torch.optim.AdamW([p], lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    for _ in range(3):
        p.grad = torch.randn(4096, generator=g) * 1e-2
        opt.step()
    return _h(p)


def host_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name as /proc/cpuinfo gives it ("?" where it cannot be read)."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "?"


@dataclass(frozen=True)
class Fingerprint:
    """frozen/numerics.json: the host that froze the protocol and its fingerprint per thread count."""
    cpu: str
    torch: str
    size: str
    by_threads: dict[str, dict[str, str]]   # str(threads) -> component -> sha256 (first 16 hex)

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "torch": self.torch, "size": self.size, "by_threads": self.by_threads}

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "Fingerprint":
        try:
            return cls(str(d["cpu"]), str(d["torch"]), str(d["size"]),
                       {str(t): {str(k): str(v) for k, v in c.items()} for t, c in d["by_threads"].items()})
        except (KeyError, TypeError, AttributeError) as e:
            raise NumericsError(f"{where}: not a numerics fingerprint (expected cpu, torch, size, by_threads; {e!r:.120})") from None

    def digest(self, threads: int) -> str:
        return digest(self.by_threads[str(threads)])


def digest(components: dict[str, str]) -> str:
    """One short name for a fingerprint's components (what a start record keeps and a log line quotes)."""
    return hashlib.sha256("".join(f"{k}={v};" for k, v in sorted(components.items())).encode()).hexdigest()[:16]


def measure(cfg: ModelConfig, size: str, threads: list[int]) -> Fingerprint:
    """This host's fingerprint at every thread count in `threads`."""
    return Fingerprint(host_cpu(), torch.__version__, size, {str(t): compute(cfg, t) for t in sorted(set(threads))})


def first_difference(frozen: dict[str, str], here: dict[str, str]) -> str | None:
    """The first component whose hash differs, in `here`'s order (compute's: narrowest first; a file on disk
    keeps its keys sorted), or None when all agree."""
    for k in [*here, *(k for k in frozen if k not in here)]:
        if here.get(k) != frozen.get(k):
            return k
    return None


def compare(frozen: Fingerprint, cfg: ModelConfig, threads: int, where: str) -> tuple[dict[str, str], str | None]:
    """This host's fingerprint at `threads` (measured once per process) against the frozen one: (this host's
    components, None) when they agree, else (components, one line naming the first differing component and
    both CPUs)."""
    key = str(threads)
    if key not in frozen.by_threads:
        raise NumericsError(f"{where}: the protocol was frozen without a numerics fingerprint at {threads} thread(s) "
                            f"(it has {sorted(frozen.by_threads)}): freeze it again")
    if (cfg, threads) not in _HERE:  # once per process: a worker that runs many jobs measures its host once
        _HERE[(cfg, threads)] = compute(cfg, threads)
    here = _HERE[(cfg, threads)]
    first = first_difference(frozen.by_threads[key], here)
    if first is None:
        return here, None
    n = sum(here.get(k) != v for k, v in frozen.by_threads[key].items())  # of the frozen components
    return here, (f"this host's numerics differ from the frozen ones at {first} ({n} of {len(frozen.by_threads[key])} "
                  f"components, {threads} thread(s)): this host {host_cpu()}, torch {torch.__version__}; the host that "
                  f"froze the protocol {frozen.cpu}, torch {frozen.torch}")


def check(frozen: Fingerprint, cfg: ModelConfig, threads: int, where: str) -> tuple[dict[str, str], str | None]:
    """`compare`, for a process about to compute: NumericsError when the host differs, unless
    HARNESS_ALLOW_OTHER_NUMERICS=1, which returns (components, the one-line account) for the caller's
    deviation log."""
    here, account = compare(frozen, cfg, threads, where)
    if account is None or os.environ.get(ALLOW_ENV) == "1":
        return here, account
    raise NumericsError(f"{where}: {account}; its bytes would not be the registered ones: run it on a host whose "
                        f"fingerprint matches (docs/reproducibility.md), or set {ALLOW_ENV}=1 to run anyway as a "
                        f"recorded deviation")


def read_frozen(results_dir: Path, name: str) -> Fingerprint | None:
    """frozen/numerics.json of protocol `name`, or None where freeze wrote none (a fixture's frozen tree)."""
    path = paths.numerics_path(results_dir, name)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise NumericsError(f"{path}: cannot be read as JSON ({e!s:.120})") from None
    return Fingerprint.from_dict(data, str(path))


def freeze_fingerprint(results_dir: Path, name: str, cfg: ModelConfig, size: str, threads: list[int],
                       out=print) -> Fingerprint:
    """Freeze's first computation: measure this host's fingerprint at every thread count of the recipe
    and write frozen/numerics.json; where a freeze cut short already wrote one, check this host against
    it instead (a freeze resumed on another host would mix two hosts' bytes in one frozen tree)."""
    frozen = read_frozen(results_dir, name)
    if frozen is not None:
        for t in sorted(set(threads)):
            _, account = compare(frozen, cfg, t, f"freeze {name}")
            if account:
                raise NumericsError(f"freeze {name}: {account}; a frozen tree is built on one host: remove "
                                    f"{paths.frozen_dir(results_dir, name)} and freeze again on one host")
        out(f"[freeze] numerics fingerprint {describe(frozen)}: this host matches the one that began this freeze")
        return frozen
    fp = measure(cfg, size, threads)
    path = paths.numerics_path(results_dir, name)
    records.private_dirs(path.parent)
    records.atomic_write_text(path, records.canonical_json(fp.to_dict()) + "\n")
    out(f"[freeze] numerics fingerprint {describe(fp)} (frozen/numerics.json; every run checks its host against it)")
    return fp


def describe(fp: Fingerprint) -> str:
    """One line: each thread count's digest and the CPU it was measured on."""
    return ", ".join(f"{fp.digest(int(t))} at {t} thread(s)" for t in sorted(fp.by_threads, key=int)) + f" on {fp.cpu}"
