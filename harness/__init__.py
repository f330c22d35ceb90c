"""Pre-registered experiment harness for self-play post-training of a small byte-level code model."""
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def configure_torch(threads: int = 1) -> None:
    """One intra-op thread by default: records must not depend on the machine's core count, and on
    a shared or oversubscribed CPU extra threads make small models several times slower."""
    import torch
    if threads > 0:
        torch.set_num_threads(threads)
