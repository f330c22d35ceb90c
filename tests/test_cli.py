"""The command line as a user meets it: every refusal is one line on stderr with exit status 2 and
leaves nothing behind; a sealed run is refused; a corrupted checkpoint says how to recover; Ctrl-C
says how to resume; help answers without importing torch."""
import re
import shutil
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


def torch_cuda_usable() -> bool:
    import torch
    return torch.cuda.is_available()


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
    ("seed=13", ["seed='13'", "expected one of 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12", "seeds.yaml"]),
    ("seed=abc", ["seed='abc'", "expected one of 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"]),
    ("protocol=smok", ["protocol 'smok' not found", "known protocols"]),
    ("device=gpu", ["device='gpu'", "expected cpu, cuda or cuda:<index>"]),
    ("autocast=fp8", ["autocast='fp8'", "expected one of auto, bf16, off"]),
    ("budget.rounds=5", ["'budget.rounds' is frozen in protocols/main/budget.yaml"]),
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
    assert_refused(p, "not frozen", f"make freeze PROTOCOL=main RESULTS={results}")
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
    # the interpreter's start (torch's import) takes seconds alone and minutes beside a busy suite:
    # SIGINT goes once the harness's handler is in place, seen as its first stage's output
    deadline = time.time() + 600
    while time.time() < deadline and not paths.set_paths(tmp_path / "r", "tiny")["probe"].exists() and p.poll() is None:
        time.sleep(0.05)
    try:
        assert paths.set_paths(tmp_path / "r", "tiny")["probe"].exists(), "freeze never reached its sets stage"
        # pressed again only after a long wait, as a person would, never mid-exit (alone, freeze exits 0.7 s
        # after the first press)
        for _ in range(3):
            p.send_signal(signal.SIGINT)
            try:
                out, err = p.communicate(timeout=300)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            raise AssertionError("freeze went on through 3 SIGINTs, 300 s apart")
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
    for name in ("freeze", "run", "runs", "experiment", "readout", "archive", "audit", "verify", "conformance"):
        assert f"  {name} " in p.stdout
    for name in ("freeze", "experiment", "readout", "runs"):
        code = (f"import sys\nfrom harness.cli.main import main\ntry:\n    main(['{name}', '--help'])\n"
                "except SystemExit:\n    pass\nprint('heavy:', [m for m in ('torch', 'scipy') if m in sys.modules])")
        p = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
        assert "heavy: []" in p.stdout and "--results-dir" in p.stdout, p.stdout + p.stderr
    assert harness("nonsense").returncode == 2


def _nothing_left(results):
    assert not results.exists(), sorted(str(p) for p in results.rglob("*"))
    assert not (PROJECT_ROOT / ".hydra").exists() and not (PROJECT_ROOT / "multirun").exists()


@pytest.mark.skipif(torch_cuda_usable(), reason="a usable GPU is here: device=cuda is not a bad input")
@pytest.mark.parametrize("argv", [
    ["run", "device=cuda", "{results}"],
    ["run", "device=cuda:1", "{results}"],
    ["freeze", "--device", "cuda", "--results-dir", "{path}"],
    ["experiment", "--device", "cuda", "--results-dir", "{path}"],
])
def test_cuda_without_a_usable_gpu_is_one_line(tmp_path, argv):
    results = tmp_path / "results"
    argv = [a.format(results=f"results_dir={results}", path=results) for a in argv]
    p = harness(*argv)
    assert_refused(p, "device='cuda", "use device=cpu")
    _nothing_left(results)


def test_a_sweep_before_freeze_is_refused_before_hydra_makes_folders(tmp_path):
    results = tmp_path / "results"
    p = harness("run", "-m", "arm=A,B", "seed=1,2", f"results_dir={results}")
    assert_refused(p, "protocol 'main' is not frozen", f"make freeze PROTOCOL=main RESULTS={results}")
    _nothing_left(results)


