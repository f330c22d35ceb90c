"""No host directory is visible from inside the sandbox (an allow-list root), registered with the old
`pool.hide` or not: a results directory outside the project and outside /tmp, a world-readable
file in it, the project checkout itself. `hide` and `hidden_paths` stay as harmless calls."""
import os
import shutil
import tempfile

import pytest

from harness.sandbox import pool, verifier
from families.code import Difficulty, build_tasks


@pytest.fixture
def outside_dir():
    d = tempfile.mkdtemp(prefix="harness-hidden-", dir="/var/tmp")
    os.chmod(d, 0o755)
    secret = os.path.join(d, "probe.jsonl")
    with open(secret, "w") as f:
        f.write('{"expected": [42]}\n')
    os.chmod(secret, 0o644)  # world-readable: only the allow-list root can keep it out
    yield d, secret
    pool._ALSO_HIDDEN.discard(os.path.realpath(d))
    verifier.shutdown()
    shutil.rmtree(d)


def test_a_results_dir_is_out_of_reach_registered_or_not(outside_dir):
    d, secret = outside_dir
    task = build_tasks(3, 1, Difficulty(1, 1, 9, 0.0))[0]
    reads_then_solves = f"    open({secret!r}).read()\n" + task.reference
    verifier.shutdown()
    before = verifier.verify(task, reads_then_solves)
    assert not before.passed and before.reason == "error" and "No such file" in before.detail, before
    pool.hide(d)
    after = verifier.verify(task, reads_then_solves)
    assert not after.passed and after.reason == "error", after
    assert verifier.verify(task, task.reference).passed
    with pytest.raises(ValueError, match="not an existing directory"):
        pool.hide(os.path.join(d, "nope"))


def test_a_registered_directory_that_is_later_removed_does_not_stop_new_sandboxes():
    d = tempfile.mkdtemp(prefix="harness-gone-", dir="/var/tmp")
    pool.hide(d)
    shutil.rmtree(d)
    verifier.shutdown()
    task = build_tasks(4, 1, Difficulty(1, 1, 9, 0.0))[0]
    assert verifier.verify(task, task.reference).passed
    assert os.path.realpath(d) not in pool.registered_hidden()


def test_hidden_paths_are_accepted_and_nothing_under_them_is_visible():
    outer = tempfile.mkdtemp(prefix="harness-nested-", dir="/var/tmp")
    inner = os.path.join(outer, "results")
    os.makedirs(inner)
    os.chmod(outer, 0o755)
    os.chmod(inner, 0o755)
    secret = os.path.join(inner, "probe.jsonl")
    with open(secret, "w") as f:
        f.write("[42]\n")
    os.chmod(secret, 0o644)
    try:
        with pool.Sandbox(workers=1, hidden_paths=[outer, inner]) as sb:
            caps = sb.capabilities()
            assert not caps["degraded"], pool.missing_protections(caps)
            run = sb.run(pool.Program(f"def f(x):\n    return open({secret!r}).read()\n", (0,)))
            assert run.outcomes[0].kind == "exc" and run.outcomes[0].value == "FileNotFoundError", run
        with pytest.raises(ValueError, match="is not an existing directory"):
            pool.Sandbox(workers=1, hidden_paths=[os.path.join(outer, "gone")])
    finally:
        shutil.rmtree(outer)


def test_missing_protections_are_always_named():
    caps = {k: True for k in pool.PROTECTIONS}
    assert pool.missing_protections(caps) == ["unknown (capabilities report degraded with every protection present)"]
    caps.update(pid_namespace=False, seccomp=False)
    assert pool.missing_protections(caps) == ["pid_namespace", "seccomp"]


def test_default_verifier_works_from_a_checkout_outside_tmp():
    """The README's setting: a checkout under /var/tmp, results/ inside it registered as hidden."""
    import subprocess
    import sys

    from harness import PROJECT_ROOT
    copy = tempfile.mkdtemp(prefix="harness-checkout-", dir="/var/tmp")
    try:
        for name in ("harness", "arms", "families"):
            shutil.copytree(PROJECT_ROOT / name, os.path.join(copy, name),
                            ignore=shutil.ignore_patterns("__pycache__"))
        os.makedirs(os.path.join(copy, "results"))
        script = ("from harness import PROJECT_ROOT\nfrom harness.sandbox import pool, verifier\n"
                  "from families.code import Difficulty, build_tasks\n"
                  "assert str(PROJECT_ROOT).startswith('/var/tmp/'), PROJECT_ROOT\n"
                  "pool.hide(PROJECT_ROOT / 'results')\n"
                  "t = build_tasks(3, 1, Difficulty(1, 1, 9, 0.0))[0]\n"
                  "assert verifier.verify(t, t.reference).passed\n"
                  "v = verifier.verify(t, '    return open(%r).read()\\n' % str(PROJECT_ROOT / 'harness' / 'tasks' / 'splits.py'))\n"
                  "assert v.reason == 'error' and 'No such file' in v.detail, v\n"
                  "print('ok')\n")
        out = subprocess.run([sys.executable, "-c", script], cwd=copy, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    finally:
        shutil.rmtree(copy)
