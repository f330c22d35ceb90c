"""Long checks (`make check-long`): the path of the README's main command (`make experiment`) on the smoke protocol,
start to finish in a temporary results dir, then an audit of what it sealed."""
import json
import re
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT
from harness.cli.main import _verdict_line
from harness.spec.protocol import load_protocol


@pytest.mark.long
def test_smoke_experiment_end_to_end_and_audit(tmp_path):
    results = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "harness", "experiment", "--protocol", "smoke", "--results-dir", str(results)],
                       cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rate = float(re.search(r"base probe pass rate: ([0-9.]+)", p.stdout).group(1))
    lo, hi = load_protocol("smoke").model.base_pass_range
    assert lo <= rate <= hi, f"smoke base pass rate {rate} outside its registered range [{lo}, {hi}]"
    verdict = json.loads((results / "smoke" / "readout" / "verdict.json").read_text())
    # the log ends with the report's verdict sentence, the rule's own when a check overrode it, and the warnings
    assert p.stdout.rstrip("\n").endswith(_verdict_line(results / "smoke" / "readout"))
    assert (results / "smoke" / "readout" / "report.html").is_file()
    assert (results / "smoke" / "frozen" / "PREREGISTRATION.md").is_file()
    assert verdict["analysis"]["verdict"]["outcome"] in ("keep_both", "drop_heircommit", "loop_earns_nothing", "not_resolved")
    a = subprocess.run([sys.executable, "-m", "harness", "audit", "--protocol", "smoke", "--results-dir", str(results)],
                       cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert a.returncode == 0 and "reproduced" in a.stdout, a.stdout + a.stderr
