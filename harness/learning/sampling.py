"""Batched byte sampling with a KV cache: temperature sampling or greedy, stopping at END or the budget.

Prompts of different lengths share a batch by left padding: each row's bytes end at the same slot,
padding slots are masked out of attention, and each row's rotary positions start at 0 at its first
real byte, so a row decodes exactly as it would alone.

Randomness: sampling is Gumbel-max (argmax of logits / T + Gumbel noise), with the noise of prompt
number i drawn from its own CPU `torch.Generator` seeded from (seed, i). A row's samples therefore
depend on the seed and its index in `prompts`, not on the batch it shares, the batch size or the
device (up to floating-point differences in the logits themselves).

Speed without changing a sample (the plain path, Speed(plain=True), has none of
it and gives the same bytes): the G rollouts of a prompt share one prefill; finished rows leave the
batch; noise is drawn only for steps that are reached; `on_row_done` lets a caller verify finished
rows while the rest decode. Each relies on the kernels computing a row the same way whatever the
batch holds, which holds for matrices of at least a few rows (COMPACT_FLOOR keeps them that tall);
tests/test_perf_determinism.py checks the records of both paths are identical.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from harness.core.seeds import derive_seed
from harness.core.settings import Speed
from harness.learning.model import KVCache, Transformer
from harness.tasks.contract import END

END_ID = ord(END)
CPU_BATCH = 256        # rows per decode call on CPU (the records of every protocol were made with it)
MAX_GPU_BATCH = 4096   # rows per decode call on CUDA, if memory allows
NOISE_CHUNK = 32       # decode steps of Gumbel noise drawn at a time (steps never reached are never drawn)
COMPACT_FLOOR = 16     # a shrunk batch keeps at least this many rows (finished ones as filler): BLAS takes
                       # other kernels for very small batches, and a row must decode to the same bits in any batch


@dataclass(frozen=True)
class Completion:
    text: str        # decoded completion: bytes before the END byte (utf-8, errors="replace")
    n_bytes: int     # bytes generated, including END if it was emitted
    ended: bool      # True if END was produced within the budget


@dataclass
class DecodeTotals:
    """Running totals over every `sample` call in this process; `make profile` reads the difference."""
    calls: int = 0
    rows: int = 0
    bytes: int = 0         # bytes generated (the completions' n_bytes)
    row_steps: int = 0     # rows x decode steps computed: finished rows dropped from a batch stop counting
    seconds: float = 0.0


TOTALS = DecodeTotals()


def sample(model: Transformer, prompts: list[str], *, max_bytes: int = 256, temperature: float = 1.0,
           seed: int = 0, batch_size: int | None = None, device=None, use_cache: bool = True,
           on_row_done: Callable[[int, Completion], None] | None = None, speed: Speed | None = None) -> list[Completion]:
    """One completion per prompt, in the order of `prompts` (repeat a prompt G times for G rollouts).
    temperature == 0 is greedy. `use_cache=False` recomputes the whole sequence at every step (same
    results, for benchmarking the cache). batch_size None: CPU_BATCH on CPU, as many rows as fit in
    half the free memory on CUDA. `on_row_done(i, completion)` is called for prompt i as soon as its
    row has finished (so a caller can verify it while the rest decode). `speed` defaults to
    Speed() (full precision); its plain path drops no finished rows and draws all noise up front."""
    t0 = time.perf_counter()
    if max_bytes < 1:
        raise ValueError(f"sample: max_bytes must be >= 1, got {max_bytes}")
    if temperature < 0:
        raise ValueError(f"sample: temperature must be >= 0 (0 = greedy), got {temperature}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"sample: batch_size must be >= 1, got {batch_size}")
    encoded = [p.encode("utf-8") for p in prompts]
    for i, b in enumerate(encoded):
        if not b:
            raise ValueError(f"sample: prompt {i} is empty; a completion needs at least one byte of context")
        if len(b) + max_bytes - 1 > model.cfg.max_seq:
            raise ValueError(f"sample: prompt {i} ({len(b)} bytes) + max_bytes {max_bytes} exceeds the model's "
                             f"max_seq {model.cfg.max_seq} (need len(prompt) + max_bytes - 1 <= max_seq)")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    speed = speed or Speed()
    if batch_size is None:
        batch_size = default_batch_size(model, device, max((len(b) for b in encoded), default=1) + max_bytes)
    # batch rows of similar length together (less padding); noise is keyed by prompt index, so
    # the order does not change any sample
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    out: list[Completion | None] = [None] * len(prompts)
    row_steps = 0
    for lo in range(0, len(order), batch_size):
        rows = order[lo:lo + batch_size]
        comps, steps = _sample_batch(model, [encoded[i] for i in rows], rows, max_bytes, temperature, seed, device,
                                     use_cache, speed, on_row_done)
        row_steps += steps
        for i, c in zip(rows, comps):
            out[i] = c
    TOTALS.calls += 1
    TOTALS.rows += len(prompts)
    TOTALS.bytes += sum(c.n_bytes for c in out)  # type: ignore[union-attr]
    TOTALS.row_steps += row_steps
    TOTALS.seconds += time.perf_counter() - t0
    return out  # type: ignore[return-value]


def default_batch_size(model: Transformer, device: torch.device, max_len: int) -> int:
    """CPU_BATCH on CPU. On CUDA: rows whose KV cache, prefill activations and noise fit in half the
    free memory (float32 upper bound), at most MAX_GPU_BATCH."""
    if device.type != "cuda":
        return CPU_BATCH
    cfg = model.cfg
    free, _ = torch.cuda.mem_get_info(device)
    per_row = 4 * max_len * (2 * cfg.n_layer * cfg.d_model + 6 * cfg.d_model + 2 * cfg.d_ff + 2 * 256) \
        + 4 * NOISE_CHUNK * 256
    return max(1, min(MAX_GPU_BATCH, int(0.5 * free // per_row)))


class GumbelStream:
    """Gumbel(0, 1) noise for one batch, NOISE_CHUNK steps at a time: row r's values come from its
    own generator seeded by (seed, row_ids[r]) in step order, so they are those of `gumbel_noise`,
    only never drawn for steps the batch does not reach. `keep` follows the sampler's compaction."""

    def __init__(self, seed: int, row_ids: list[int], max_bytes: int, chunk: int, device: torch.device):
        self.gens = [torch.Generator().manual_seed(_row_seed(seed, i)) for i in row_ids]
        self.max_bytes, self.chunk, self.device = max_bytes, chunk, device
        self.slots = list(range(len(row_ids)))   # the batch's slots -> index into gens
        self.start, self.block = 0, None          # block: (len(slots), steps, 256) on device

    def at(self, step: int) -> torch.Tensor:
        """Noise of decode step `step` for the current slots: (len(slots), 256)."""
        if self.block is None or step >= self.start + self.block.shape[1]:
            n = min(self.chunk, self.max_bytes - step)
            block = torch.empty(len(self.slots), n, 256)
            for r, g in enumerate(self.slots):
                block[r].exponential_(generator=self.gens[g])
            block = block.log_().neg_()
            if self.device.type == "cuda":  # pinned: the copy overlaps the kernels already queued
                block = block.pin_memory().to(self.device, non_blocking=True)
            self.start, self.block = step, block.to(self.device)
        return self.block[:, step - self.start]

    def keep(self, keep_slots: list[int], keep_idx: torch.Tensor) -> None:
        self.slots = [self.slots[k] for k in keep_slots]
        if self.block is not None:
            self.block = self.block.index_select(0, keep_idx)


