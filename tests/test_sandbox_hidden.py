"""A results directory outside the project (and outside /tmp) is hidden from completions once the
harness registers it, as the runner and freeze do; the default verifier restarts to pick it up."""
import os
import shutil
import tempfile

import pytest

from harness import sandbox, verifier
from harness.tasks import Difficulty, build_tasks


@pytest.fixture
def outside_dir():
    d = tempfile.mkdtemp(prefix="harness-hidden-", dir="/var/tmp")
    os.chmod(d, 0o755)
    secret = os.path.join(d, "probe.jsonl")
    with open(secret, "w") as f:
        f.write('{"expected": [42]}\n')
    os.chmod(secret, 0o644)  # world-readable: only the mount namespace can keep it out
    yield d, secret
    sandbox._ALSO_HIDDEN.discard(os.path.realpath(d))
    verifier.shutdown()
    shutil.rmtree(d)


def test_registered_results_dir_is_hidden_from_completions(outside_dir):
    d, secret = outside_dir
    task = build_tasks(3, 1, Difficulty(1, 1, 9, 0.0))[0]
    reads_then_solves = f"    open({secret!r}).read()\n" + task.reference
    verifier.shutdown()
    before = verifier.verify(task, reads_then_solves)
    assert before.passed  # not registered: readable (this is the gap `hide` closes)
    sandbox.hide(d)
    after = verifier.verify(task, reads_then_solves)
    assert not after.passed and after.reason == "forbidden", after
    assert verifier.verify(task, task.reference).passed  # the restarted verifier still works
    with pytest.raises(ValueError, match="not an existing directory"):
        sandbox.hide(os.path.join(d, "nope"))


def test_a_registered_directory_that_is_later_removed_does_not_stop_new_sandboxes():
    d = tempfile.mkdtemp(prefix="harness-gone-", dir="/var/tmp")
    sandbox.hide(d)
    shutil.rmtree(d)
    verifier.shutdown()
    task = build_tasks(4, 1, Difficulty(1, 1, 9, 0.0))[0]
    assert verifier.verify(task, task.reference).passed
    assert os.path.realpath(d) not in sandbox.registered_hidden()
