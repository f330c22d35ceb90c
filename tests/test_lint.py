"""The tree passes ruff with the project's configuration (pyproject.toml [tool.ruff]): pyflakes
(unused imports and names, undefined names) and pycodestyle's errors and warnings."""
import importlib.util
import subprocess
import sys

from harness import PROJECT_ROOT


def test_ruff_finds_nothing():
    assert importlib.util.find_spec("ruff") is not None, "ruff is not installed: pip install -e '.[dev]'"
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
