"""Checkpoint I/O: one format for the frozen base and every round's checkpoint, and the loader of
the frozen base."""
from __future__ import annotations

import io
import json
from pathlib import Path

import torch

from harness.core.errors import HarnessError
from harness.core.paths import set_paths
from harness.core.records import canonical_json
from harness.learning.model import SIZES, Transformer


class CheckpointError(HarnessError):
    """A checkpoint that does not fit what the protocol registers (e.g. another model size)."""


def model_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """The model's weights as checkpoint tensors: "model/<name>" -> a CPU copy (the training
    device leaves no trace in the file)."""
    return {f"model/{k}": v.detach().cpu().clone() for k, v in model.state_dict().items()}


def load_model_tensors(model: Transformer, tensors: dict[str, torch.Tensor]) -> Transformer:
    """Load the "model/<name>" tensors of a checkpoint into `model` (strict: every weight, no other)."""
    try:
        model.load_state_dict({k.removeprefix("model/"): v for k, v in tensors.items() if k.startswith("model/")})
    except RuntimeError as e:
        raise ValueError(f"checkpoint weights do not fit a model of {model.cfg}: {e}") from None
    return model


def checkpoint_bytes(tensors: dict[str, torch.Tensor], meta: dict) -> bytes:
    """The one checkpoint format: torch.save of {"tensors": a flat name -> CPU tensor dict, "meta":
    canonical JSON of everything else}. Laid out so the bytes depend only on the values: pickle
    output depends on object identity, so nested Python structures could serialise differently
    after a resume. Built in memory, because torch.save names the records inside its zip file
    after the file's own name; write the bytes with records.atomic_write_bytes."""
    buf = io.BytesIO()
    torch.save({"tensors": tensors, "meta": canonical_json(meta)}, buf)
    return buf.getvalue()


def read_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors on CPU, meta) of a file written from `checkpoint_bytes`. ValueError naming the
    file when it is not one (a missing file raises the OS error, which names it)."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        tensors, meta = payload["tensors"], json.loads(payload["meta"])
        if not isinstance(tensors, dict) or not isinstance(meta, dict):
            raise TypeError("'tensors' and 'meta' must be a dict and a JSON object")
    except OSError:
        raise
    except Exception as e:  # unpickling, zip or layout errors all mean "not our checkpoint"
        raise ValueError(f"{path}: not a checkpoint of the harness ({type(e).__name__}: {e})") from None
    return tensors, meta


def load_model(path: Path, size: str, device) -> Transformer:
    """The model of size `size` (a registered name) with the weights of checkpoint `path`, on `device`."""
    tensors, meta = read_checkpoint(path)
    if meta.get("size") != size:
        raise CheckpointError(f"{path}: a checkpoint of model size {meta.get('size')!r}, but the protocol's "
                              f"model.yaml registers size {size!r}")
    return load_model_tensors(Transformer(SIZES[size]), tensors).to(device)


def load_base(results_dir: Path, protocol, device) -> Transformer:
    """The frozen base of a protocol (results/<name>/frozen/base.pt) on `device`."""
    return load_model(set_paths(results_dir, protocol.name)["base"], protocol.model.size, device)