@pytest.mark.parametrize("args, words", [
    (["seed=range(1,3)"], ["seed=1,2 is a sweep: add -m"]),
    (["arm=choice(A,B)"], ["arm=A,B is a sweep: add -m"]),
    (["-m", "seed=range(1,16)"], ["seed='13'", "expected one of 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"]),
    (["-m", "arm=choice(A,Z)"], ["arm='Z'", "expected one of A, B, C, D, N, P"]),
    (["arm='Z'"], ["arm='Z'"]),              # quoted: Hydra's value, quotes gone
    (['arm="B"'], ["protocol 'main' is not frozen"]),  # a quoted registered arm is accepted
    (["arm=choice(A"], ["arm=choice(A"]),    # what Hydra cannot parse, in one line
])
def test_hydra_sweep_syntax_is_read_as_hydra_reads_it(tmp_path, args, words):
    results = tmp_path / "results"
    assert_refused(harness("run", *args, f"results_dir={results}"), *words)
    _nothing_left(results)


def test_overrides_are_parsed_as_hydra_parses_them():
    from harness.cli.hydra_app import _overrides
    assert _overrides(["seed=range(1,3)", "arm=choice(A,B)", "protocol='smoke'", "tracking=false", "hydra.x=1"]) == {
        "seed": ["1", "2"], "arm": ["A", "B"], "protocol": ["smoke"], "tracking": ["false"]}
    assert _overrides(["seed=1,2", "arm=A", "results_dir=/tmp/a b"]) == {
        "seed": ["1", "2"], "arm": ["A"], "results_dir": ["/tmp/a b"]}


@pytest.mark.parametrize("args, words", [
    (["--arm", "P", "--seed", "2"], ["not --arm P --seed 2", "python -m harness run arm=P seed=2"]),
    (["--arm=P"], ["not --arm=P", "run arm=P"]),
    (["P"], ["not P"]),
])
def test_argparse_style_flags_are_refused_with_the_right_spelling(tmp_path, args, words):
    results = tmp_path / "results"
    assert_refused(harness("run", *args, f"results_dir={results}"), *words)
    _nothing_left(results)


@pytest.mark.parametrize("args, words", [
    (["--launcher", "slurm"], ["--launcher slurm: expected one of joblib, basic, submitit_local, submitit_slurm"]),
    (["--launcher", "submitit_slurm"], ["no SLURM here (sbatch is not on PATH)"]),
    (["arm=B"], ["arm=B: `runs` sets the protocol, arms, seeds"]),
    (["budget.rounds=5"], ["'budget.rounds' is frozen"]),
])
def test_runs_refuses_a_launcher_it_cannot_use_and_what_it_sets_itself(tmp_path, args, words):
    if "submitit_slurm" in args and shutil.which("sbatch"):
        pytest.skip("SLURM is here: submitit_slurm is not a bad input")
    results = tmp_path / "results"
    assert_refused(harness("runs", "--results-dir", str(results), *args), *words)
    _nothing_left(results)


def test_experiment_on_a_read_out_tree_says_where_the_report_is_and_the_verdict(tmp_path, capsys):
    """Run again once read out, `experiment` changes nothing and ends as a finished one does: the
    report's and the per-item view's paths, then the verdict paragraph as the last lines."""
    from harness.cli.main import _verdict_line, main
    from harness.readout.analyzer import readout
    from tests.fixtures_runs import build_tree
    tree = build_tree(tmp_path)
    said: list[str] = []
    out = readout(tree.protocol_dir, tree.results_dir, out=said.append)
    # the readout says each of its stages as it starts and ends, in order
    stages = ["1/4 runs", "2/4 analysis", "3/4 design", "4/4 report"]
    assert [line.split(":")[0] for line in said if not re.search(r"still running", line)] == [
        f"[readout] {s}" for s in stages for _ in range(2)]
    assert said[0] == "[readout] 1/4 runs: verifying the 6 sealed runs (seals, chains, checkpoints)"
    assert all(re.fullmatch(r"\[readout\] \d/4 \w+: done in \d+ s", line) for line in said[1::2])
    before = sorted((p, p.stat().st_mtime_ns) for p in tree.results_dir.rglob("*"))
    status = main(["experiment", "--protocol", str(tree.protocol_dir), "--results-dir", str(tree.results_dir)])
    printed = capsys.readouterr().out
    assert status == 0 and "[experiment] fixture is already read out; `make audit" in printed
    assert f"[experiment] report:  {out / 'report.md'} and {out / 'report.html'}" in printed
    assert f"[experiment] probes:  {out / 'items.html'}" in printed
    assert printed.endswith(_verdict_line(out) + "\n") and _verdict_line(out).startswith("Verdict: keep_both")
    assert sorted((p, p.stat().st_mtime_ns) for p in tree.results_dir.rglob("*")) == before
