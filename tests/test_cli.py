"""The command line as a user meets it: every refusal is one line on stderr with exit status 2 and
leaves nothing behind; a sealed run is refused; a corrupted checkpoint says how to recover; Ctrl-C
says how to resume; help answers without importing torch."""
import signal
import subprocess
import sys
import time

import pytest

from harness import PROJECT_ROOT
from harness.cli.main import guarded
from harness.core import paths, records
from harness.core.errors import HarnessError
from harness.running.runner import run
from tests.tiny_protocol import freeze_tiny, make_tiny_protocol


def harness(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def assert_refused(p, *words):
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("override, words", [
    ("arm=Z", ["arm='Z'", "expected one of A, B, C, D, N, P", "arms.yaml"]),
    ("seed=9", ["seed='9'", "expected one of 1, 2", "seeds.yaml"]),
    ("seed=abc", ["seed='abc'", "expected one of 1, 2"]),
    ("protocol=smok", ["protocol 'smok' not found", "known protocols"]),
    ("device=gpu", ["device='gpu'", "expected cpu, cuda or cuda:<index>"]),
    ("autocast=fp8", ["autocast='fp8'", "expected one of auto, bf16, off"]),
    ("budget.rounds=5", ["'budget.rounds' is frozen in protocols/smoke/budget.yaml"]),
    ("lr=0.1", ["unknown run setting 'lr'"]),
])
def test_a_bad_override_is_one_line_and_leaves_nothing(tmp_path, override, words):
    results = tmp_path / "results"
    p = harness("run", override, f"results_dir={results}")
    assert_refused(p, *words)
    assert not results.exists() and not (PROJECT_ROOT / ".hydra").exists() and not (PROJECT_ROOT / "run.log").exists()


def test_the_config_is_checked_when_composed(tmp_path):
    assert_refused(harness("run", "--cfg", "job", "arm=Z"), "arm='Z'")
    assert_refused(harness("run", "-m", "arm=A,Z", f"results_dir={tmp_path}"), "arm='Z'")


def test_a_run_before_freeze_names_the_freeze_command_with_its_results_dir(tmp_path):
    results = tmp_path / "elsewhere"
    p = harness("run", "arm=B", f"results_dir={results}")
    assert_refused(p, "not frozen", f"make freeze PROTOCOL=smoke RESULTS={results}")
    assert not results.exists()


def test_make_run_refusals_are_one_line(tmp_path):
    """The Makefile passes ARM, SEED, DEVICE and RESULTS through to the same checks."""
    for var in ("ARM=D", "SEED=9", "DEVICE=gpu"):
        p = subprocess.run(["make", "-s", "run", var, f"RESULTS={tmp_path}/r"], cwd=PROJECT_ROOT, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode != 0 and "Traceback" not in p.stderr
        assert [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")], p.stderr
    assert not (tmp_path / "r").exists()


def test_sealed_and_corrupted_runs(tmp_path):
    proto, results = freeze_tiny(tmp_path, seeds={"run_seeds": [1]},
                                 decision={"spread_rule": {"test": "range", "multiplier": 1.0}})
    common = [f"protocol={proto}", f"results_dir={results}", "tracking=false"]
    p = harness("run", "arm=A", "seed=1", *common)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "[run] tiny A seed 1: started" in p.stdout and "[run] tiny A seed 1: sealed in" in p.stdout
    assert_refused(harness("run", "arm=A", "seed=1", *common), "is sealed", "never rerun")
    assert not (results / ".hydra").exists()

    rdir = run(str(proto), "B", 1, results, progress=False, tracking=False, stop_after_round=0)  # a crashed run
    ckpt = rdir / "checkpoints" / "round0.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:-10] + b"0123456789")
    p = harness("run", "arm=B", "seed=1", *common)
    assert_refused(p, "checkpoint hash does not match", f"remove {rdir}", "run the same command again")
    assert not records.is_sealed(rdir)


def _as_from_a_terminal():
    """The child's SIGINT as a shell started from a terminal leaves it: default action, not blocked (the
    suite's own process runs pools and sandboxes that may not leave its signal state as it found it)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_says_how_to_resume(tmp_path, capsys):
    def interrupted(argv):
        raise KeyboardInterrupt
    assert guarded(interrupted, []) == 130
    assert "interrupted: run the same command to resume" in capsys.readouterr().err

    def refused(argv):
        raise HarnessError("seed 9 is not registered")
    assert guarded(refused, []) == 2
    assert capsys.readouterr().err == "error: seed 9 is not registered\n"

    proto = make_tiny_protocol(tmp_path, model={"base": {"steps": 100_000}})  # interrupted while it builds the base
    p = subprocess.Popen([sys.executable, "-m", "harness", "freeze", "--protocol", str(proto), "--results-dir",
                          str(tmp_path / "r")], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_as_from_a_terminal)
    deadline = time.time() + 60
    while time.time() < deadline and not paths.set_paths(tmp_path / "r", "tiny")["probe"].exists():
        time.sleep(0.05)
    try:
        for _ in range(3):  # pressed again only after a long wait, as a person would (never mid-exit)
            p.send_signal(signal.SIGINT)
            try:
                out, err = p.communicate(timeout=30)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            raise AssertionError("freeze went on through 3 SIGINTs, 30 s apart")
    finally:
        if p.poll() is None:
            p.kill()  # never leave a 100k-step base build eating a core of the suite
            p.communicate()
    assert p.returncode == 130, f"exit status {p.returncode}\n{out}{err}"
    assert "interrupted: run the same command to resume" in err and "Traceback" not in err
    assert not paths.lock_path(tmp_path / "r", "tiny").exists()


def test_help_lists_every_command_without_importing_torch():
    code = ("import sys, contextlib, io\nfrom harness.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n    main(['--help'])\n"
            "heavy = [m for m in ('torch', 'scipy', 'pandas', 'mlflow', 'hydra') if m in sys.modules]\n"
            "print(out.getvalue()); print('heavy:', heavy)")
    p = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert "heavy: []" in p.stdout, p.stdout + p.stderr
    for name in ("freeze", "run", "runs", "experiment", "readout", "archive", "audit", "verify"):
        assert f"  {name} " in p.stdout
    for name in ("freeze", "experiment", "readout", "runs"):
        code = (f"import sys\nfrom harness.cli.main import main\ntry:\n    main(['{name}', '--help'])\n"
                "except SystemExit:\n    pass\nprint('heavy:', [m for m in ('torch', 'scipy') if m in sys.modules])")
        p = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
        assert "heavy: []" in p.stdout and "--results-dir" in p.stdout, p.stdout + p.stderr
    assert harness("nonsense").returncode == 2
