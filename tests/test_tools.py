"""Every command in tools/ runs as its docstring says, with tiny arguments, in a fresh interpreter:
a tool that moved an import it needs (as level_table once did) fails here, not in a reader's shell."""
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT

# module -> (tiny arguments, what its output must hold). compare_runs, profile and gpu_check do their
# real work in test_compare_runs, test_profile and test_gpu_check; here they must start and parse.
TOOLS = {
    "tools.level_table": (["smoke", "20", "16", "2", "--shapes", "collapse"], "| 2 | x2 | collapse | C-B ruled_out |"),
    "tools.design_grid": (["--protocol", "smoke", "--items", "16", "--seeds", "2", "--replicates", "20"], "16"),
    "tools.preflight": (["--list-requirements"], "numpy"),
    "tools.compare_runs": (["--help"], "--runs"),
    "tools.profile": (["--help"], "--arm"),
    "tools.gpu_check": (["--help"], "usage"),
    "tools.readme_figures": (["--help"], "--results"),  # its real work: tests/test_readme.py
    "tools.fingerprint": (["--protocol", "{tiny}"], '"by_threads"'),  # a tiny protocol's model: test_numerics measures
    "tools.recipe_levels": (["--sims", "20", "--items", "16", "--sds", "0.04", "--laws", "normal"],
                            "| 6, 9, 12 | normal | 0.04 |"),
}


def test_every_tool_is_listed():
    found = {f"tools.{p.stem}" for p in (PROJECT_ROOT / "tools").glob("*.py") if p.stem != "__init__"}
    assert found == set(TOOLS)


@pytest.mark.parametrize("module", sorted(TOOLS))
def test_tool_runs(module, tmp_path):
    args, want = TOOLS[module]
    if "{tiny}" in args:
        from tests.tiny_protocol import make_tiny_protocol
        args = [str(make_tiny_protocol(tmp_path)) if a == "{tiny}" else a for a in args]
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "RESULTS": str(tmp_path), "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert want in done.stdout, done.stdout[-2000:]
