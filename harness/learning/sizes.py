"""The registered model sizes: Llama-shaped decoder configurations by name. No torch here, so that
the protocol schema (and everything that reads sealed records) can name the sizes without it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    n_layer: int = 3
    n_head: int = 4
    d_model: int = 128
    d_ff: int = 256           # SwiGLU hidden width
    max_seq: int = 512        # longest input the model accepts (prompt <= ~254 bytes + 256-byte completion)
    rope_base: float = 10000.0

    def __post_init__(self):
        for name in ("n_layer", "n_head", "d_model", "d_ff", "max_seq"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {getattr(self, name)!r}")
        if self.d_model % self.n_head or (self.d_model // self.n_head) % 2:
            raise ValueError(f"ModelConfig: d_model={self.d_model} must split into n_head={self.n_head} heads of even width")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


SIZES: dict[str, ModelConfig] = {
    "tiny": ModelConfig(n_layer=2, n_head=2, d_model=64, d_ff=128),       # ~0.12M, unit tests
    "smoke": ModelConfig(n_layer=2, n_head=4, d_model=96, d_ff=256),      # ~0.27M, CPU smoke protocol
    "polygon": ModelConfig(n_layer=6, n_head=6, d_model=384, d_ff=800),   # ~9.27M, the real protocol
}
