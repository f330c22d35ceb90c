"""How to run, never what: one typed value built once — by the Hydra app from conf/run.yaml plus
overrides, or by the CLI from its flags — and handed down. Nothing here changes a record on CPU
(autocast "auto" is bf16 on CUDA only; the kernel path and threads are the protocol's, harness.core.kernels).
"""
from __future__ import annotations

import os
import re
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field, fields
from pathlib import Path

from harness.core import paths
from harness.core.errors import HarnessError
from harness.core.parallel import default_jobs

AUTOCAST_CHOICES = ("auto", "bf16", "off")
PROGRESS_CHOICES = ("auto", "on", "off", "lines")
_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+)$")

# ---- how the model runs (speed settings; the model reads them) ------------------------------------

AUTOCAST_CHOICES = ("auto", "bf16", "off")


@dataclass(frozen=True)
class Speed:
    """Speed settings. None of them changes a CPU result unless asked for explicitly (autocast="bf16").

    autocast  "auto": bf16 autocast on CUDA, none elsewhere; "bf16": also on CPU; "off": never
    compile   torch.compile the training forward (dynamic shapes); off by default
    plain     the unoptimised reference path: no row compaction or lazy noise in the sampler, no
              verification overlap, no autocast, no compile (tests compare records against it)
    """
    autocast: str = "auto"
    compile: bool = False
    plain: bool = False

    def __post_init__(self):
        if self.autocast not in AUTOCAST_CHOICES:
            raise ValueError(f"Speed.autocast must be one of {AUTOCAST_CHOICES}, got {self.autocast!r}")

    def autocast_dtype(self, device):
        """The autocast dtype on `device` (a torch.device), or None for full precision."""
        import torch  # here, not at the top: settings (and the CLI's refusals) never import torch
        if self.plain or self.autocast == "off" or (self.autocast == "auto" and device.type != "cuda"):
            return None
        return torch.bfloat16

    def autocast_context(self, device):
        import torch
        dtype = self.autocast_dtype(device)
        return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)



class SettingsError(HarnessError):
    pass


def check_cuda(device: str) -> None:
    """Refuse (SettingsError) a CUDA device this torch cannot use: a CPU-only build, no GPU visible,
    or an index past the last GPU. The entry points (the CLI, the Hydra app) call it before anything
    is written; torch is imported only here, when a CUDA device is asked for."""
    import torch
    if torch.version.cuda is None:
        raise SettingsError(f"device={device!r}: this torch ({torch.__version__}) is built without CUDA; "
                            f"use device=cpu or install a CUDA build of torch")
    n = torch.cuda.device_count()
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if n == 0:
        raise SettingsError(f"device={device!r}: torch {torch.__version__} sees no GPU (CUDA_VISIBLE_DEVICES="
                            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); use device=cpu")
    if index >= n:
        raise SettingsError(f"device={device!r}: torch sees {n} GPU(s), cuda:0 to cuda:{n - 1}")


@dataclass(frozen=True)
class RunSettings:
    device: str = "cpu"                  # cpu | cuda | cuda:<index>
    results_dir: Path = field(default_factory=lambda: paths.DEFAULT_RESULTS)  # sealed outputs live here
    tracking: bool = True                # mirror runs to MLflow (the sealed files are the record either way)
    tracking_uri: str | None = None      # None: $MLFLOW_TRACKING_URI, else sqlite:///<results_dir>/mlflow.db
    progress: str = "auto"               # auto: bars on a terminal, plain lines otherwise | on (bars) | off |
                                         # lines: one timed line per round, never bars (parallel jobs)
    torch_threads: int = 1               # cores a job is counted as when sizing `jobs`; the threads torch computes
                                         # with are registered (model.yaml run_threads, harness.core.kernels)
    jobs: int = 0                        # arm x seed runs at once in `experiment` and the pilot (own processes);
                                         # 0: one per core on CPU, one on a GPU (harness.core.parallel.default_jobs)
    autocast: str = "auto"               # auto: bf16 on CUDA only | bf16 | off
    compile: bool = False                # torch.compile the training forward
    plain: bool = False                  # the unoptimised reference path (no row compaction, lazy noise or
                                         # verification overlap); records equal the default path's

    def __post_init__(self):
        if not isinstance(self.device, str) or not _DEVICE.match(self.device):
            raise SettingsError(f"device={self.device!r}: expected cpu, cuda or cuda:<index>")
        if self.autocast not in AUTOCAST_CHOICES:
            raise SettingsError(f"autocast={self.autocast!r}: expected one of {', '.join(AUTOCAST_CHOICES)}")
        if self.progress not in PROGRESS_CHOICES:
            raise SettingsError(f"progress={self.progress!r}: expected one of {', '.join(PROGRESS_CHOICES)}")
        if isinstance(self.torch_threads, bool) or not isinstance(self.torch_threads, int) or self.torch_threads < 0:
            raise SettingsError(f"torch_threads={self.torch_threads!r}: expected an int >= 0")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 0:
            raise SettingsError(f"jobs={self.jobs!r}: expected an int >= 0 (0: one per core on CPU)")
        for name in ("tracking", "compile", "plain"):
            if not isinstance(getattr(self, name), bool):
                raise SettingsError(f"{name}={getattr(self, name)!r}: expected true or false")
        object.__setattr__(self, "results_dir", paths.results_dir(self.results_dir))

    @property
    def speed(self) -> Speed:
        """The model-side speed settings."""
        return Speed(autocast=self.autocast, compile=self.compile, plain=self.plain)

    @property
    def n_jobs(self) -> int:
        """Runs at once: `jobs`, or harness.core.parallel.default_jobs when it is 0."""
        return self.jobs or default_jobs(self.device, self.torch_threads)

    @property
    def bars(self) -> bool:
        """Progress bars (tqdm, with \\r frames) only where someone watches a terminal."""
        return self.progress == "on" or (self.progress == "auto" and sys.stderr.isatty())

    @property
    def plain_lines(self) -> bool:
        """Timed plain lines (one per round) instead of bars: CI logs, files, parallel jobs."""
        return self.progress == "lines" or (self.progress == "auto" and not self.bars)

    @classmethod
    def from_mapping(cls, values: dict) -> "RunSettings":
        """From conf/run.yaml's keys (unknown keys ignored: protocol, arm and seed are not settings)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in values.items() if k in names and v is not None}
        if "progress" in kw and isinstance(kw["progress"], bool):  # YAML true/false
            kw["progress"] = "on" if kw["progress"] else "off"
        return cls(**kw)
