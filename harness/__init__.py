"""Pre-registered experiment harness for self-play post-training of a small byte-level code model."""
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