@torch.inference_mode()
def _sample_batch(model: Transformer, prompts: list[bytes], row_ids: list[int], max_bytes: int, temperature: float,
                  seed: int, device: torch.device, use_cache: bool, speed: Speed,
                  on_row_done: Callable[[int, Completion], None] | None) -> tuple[list[Completion], int]:
    """Decode one batch. Returns (completions in the order of `prompts`, rows x steps computed).

    Unless speed.plain, finished rows leave the batch (their cache rows are dropped) once at least
    an eighth of it has finished, down to COMPACT_FLOOR rows; a row's own computation is the same."""
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(B, L, dtype=torch.long)
    valid = torch.zeros(B, L, dtype=torch.bool)
    for r, p in enumerate(prompts):
        ids[r, L - len(p):] = torch.tensor(list(p), dtype=torch.long)
        valid[r, L - len(p):] = True
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    ids, valid = ids.to(device), valid.to(device)
    pos = (torch.cumsum(valid.long(), dim=1) - 1).clamp(min=0)   # 0 at each row's first real byte
    noise = GumbelStream(seed, row_ids, max_bytes, max_bytes if speed.plain else NOISE_CHUNK, device) \
        if temperature > 0 else None
    dtype = speed.autocast_dtype(device) or next(model.parameters()).dtype
    compact = use_cache and not speed.plain
    autocast = speed.autocast_context(device)
    with autocast:
        if compact:
            logits, cache = _prefill_once_per_prompt(model, prompts, ids, pos, valid, L + max_bytes - 1, dtype)
        else:
            cache = KVCache.empty(model.cfg, B, L + max_bytes - 1, device=device, dtype=dtype) if use_cache else None
            logits = model(ids, pos=pos, valid=valid, cache=cache)[:, -1]
    generated = torch.full((B, max_bytes), END_ID, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    slot_rows = list(range(B))                       # batch slot -> row of `generated`
    rows_t = torch.arange(B, device=device)
    reported = [False] * B
    check_every = 1 if device.type == "cpu" else 16   # reading `done` needs a host sync on GPU
    row_steps = 0
    for step in range(max_bytes):
        if temperature > 0:
            scores = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
            nxt = (scores + noise.at(step)).argmax(-1)
        else:
            nxt = logits.argmax(-1)
        nxt = torch.where(done, END_ID, nxt)
        generated[rows_t, step] = nxt
        done = done | (nxt == END_ID)
        row_steps += len(slot_rows)
        if step == max_bytes - 1:
            break
        if (step + 1) % check_every == 0:
            done_host = done.tolist()
            if on_row_done is not None:
                _report(generated, slot_rows, done_host, reported, row_ids, max_bytes, on_row_done)
            if all(done_host):
                break
            if compact:
                keep = _keep_slots(done_host)
                if keep is not None:
                    keep_idx = torch.tensor(keep, device=device)
                    cache.k = [k.index_select(0, keep_idx) for k in cache.k]
                    cache.v = [v.index_select(0, keep_idx) for v in cache.v]
                    cache.valid = cache.valid.index_select(0, keep_idx)
                    if noise is not None:
                        noise.keep(keep, keep_idx)
                    nxt, done, lengths = nxt[keep_idx], done[keep_idx], lengths[keep_idx]
                    slot_rows = [slot_rows[k] for k in keep]
                    rows_t = torch.tensor(slot_rows, device=device)
        step_pos = (lengths + step)[:, None]
        with autocast:
            if use_cache:
                logits = model(nxt[:, None], pos=step_pos, cache=cache)[:, -1]
            else:
                ids = torch.cat([ids, nxt[:, None]], dim=1)
                pos = torch.cat([pos, step_pos], dim=1)
                valid = torch.cat([valid, torch.ones(B, 1, dtype=torch.bool, device=device)], dim=1)
                logits = model(ids, pos=pos, valid=valid)[:, -1]
    comps = [_completion(row, max_bytes) for row in generated.cpu().tolist()]
    if on_row_done is not None:
        for r, c in enumerate(comps):
            if not reported[r]:
                on_row_done(row_ids[r], c)
    return comps, row_steps


def _prefill_once_per_prompt(model: Transformer, prompts: list[bytes], ids: torch.Tensor, pos: torch.Tensor,
                             valid: torch.Tensor, size: int, dtype: torch.dtype) -> tuple[torch.Tensor, KVCache]:
    """Prefill each distinct prompt of the batch once (G rollouts of a task share one) and copy its
    cache rows to every row with that prompt; logits of the last position only. Returns
    (logits (B, 256), cache for B rows). The same bits as a full prefill: every op is row-wise
    and the matrices stay at least COMPACT_FLOOR rows tall (BLAS kernels for fewer rows round
    differently)."""
    first: dict[bytes, int] = {}
    for r, p in enumerate(prompts):
        first.setdefault(p, r)
    uniq = sorted(first.values())
    where = {r: i for i, r in enumerate(uniq)}
    expand = torch.tensor([where[first[p]] for p in prompts], device=ids.device)
    B, L = ids.shape
    if len(uniq) == B or len(uniq) * L < COMPACT_FLOOR:   # nothing to share, or too few rows to be safe
        uniq, expand = list(range(B)), None
    sel = torch.tensor(uniq, device=ids.device)
    cache = KVCache.empty(model.cfg, len(uniq), size, device=ids.device, dtype=dtype)
    logits = model(ids[sel], pos=pos[sel], valid=valid[sel], cache=cache, last_only=len(uniq) >= COMPACT_FLOOR)[:, -1]
    if expand is not None:
        cache.k = [k.index_select(0, expand) for k in cache.k]
        cache.v = [v.index_select(0, expand) for v in cache.v]
        cache.valid = cache.valid.index_select(0, expand)
        logits = logits.index_select(0, expand)
    return logits, cache


def _keep_slots(done: list[bool]) -> list[int] | None:
    """Slots to keep when enough have finished to be worth a copy of the cache, else None: every
    unfinished slot, topped up with finished ones to COMPACT_FLOOR, in slot order."""
    n = len(done)
    live = [s for s in range(n) if not done[s]]
    target = max(len(live), min(COMPACT_FLOOR, n))
    if n - target < max(1, n // 8):
        return None
    filler = [s for s in range(n) if done[s]][:target - len(live)]
    return sorted(live + filler)


def _report(generated: torch.Tensor, slot_rows: list[int], done: list[bool], reported: list[bool],
            row_ids: list[int], max_bytes: int, on_row_done: Callable[[int, Completion], None]) -> None:
    new = [row for slot, row in enumerate(slot_rows) if done[slot] and not reported[row]]
    if not new:
        return
    for row, data in zip(new, generated[torch.tensor(new, device=generated.device)].tolist()):  # one copy to the host
        reported[row] = True
        on_row_done(row_ids[row], _completion(data, max_bytes))


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
    return derive_seed("sample", seed, row, bits=63, byteorder="little")


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
