"""Batched byte sampling with a KV cache: temperature sampling or greedy, stopping at END or the budget.

Prompts of different lengths share a batch by left padding: each row's bytes end at the same slot,
padding slots are masked out of attention, and each row's rotary positions start at 0 at its first
real byte, so a row decodes exactly as it would alone.

Randomness: sampling is Gumbel-max (argmax of logits / T + Gumbel noise), with the noise of prompt
number i drawn from its own CPU `torch.Generator` seeded from (seed, i). A row's samples therefore
depend on the seed and its index in `prompts`, not on the batch it shares, the batch size or the
device (up to floating-point differences in the logits themselves).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from harness.model import KVCache, Transformer
from harness.tasks import END

END_ID = ord(END)


@dataclass(frozen=True)
class Completion:
    text: str        # decoded completion: bytes before the END byte (utf-8, errors="replace")
    n_bytes: int     # bytes generated, including END if it was emitted
    ended: bool      # True if END was produced within the budget


def sample(model: Transformer, prompts: list[str], *, max_bytes: int = 256, temperature: float = 1.0,
           seed: int = 0, batch_size: int = 256, device=None, use_cache: bool = True) -> list[Completion]:
    """One completion per prompt, in the order of `prompts` (repeat a prompt G times for G rollouts).
    temperature == 0 is greedy. `use_cache=False` recomputes the whole sequence at every step (same
    results, for benchmarking the cache)."""
    if max_bytes < 1:
        raise ValueError(f"sample: max_bytes must be >= 1, got {max_bytes}")
    if temperature < 0:
        raise ValueError(f"sample: temperature must be >= 0 (0 = greedy), got {temperature}")
    if batch_size < 1:
        raise ValueError(f"sample: batch_size must be >= 1, got {batch_size}")
    encoded = [p.encode("utf-8") for p in prompts]
    for i, b in enumerate(encoded):
        if not b:
            raise ValueError(f"sample: prompt {i} is empty; a completion needs at least one byte of context")
        if len(b) + max_bytes - 1 > model.cfg.max_seq:
            raise ValueError(f"sample: prompt {i} ({len(b)} bytes) + max_bytes {max_bytes} exceeds the model's "
                             f"max_seq {model.cfg.max_seq} (need len(prompt) + max_bytes - 1 <= max_seq)")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    # batch rows of similar length together (less padding); noise is keyed by prompt index, so
    # the order does not change any sample
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    out: list[Completion | None] = [None] * len(prompts)
    for lo in range(0, len(order), batch_size):
        rows = order[lo:lo + batch_size]
        for i, c in zip(rows, _sample_batch(model, [encoded[i] for i in rows], rows, max_bytes, temperature, seed, device, use_cache)):
            out[i] = c
    return out  # type: ignore[return-value]


@torch.inference_mode()
def _sample_batch(model: Transformer, prompts: list[bytes], row_ids: list[int], max_bytes: int,
                  temperature: float, seed: int, device: torch.device, use_cache: bool) -> list[Completion]:
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(B, L, dtype=torch.long)
    valid = torch.zeros(B, L, dtype=torch.bool)
    for r, p in enumerate(prompts):
        ids[r, L - len(p):] = torch.tensor(list(p), dtype=torch.long)
        valid[r, L - len(p):] = True
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    ids, valid = ids.to(device), valid.to(device)
    pos = (torch.cumsum(valid.long(), dim=1) - 1).clamp(min=0)   # 0 at each row's first real byte
    noise = gumbel_noise(seed, row_ids, max_bytes).to(device) if temperature > 0 else None
    dtype = next(model.parameters()).dtype
    cache = KVCache.empty(model.cfg, B, L + max_bytes - 1, device=device, dtype=dtype) if use_cache else None

    logits = model(ids, pos=pos, valid=valid, cache=cache)[:, -1]
    generated = torch.full((B, max_bytes), END_ID, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    check_every = 1 if device.type == "cpu" else 16   # "all ended?" needs a host sync on GPU
    for step in range(max_bytes):
        if temperature > 0:
            scores = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
            nxt = (scores + noise[:, step]).argmax(-1)
        else:
            nxt = logits.argmax(-1)
        nxt = torch.where(done, END_ID, nxt)
        generated[:, step] = nxt
        done = done | (nxt == END_ID)
        if step == max_bytes - 1 or ((step + 1) % check_every == 0 and bool(done.all())):
            break
        step_pos = (lengths + step)[:, None]
        if use_cache:
            logits = model(nxt[:, None], pos=step_pos, cache=cache)[:, -1]
        else:
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            pos = torch.cat([pos, step_pos], dim=1)
            valid = torch.cat([valid, torch.ones(B, 1, dtype=torch.bool, device=device)], dim=1)
            logits = model(ids, pos=pos, valid=valid)[:, -1]
    return [_completion(row, max_bytes) for row in generated.cpu().tolist()]


def _completion(row: list[int], max_bytes: int) -> Completion:
    if END_ID in row:
        k = row.index(END_ID)
        return Completion(bytes(row[:k]).decode("utf-8", errors="replace"), k + 1, True)
    return Completion(bytes(row).decode("utf-8", errors="replace"), max_bytes, False)


def gumbel_noise(seed: int, row_ids: list[int], max_bytes: int) -> torch.Tensor:
    """(len(row_ids), max_bytes, 256) float32 Gumbel(0, 1) noise; row r from a generator seeded
    by (seed, row_ids[r]). -log of an Exp(1) draw is Gumbel distributed."""
    out = torch.empty(len(row_ids), max_bytes, 256)
    for r, i in enumerate(row_ids):
        g = torch.Generator().manual_seed(_row_seed(seed, i))
        out[r].exponential_(generator=g)
    return out.log_().neg_()


def _row_seed(seed: int, row: int) -> int:
    return int.from_bytes(hashlib.sha256(f"sample/{seed}/{row}".encode()).digest()[:8], "little") >> 1


@torch.inference_mode()
def greedy_no_cache(model: Transformer, prompt: str, max_bytes: int) -> str:
    """Reference greedy decoder: the full forward pass over prompt + bytes so far at every step,
    no cache, no padding. Returns the bytes before END (or all `max_bytes`), decoded."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt.encode("utf-8"))], dtype=torch.long, device=device)
    out: list[int] = []
    for _ in range(max_bytes):
        nxt = int(model(ids)[0, -1].argmax())
        if nxt == END_ID:
            break
        out.append(nxt)
        ids = torch.cat([ids, torch.tensor([[nxt]], device=device)], dim=1)
    return bytes(out).decode("utf-8", errors="replace")
