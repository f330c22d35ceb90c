"""Training: masked cross-entropy on the completion span (SFT) and an advantage-weighted variant.

Sequence layout for one example, with n = len(prompt bytes), m = len(completion bytes):

    ids       = prompt bytes + completion bytes + END              (length T = n + m + 1)
    loss_mask = [False] * n + [True] * (m + 1)

`loss_mask[t]` says whether byte t is scored, i.e. predicted by the model from bytes 0..t-1. The
model reads `ids[:-1]` and is scored against `ids[1:]` where `loss_mask[1:]` is True: every
completion byte and the END byte, never a prompt byte.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from harness.core.settings import Speed
from harness.learning.model import Transformer, forward_fn
from harness.tasks.contract import END

Example = tuple[torch.Tensor, torch.Tensor]   # (ids LongTensor[T], loss_mask BoolTensor[T])


@dataclass
class TrainTotals:
    """Running totals over every `train_steps` call in this process; `make profile` reads the difference."""
    calls: int = 0
    steps: int = 0
    rows: int = 0            # sequences in the batches
    tokens: int = 0          # real input bytes read
    padded_tokens: int = 0   # input slots of the collated batches (real + padding)
    seconds: float = 0.0


TOTALS = TrainTotals()


def encode(prompt: str, completion: str, max_seq: int, add_end: bool = True) -> Example:
    """-> (ids LongTensor[T], loss_mask BoolTensor[T]) as in the module docstring. `add_end=False`
    leaves END off (for a completion that ran out of budget without emitting it)."""
    p = prompt.encode("utf-8")
    c = completion.encode("utf-8") + (END.encode() if add_end else b"")
    if not p:
        raise ValueError("encode: empty prompt; the first completion byte needs at least one byte of context")
    if not c:
        raise ValueError("encode: nothing to score (empty completion and add_end=False)")
    if len(p) + len(c) - 1 > max_seq:
        raise ValueError(f"encode: prompt ({len(p)} bytes) + completion ({len(c)} bytes incl. END) is longer "
                         f"than max_seq + 1 = {max_seq + 1}")
    ids = torch.tensor(list(p + c), dtype=torch.long)
    mask = torch.zeros(len(ids), dtype=torch.bool)
    mask[len(p):] = True
    return ids, mask


def collate(examples: list[Example]) -> dict[str, torch.Tensor]:
    """Right-pad a list of encoded examples -> {"input": (B, T-1) long, "target": (B, T-1) long,
    "mask": (B, T-1) bool}, T the longest example. Padding is never scored and, being to the right
    of every real byte, never attended to by one (causal attention)."""
    if not examples:
        raise ValueError("collate: no examples")
    T = max(len(ids) for ids, _ in examples)
    ids = torch.zeros(len(examples), T, dtype=torch.long)
    mask = torch.zeros(len(examples), T, dtype=torch.bool)
    for r, (x, m) in enumerate(examples):
        ids[r, :len(x)], mask[r, :len(m)] = x, m
    return {"input": ids[:, :-1], "target": ids[:, 1:], "mask": mask[:, 1:]}


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`; to CUDA through pinned memory, without waiting for the copy."""
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def token_nll(model: Transformer, batch: dict[str, torch.Tensor],
              speed: Speed | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (nll (B, T-1) in nats, zero where not scored; mask (B, T-1) as float), on the model's device.
    `speed` (default Speed(): full precision, not compiled) may run the forward under autocast and/or compiled."""
    speed = speed or Speed()
    device = next(model.parameters()).device
    inp, tgt = to_device(batch["input"], device), to_device(batch["target"], device)
    mask = to_device(batch["mask"], device)
    with speed.autocast_context(device):
        logits = forward_fn(model, speed)(inp)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))   # half precision -> float32 for the loss
    nll = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="none").view_as(tgt)
    m = mask.to(nll.dtype)
    return nll * m, m


def masked_ce_loss(model: Transformer, batch: dict[str, torch.Tensor], speed: Speed | None = None) -> torch.Tensor:
    """Mean next-byte cross-entropy (nats) over the scored bytes of the batch."""
    nll, m = token_nll(model, batch, speed)
    return nll.sum() / m.sum().clamp(min=1)


def advantage_weighted_loss(model: Transformer, batch: dict[str, torch.Tensor], advantages: torch.Tensor,
                            norm_bytes: int = 256, speed: Speed | None = None) -> torch.Tensor:
    """-(1 / (B * norm_bytes)) * sum_i A_i * log p(completion_i + END | prompt_i).

    Each sequence's summed log-likelihood is weighted by its advantage and divided by a fixed
    constant (the byte budget), not by the sequence's own length: dividing by length would make a
    short correct answer count more per byte than a long one and a long wrong one count less
    (the length bias Dr.GRPO removes). advantages: (B,) float."""
    nll, _ = token_nll(model, batch, speed)
    adv = advantages.to(device=nll.device, dtype=nll.dtype)
    if adv.shape != (nll.shape[0],):
        raise ValueError(f"advantage_weighted_loss: advantages shape {tuple(adv.shape)}, expected ({nll.shape[0]},)")
    return (adv * nll.sum(dim=1)).sum() / (nll.shape[0] * norm_bytes)


def clipped_advantage_loss(model: Transformer, batch: dict[str, torch.Tensor], advantages: torch.Tensor,
                           old_nll: torch.Tensor, clip_eps: float = 0.2, norm_bytes: int = 256,
                           speed: Speed | None = None) -> torch.Tensor:
    """Dr.GRPO's clipped surrogate, per scored byte t of sequence i:

        -(1 / (B * norm_bytes)) * sum_i sum_t min(r_it A_i, clip(r_it, 1 - eps, 1 + eps) A_i),
        r_it = p_now(byte) / p_sampling(byte) = exp(old_nll - nll)

    With several steps on one round's rollouts, the plain weighted loss can push the likelihood of
    a failed completion toward zero without bound and wreck the model; the clip stops each byte's
    gradient once its probability has moved by eps from the policy that sampled it. At ratio 1
    (the first step) its gradient equals `advantage_weighted_loss`'s. advantages: (B,);
    old_nll: (B, T-1) nats under the sampling policy, zero where not scored."""
    nll, m = token_nll(model, batch, speed)
    adv = advantages.to(device=nll.device, dtype=nll.dtype)[:, None]
    ratio = torch.exp(old_nll.to(nll.device) - nll)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv) * m
    return -surrogate.sum() / (nll.shape[0] * norm_bytes)


@torch.no_grad()
def sequence_nll(model: Transformer, encoded: list[Example], batch_size: int = 64,
                 speed: Speed | None = None) -> list[torch.Tensor]:
    """Per-example next-byte nll (nats, zero where not scored) under `model` as it is now: one
    (len(ids) - 1,) CPU tensor per example, for the clipped surrogate's old policy."""
    out = []
    for lo in range(0, len(encoded), batch_size):
        chunk = encoded[lo:lo + batch_size]
        nll, _ = token_nll(model, collate(chunk), speed)
        out += [nll[r, :len(ids) - 1].cpu() for r, (ids, _) in enumerate(chunk)]
    return out


def make_optimizer(model: Transformer, lr: float, weight_decay: float, warmup_steps: int = 0) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices (embeddings, projections), none on RMSNorm gains. With
    `warmup_steps`, step t (0-based) runs at lr x min(1, (t + 1) / warmup_steps): a fresh AdamW's
    first steps are its largest (no second-moment history), and they land on a trained model."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)
    if warmup_steps > 0:
        optimizer.register_step_pre_hook(_linear_warmup(lr, warmup_steps, first=decay[0]))
    return optimizer


def _linear_warmup(lr: float, warmup_steps: int, first: torch.Tensor):
    """A step pre-hook setting every group's lr from AdamW's own step count (its state, so a run
    resumed from a checkpoint, or an optimizer restored to an earlier state, continues the schedule
    from that state's step)."""
    def set_lr(optimizer, *_):
        state = optimizer.state.get(first, {})
        t = int(state["step"]) if "step" in state else 0
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (t + 1) / warmup_steps)
    return set_lr


