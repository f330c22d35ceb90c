"""Byte-level decoder-only transformer (Llama-shaped): RMSNorm, rotary positions, SwiGLU, no biases.

Vocabulary is the 256 byte values. The same code runs on CPU and CUDA in any float dtype; device
and dtype are chosen by the caller (`model.to(device, dtype)`).

`forward` takes optional per-row positions, a per-slot validity mask (left padding) and a
`KVCache` for incremental decoding:

    cache = KVCache.empty(model.cfg, batch=B, size=L + n_new, device=..., dtype=...)
    logits = model(prompt_ids, pos=pos, valid=valid, cache=cache)   # prefill, (B, L, 256)
    logits = model(next_ids[:, None], pos=pos_next, cache=cache)     # one byte, (B, 1, 256)

`Speed` (harness.core.settings) holds how the model runs, never what it computes on CPU: bf16 autocast on CUDA (the output
norm and head stay float32, so logits keep their precision), optional torch.compile of the training
forward, and the plain switch that turns every speed path off (the reference the tests compare with).
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from harness.core.settings import Speed
from harness.learning.sizes import SIZES, ModelConfig  # noqa: F401  (re-exported: the registry of sizes lives without torch)

VOCAB = 256  # one token per byte value


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
                kv: tuple[torch.Tensor, torch.Tensor] | None, start: int) -> torch.Tensor:
        """x (B, T, D); cos/sin (B, 1, T, head_dim/2); mask (B, 1, T, S) bool (True = may attend) or
        None for plain causal attention; kv: this layer's cache (B, H, size, head_dim) pair, written at
        slots [start, start + T). Returns (B, T, D)."""
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if kv is not None:
            kv[0][:, :, start:start + T] = k
            kv[1][:, :, start:start + T] = v
            k, v = kv[0][:, :, :start + T], kv[1][:, :, :start + T]
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=1e-5)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.d_model, eps=1e-5)
        self.mlp = SwiGLU(cfg)

    def forward(self, x, cos, sin, mask, kv, start):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, kv, start)
        return x + self.mlp(self.mlp_norm(x))


@dataclass
class KVCache:
    """Keys and values of every layer for `size` slots, plus which slots hold a real byte (left
    padding is not real). `length` counts the slots filled so far; it is a host int, so advancing
    it never waits on the device."""
    k: list[torch.Tensor]   # per layer (B, H, size, head_dim)
    v: list[torch.Tensor]
    valid: torch.Tensor     # (B, size) bool
    length: int = 0

    @classmethod
    def empty(cls, cfg: ModelConfig, batch: int, size: int, device=None, dtype=torch.float32) -> "KVCache":
        if size > cfg.max_seq:
            raise ValueError(f"KVCache size {size} exceeds the model's max_seq {cfg.max_seq}")
        shape = (batch, cfg.n_head, size, cfg.head_dim)
        # uninitialised: a slot is written before attention ever reads it (reads stop at `length`)
        return cls(k=[torch.empty(shape, device=device, dtype=dtype) for _ in range(cfg.n_layer)],
                   v=[torch.empty(shape, device=device, dtype=dtype) for _ in range(cfg.n_layer)],
                   valid=torch.zeros(batch, size, device=device, dtype=torch.bool))

    @property
    def size(self) -> int:
        return self.valid.shape[1]


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(VOCAB, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = nn.RMSNorm(cfg.d_model, eps=1e-5)
        self.lm_head = nn.Linear(cfg.d_model, VOCAB, bias=False)
        cos, sin = rope_tables(cfg.head_dim, cfg.max_seq, cfg.rope_base)
        # not persistent: derived from the config, so checkpoints hold only learned weights
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights(seed)

    @torch.no_grad()
    def _init_weights(self, seed: int) -> None:
        """GPT-2 style: N(0, 0.02), residual output projections scaled by 1/sqrt(2 * n_layer).
        A private generator, so the weights depend on `seed` only, never on global RNG state."""
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if p.ndim == 1:
                p.fill_(1.0)  # RMSNorm gains
                continue
            std = 0.02 / math.sqrt(2 * self.cfg.n_layer) if name.endswith(("attn.out.weight", "mlp.down.weight")) else 0.02
            nn.init.normal_(p, 0.0, std, generator=g)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, pos: torch.Tensor | None = None, valid: torch.Tensor | None = None,
                cache: KVCache | None = None, last_only: bool = False) -> torch.Tensor:
        """idx (B, T) byte ids -> logits (B, T, 256), or (B, 1, 256) for the last input only
        (`last_only`: a prefill needs no logits for the prompt's other bytes).

        pos (B, T): rotary position of each input (default: its slot index). valid (B, T) bool:
        False marks left padding, which no real byte attends to. With `cache`, the inputs fill
        slots [cache.length, cache.length + T) and attend to every earlier valid slot."""
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        n_slots = cache.size if cache is not None else self.cfg.max_seq
        if start + T > n_slots:
            raise ValueError(f"input of {T} bytes after {start} cached exceeds the {n_slots} slots available (max_seq={self.cfg.max_seq})")
        if pos is None:
            pos = torch.arange(start, start + T, device=idx.device).expand(B, T)
        if cache is not None:
            cache.valid[:, start:start + T] = True if valid is None else valid
            mask = attention_mask(cache.valid[:, :start + T], start)
        else:
            mask = None if valid is None else attention_mask(valid, 0)
        cos = self.rope_cos[pos].unsqueeze(1)
        sin = self.rope_sin[pos].unsqueeze(1)
        x = self.embed(idx)
        for i, block in enumerate(self.blocks):
            kv = (cache.k[i], cache.v[i]) if cache is not None else None
            x = block(x, cos, sin, mask, kv, start)
        if cache is not None:
            cache.length = start + T
        if last_only:
            x = x[:, -1:]
        if torch.is_autocast_enabled(x.device.type):  # logits in float32: sampling and the loss need the precision
            with torch.autocast(x.device.type, enabled=False):
                return self.lm_head(self.norm(x.to(self.lm_head.weight.dtype)))
        return self.lm_head(self.norm(x))


def attention_mask(key_valid: torch.Tensor, start: int) -> torch.Tensor:
    """key_valid (B, S) bool over slots [0, S); queries are slots [start, S). Returns (B, 1, T, S):
    query slot i sees key slot j <= i when j is valid. A padding query also sees itself, so no row
    of the mask is empty (an all-masked row would give NaNs that leak into later layers)."""
    S = key_valid.shape[1]
    q_slot = torch.arange(start, S, device=key_valid.device)[:, None]
    k_slot = torch.arange(S, device=key_valid.device)[None, :]
    causal = k_slot <= q_slot
    return ((causal & key_valid[:, None, :]) | (k_slot == q_slot)).unsqueeze(1)


def rope_tables(head_dim: int, max_seq: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * frequency, each (max_seq, head_dim/2); computed in float64."""
    freqs = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(max_seq, dtype=torch.float64)[:, None] * freqs[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (i, i + head_dim/2) of x (B, H, T, head_dim) by the position angle."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


# ---- how the model runs (speed settings) ---------------------------------------------------------

_compiled: "weakref.WeakKeyDictionary[Transformer, Any]" = weakref.WeakKeyDictionary()


def forward_fn(model: Transformer, speed: Speed):
    """The callable that runs `model` forward: the model itself, or (speed.compile) one compiled
    wrapper per model that shares its parameters."""
    if not speed.compile or speed.plain:
        return model
    if model not in _compiled:
        _compiled[model] = torch.compile(model, dynamic=True)
    return _compiled[model]