def batch_order(lengths: list[int], n_steps: int, batch_size: int, seed: int, window: int = 8) -> list[list[int]]:
    """Example indices for each of `n_steps` batches. Indices come from a stream of seeded random
    permutations (epoch after epoch); every `window` batches' worth of the stream is sorted by
    length and cut into batches, whose order is then shuffled: batches hold similar lengths (little
    padding) while every example is still seen once per epoch. A window never spans more than one
    epoch's worth of examples (sorting repeats of one example together would fill a batch with
    copies). A batch has min(batch_size, n) examples; the same arguments give the same batches."""
    n = len(lengths)
    bs = min(batch_size, n)
    span = bs * max(1, min(window, n // bs))
    g = torch.Generator().manual_seed(seed)
    stream: list[int] = []
    out: list[list[int]] = []
    while len(out) < n_steps:
        while len(stream) < span:
            stream += torch.randperm(n, generator=g).tolist()
        chunk, stream = stream[:span], stream[span:]
        chunk.sort(key=lambda i: lengths[i])
        batches = [chunk[j:j + bs] for j in range(0, len(chunk), bs)]
        out += [batches[k] for k in torch.randperm(len(batches), generator=g).tolist()]
    return out[:n_steps]


def signed_batch_order(lengths: list[int], advantages: list[float], n_steps: int, batch_size: int, seed: int,
                       window: int = 8) -> list[list[int]]:
    """Like `batch_order`, for advantage-weighted training: every batch holds the round's positive,
    negative and zero advantages in the round's proportions (each sign present in the round gets at
    least one row), so no batch is all-positive or all-negative by construction when the round has
    both, and the fraction of positive rows does not swing from batch to batch. Each sign's rows
    come from their own stream of seeded permutations, length-sorted within a window of batches so
    that a batch's rows still have similar lengths. A batch has min(batch_size, n) examples."""
    n = len(lengths)
    if len(advantages) != n:
        raise ValueError(f"signed_batch_order: {len(advantages)} advantages for {n} examples")
    bs = min(batch_size, n)
    pools = [[i for i, a in enumerate(advantages) if a > 0], [i for i, a in enumerate(advantages) if a < 0],
             [i for i, a in enumerate(advantages) if a == 0]]
    quota = [round(bs * len(p) / n) for p in pools]
    for k in (0, 1):  # each present sign gets a row, taken from the largest other share
        if pools[k] and quota[k] == 0:
            quota[k] = 1
            quota[max((j for j in range(3) if j != k), key=lambda j: quota[j])] -= 1
    quota[max(range(3), key=lambda j: quota[j])] += bs - sum(quota)
    live = [k for k in range(3) if quota[k] > 0]
    span = max(1, min([window] + [len(pools[k]) // quota[k] for k in live]))
    g = torch.Generator().manual_seed(seed)
    streams: list[list[int]] = [[], [], []]
    out: list[list[int]] = []
    while len(out) < n_steps:
        chunks = {}
        for k in live:
            while len(streams[k]) < span * quota[k]:
                streams[k] += [pools[k][j] for j in torch.randperm(len(pools[k]), generator=g).tolist()]
            chunk, streams[k] = streams[k][:span * quota[k]], streams[k][span * quota[k]:]
            chunks[k] = sorted(chunk, key=lambda i: lengths[i])
        batches = [[i for k in live for i in chunks[k][b * quota[k]:(b + 1) * quota[k]]] for b in range(span)]
        out += [batches[j] for j in torch.randperm(span, generator=g).tolist()]
    return out[:n_steps]


def train_steps(model: Transformer, optimizer: torch.optim.Optimizer, examples: list[tuple[str, str]],
                n_steps: int, batch_size: int, seed: int, advantages: list[float] | None = None,
                *, clip_eps: float | None = None, grad_clip: float = 1.0, norm_bytes: int | None = None,
                speed: Speed | None = None) -> dict:
    """Exactly `n_steps` optimizer steps on (prompt, completion) pairs: masked CE, or the
    advantage-weighted loss when `advantages` (one per example) is given. An example may carry a
    third element `ended`: False for a completion that ran out of budget, so no END is scored
    after it. Gradient norm is clipped to `grad_clip` (0 = off). Returns {"steps", "mean_loss",
    "tokens" (real input bytes read), "loss_tokens" (bytes scored)}. With advantages and
    `clip_eps`, the loss is the clipped surrogate against the model as it was before the first
    step (the policy that sampled the rollouts). `norm_bytes`, the advantage loss's fixed
    normaliser, is required with advantages: pass the protocol's byte budget (max_bytes). Batches
    are length-bucketed by `batch_order` (SFT) or `signed_batch_order` (advantages: every batch
    mixes the round's signs), so little of each is padding (TOTALS.padded_tokens counts it).
    The same as planning the steps (`PlannedSteps`) and taking them all at once."""
    return PlannedSteps(model, optimizer, examples, n_steps, batch_size, seed, advantages, clip_eps=clip_eps,
                        grad_clip=grad_clip, norm_bytes=norm_bytes, speed=speed).take(n_steps)


class PlannedSteps:
    """One update of `n_steps` optimizer steps (the arguments of `train_steps`) planned at once,
    taken in parts: the batch order is drawn for all `n_steps`, and the clipped surrogate's anchor
    (the trust region) is the model before the first step, whatever happens between the parts as
    long as it does not touch the model or the optimizer. `take(k)` runs the next k steps, so
    taking k then n_steps - k gives the same weights, bit for bit, as `train_steps(n_steps)`."""

    def __init__(self, model: Transformer, optimizer: torch.optim.Optimizer, examples: list[tuple[str, str]],
                 n_steps: int, batch_size: int, seed: int, advantages: list[float] | None = None,
                 *, clip_eps: float | None = None, grad_clip: float = 1.0, norm_bytes: int | None = None,
                 speed: Speed | None = None):
        t0 = time.perf_counter()
        if not examples:
            raise ValueError("train_steps: no examples")
        if n_steps < 0 or batch_size < 1:
            raise ValueError(f"train_steps: need n_steps >= 0 and batch_size >= 1, got {n_steps}, {batch_size}")
        if advantages is not None and len(advantages) != len(examples):
            raise ValueError(f"train_steps: {len(advantages)} advantages for {len(examples)} examples")
        if advantages is not None and (norm_bytes is None or norm_bytes < 1):
            raise ValueError(f"train_steps: advantage training needs norm_bytes = the byte budget (max_bytes), got {norm_bytes!r}")
        self.model, self.optimizer, self.advantages = model, optimizer, advantages
        self.clip_eps, self.grad_clip, self.norm_bytes = clip_eps, grad_clip, norm_bytes
        self.encoded = [encode(ex[0], ex[1], model.cfg.max_seq, add_end=ex[2] if len(ex) > 2 else True) for ex in examples]
        self.n_scored = [int(m[1:].sum()) for _, m in self.encoded]
        self.device = next(model.parameters()).device
        self.speed = speed or Speed()
        self.old = (sequence_nll(model, self.encoded, speed=self.speed)
                    if advantages is not None and clip_eps is not None else None)
        lengths = [len(ids) for ids, _ in self.encoded]
        self.order = (batch_order(lengths, n_steps, batch_size, seed) if advantages is None
                      else signed_batch_order(lengths, advantages, n_steps, batch_size, seed))
        self.n_steps, self.done = n_steps, 0
        self.empty = False  # set by a caller whose plan trains on no sampled material (zero advantages)
        self.seconds = time.perf_counter() - t0  # planning time, charged to the first part

    @property
    def left(self) -> int:
        return self.n_steps - self.done

    def take(self, k: int) -> dict:
        """The next `k` planned steps. Returns train_steps's dict for these k steps."""
        if not 0 <= k <= self.left:
            raise ValueError(f"PlannedSteps.take: {k} steps asked, {self.left} of {self.n_steps} planned are left")
        t0 = time.perf_counter()
        model, encoded, device, speed = self.model, self.encoded, self.device, self.speed
        loss_sum = torch.zeros((), device=device)
        tokens = loss_tokens = padded = rows = 0
        for idx in self.order[self.done:self.done + k]:
            batch = collate([encoded[i] for i in idx])
            padded += batch["input"].numel()
            rows += len(idx)
            if self.advantages is None:
                loss = masked_ce_loss(model, batch, speed)
            else:
                adv = to_device(torch.tensor([self.advantages[i] for i in idx], dtype=torch.float32), device)
                if self.old is None:
                    loss = advantage_weighted_loss(model, batch, adv, self.norm_bytes, speed)
                else:
                    old_nll = torch.zeros(batch["target"].shape, dtype=self.old[idx[0]].dtype)
                    for r, i in enumerate(idx):
                        old_nll[r, :len(self.old[i])] = self.old[i]
                    old_nll = to_device(old_nll, device)
                    loss = clipped_advantage_loss(model, batch, adv, old_nll, self.clip_eps, self.norm_bytes, speed)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.grad_clip)
            self.optimizer.step()
            loss_sum += loss.detach()
            tokens += sum(len(encoded[i][0]) - 1 for i in idx)
            loss_tokens += sum(self.n_scored[i] for i in idx)
        self.done += k
        TOTALS.calls += 1
        TOTALS.steps += k
        TOTALS.rows += rows
        TOTALS.tokens += tokens
        TOTALS.padded_tokens += padded
        TOTALS.seconds += time.perf_counter() - t0 + self.seconds
        self.seconds = 0.0
        return {"steps": k, "mean_loss": float(loss_sum) / max(k, 1), "tokens": tokens, "loss_tokens": loss_tokens}


def optimizer_step(optimizer: torch.optim.Optimizer) -> int:
    """AdamW's own step count (what the lr warm-up reads; 0 before the first step)."""
    for state in optimizer.state.values():
        if "step" in state:
            return int(state["step"])
    return 0


@torch.no_grad()  # a measurement: no graph (freeze scores the base outside the evaluation's inference mode)
def completion_bits_per_byte(model: Transformer, pairs: list[tuple[str, str]], batch_size: int = 16,
                             speed: Speed | None = None) -> float:
    """Mean next-byte cross-entropy in bits over the completion bytes (and END) of (prompt,
    completion) pairs, each conditioned on its prompt: how well the model predicts a reference
    program for a docstring it is asked about. Prompt bytes are never trained on, so they are not
    scored here either. Pairs are batched by length (little padding; 2x faster than in the given
    order at 512 probes on CPU) and summed in float64, so the order of `pairs` does not matter."""
    examples = sorted((encode(p, c, model.cfg.max_seq) for p, c in pairs), key=lambda e: len(e[0]))
    total, count = 0.0, 0
    for lo in range(0, len(examples), batch_size):
        nll, m = token_nll(model, collate(examples[lo:lo + batch_size]), speed)
        total += float(nll.sum(dtype=torch.float64))
        count += int(m.sum())
    return total / max(count, 1) / math.log(2)


@torch.inference_mode()
def bits_per_byte(model: Transformer, texts: list[str], batch_size: int = 32, speed: Speed | None = None) -> float:
    """Mean next-byte cross-entropy in bits over every predicted byte of `texts` (all bytes but
    each text's first). A text longer than the context is cut into windows of max_seq + 1 bytes
    overlapping by one byte, so each byte is predicted once (context restarts at a window)."""
    span = model.cfg.max_seq + 1
    examples: list[tuple[torch.Tensor, torch.Tensor]] = []
    for text in texts:
        b = text.encode("utf-8")
        for lo in range(0, max(len(b) - 1, 0), span - 1):
            ids = torch.tensor(list(b[lo:lo + span]), dtype=torch.long)
            mask = torch.ones(len(ids), dtype=torch.bool)
            mask[0] = False
            examples.append((ids, mask))
    if not examples:
        raise ValueError("bits_per_byte: texts hold no predicted byte (each needs at least 2 bytes)")
    examples.sort(key=lambda e: len(e[0]))
    total, count = 0.0, 0
    speed = speed or Speed()
    for lo in range(0, len(examples), batch_size):
        nll, m = token_nll(model, collate(examples[lo:lo + batch_size]), speed)
        total += float(nll.sum(dtype=torch.float64))
        count += int(m.sum())
    return total / count / math.log(2)
