"""The exec verifier: verdicts and their reasons, per-test outcomes, order, counters, reproducibility,
the trusted-side parser, the module-level API, the degraded-mode refusal and the `verify` CLI."""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from harness.sandbox import verifier as verifier_module
from harness.sandbox.pool import Limits, Program, Sandbox, is_plain, parse_results, plain_equal
from harness.sandbox.verifier import REASONS, Verifier, load_completions
from families.code import Task, build_tasks, with_expected
from harness.tasks.contract import END
from harness.tasks.splits import save_tasks

ADD3 = with_expected(Task("arith", (("add", 3),), (0,), (1, 2, 3)))
UNIQ = with_expected(Task("string", (("uniq", None),), (0,), ("thequickbrownfxjmpsvlazydg", "abcdefghij", "zyxwvutsrq")))


@pytest.fixture(scope="module")
def verifier():
    with Verifier(workers=2, limits=Limits(wall_s=5.0, cpu_s=1)) as v:
        yield v


def test_references_pass_and_verdicts_keep_the_order_of_the_pairs(verifier):
    tasks = build_tasks(11, 24)
    assert {t.template for t in tasks} == {"arith", "string", "list"}
    broken = {3: ("    return None\n", "wrong_answer"), 10: ("    return 1 // 0\n", "error"),
              17: ("    return (\n", "syntax"), 20: ("    while True:\n        pass\n", "timeout")}
    pairs = [(t, broken[i][0] if i in broken else t.reference) for i, t in enumerate(tasks)]
    verdicts = verifier.verify_many(pairs)
    assert [v.reason for v in verdicts] == [broken[i][1] if i in broken else "pass" for i in range(len(tasks))]
    assert all(v.tests == (True,) * len(t.inputs) for v, t in zip(verdicts, tasks) if v.passed)


def test_per_test_outcomes_and_a_bounded_detail(verifier):
    v = verifier.verify(ADD3, "    return x + 3 if x != 2 else 'x' * 1000\n")
    assert (v.passed, v.reason, v.tests) == (False, "wrong_answer", (True, False, True))
    assert v.detail.startswith("test 1: got 'xxx") and len(v.detail) <= 300
    v = verifier.verify(ADD3, "    if x == 3:\n        raise KeyError('k')\n    return x + 3\n")
    assert (v.reason, v.tests) == ("error", (True, True, False)) and "KeyError" in v.detail


def test_a_timeout_keeps_the_tests_reported_before_it(verifier):
    v = verifier.verify(ADD3, "    while x == 3:\n        pass\n    return x + 3\n")
    assert (v.reason, v.tests) == ("timeout", (True, True, False))


def test_types_are_compared_exactly(verifier):
    assert verifier.verify(ADD3, "    return float(x + 3)\n").reason == "wrong_answer"
    lst = with_expected(Task("list", (("sort", None),), (0,), ([3, 1, 2], [])))
    assert verifier.verify(lst, "    return sorted(xs)\n").passed
    assert verifier.verify(lst, "    return tuple(sorted(xs))\n").reason == "bad_output"
    assert plain_equal({"a": [1, 2.5, None]}, {"a": [1, 2.5, None]})
    assert not plain_equal(1, True) and not plain_equal(1, 1.0) and not plain_equal([1], [1, 2])
    assert not plain_equal({"a": 1}, {"b": 1})


def test_a_completion_is_read_up_to_the_end_byte(verifier):
    assert verifier.verify(ADD3, "    return x + 3\n" + END + "this is not python (").passed


def test_counters_count_every_verdict_by_reason(verifier):
    before = verifier.counters
    assert set(before) == set(REASONS)
    verifier.verify_many([(ADD3, "    return x + 3\n"), (ADD3, "    return x\n"), (ADD3, "    return x\n"),
                          (ADD3, "    import os\n    os._exit(0)\n")])
    after = verifier.counters
    delta = {r: after[r] - before[r] for r in REASONS}
    assert delta == {**dict.fromkeys(REASONS, 0), "pass": 1, "wrong_answer": 2, "no_result": 1}


def test_verdicts_are_reproducible_across_verifiers():
    """Fixed hash seed and random seed: a completion that depends on set order or `random` gets the
    same per-test outcomes from two separate verifiers."""
    pairs = [(UNIQ, '    return "".join(set(s))\n'), (UNIQ, '    return "".join(sorted(set(s)))\n'),
             (ADD3, "    import random\n    return x + random.randint(2, 4)\n")]
    runs = []
    for _ in range(2):
        with Verifier(workers=1) as v:
            runs.append([(x.reason, x.tests) for x in v.verify_many(pairs)])
    assert runs[0] == runs[1]
    assert runs[0][1] == ("pass", (True, True, True))


def test_bad_requests_get_clear_errors(verifier):
    with pytest.raises(TypeError, match="completion must be a str"):
        verifier.verify(ADD3, b"    return x\n")
    with pytest.raises(ValueError, match="inputs but 0 expected"):
        verifier.verify(Task("arith", (("add", 3),), (0,), (1, 2)), "    return x\n")
    with pytest.raises(ValueError, match="no test inputs"):
        verifier.verify(Task("arith", (("add", 3),), (0,), ()), "    return x\n")
    with pytest.raises(ValueError, match="Limits.wall_s must be a positive number"):
        Limits(wall_s=0)
    with pytest.raises(ValueError, match="Limits.cpu_s must be an int"):
        Limits(cpu_s=1.5)
    with pytest.raises(ValueError, match="hidden path '/no/such/dir' is not an existing directory"):
        Sandbox(workers=1, hidden_paths=["/no/such/dir"])


def test_the_parser_accepts_only_the_protocol():
    good = b'{"i":0,"out":4}\n{"i":1,"exc":"KeyError","errno":null,"msg":"k"}\n{"i":2,"bad":"set"}\n{"done":3}\n'
    stage, _, outs, done, malformed = parse_results(good, 3)
    assert stage is None and done and malformed == ""
    assert [o.kind for o in outs] == ["out", "exc", "bad"] and outs[0].value == 4
    # a partial last line (the child was killed mid-write) is dropped, not an error
    assert parse_results(b'{"i":0,"out":4}\n{"i":1,"ou', 3)[2:] == ([outs[0], None, None], False, "")
    for bad, why in [(b'{"i":1,"out":4}\n', "where 0 was due"), (b'{"i":0,"out":NaN}\n', "non-finite"),
                     (b'{"done":3}\n', "after 0 of 3"), (b'[1]\n', "not an object"),
                     (b'{"i":0,"out":4,"x":1}\n', "fields"), (b'{"i":0,"out":' + b"[" * 40 + b"]" * 40 + b"}\n", "deeper"),
                     (b'{"i":0,"out":4}\n{"done":1}\n{"i":0,"out":4}\n', "after the final line"),
                     (b'\xff\n', "decode")]:
        n = 1 if b'"done":1' in bad else 3
        assert why in parse_results(bad, n)[4], bad
    assert parse_results(b'{"stage":"compile","exc":"SyntaxError","errno":null,"msg":"m"}\n', 2)[1] == "compile"
    assert is_plain({"a": [1, None, "x", 2.5, True]}) and not is_plain((1,)) and not is_plain(float("nan"))
    assert not is_plain({1: 2})


def test_the_sandbox_reports_a_run_and_isolates_the_hash_seed():
    with Sandbox(workers=1, hash_seed=7) as sb:
        assert sb.capabilities()["hash_seed"] == "7"
        run = sb.run(Program("import os\ndef f(x):\n    return [x, os.getcwd().startswith('/tmp/')]\n", (1, "a")))
        assert run.fate == "ended" and run.done and [o.value for o in run.outcomes] == [[1, True], ["a", True]]
        with pytest.raises(ValueError, match="expected Program objects"):
            sb.run_many(["def f(x): return x"])
    with pytest.raises(RuntimeError, match="the pool is closed"):
        sb.run(Program("def f(x):\n    return x\n", (1,)))


def test_degraded_mode_is_refused_unless_allowed():
    with pytest.raises(RuntimeError, match="allow_degraded=True"):
        Sandbox(workers=1, namespaces=False)
    with Sandbox(workers=1, namespaces=False, allow_degraded=True, limits=Limits(wall_s=5.0, cpu_s=1)) as sb:
        caps = sb.capabilities()
        assert caps["degraded"] and not caps["pid_namespace"] and caps["drop_uid"] and caps["uid_kill"]
        ok = sb.run(Program("def f(x):\n    return x + 1\n", (1,)))
        assert [o.value for o in ok.outcomes] == [2]
        assert sb.run(Program("def f(x):\n    while True: pass\n", (1,))).fate == "cpu_limit"


def test_module_level_verify_starts_lazily_and_shuts_down():
    verifier_module.shutdown()
    assert verifier_module.verify(ADD3, "    return x + 3\n").passed
    first = verifier_module.default_verifier()
    assert [v.passed for v in verifier_module.verify_many([(ADD3, "    return x\n"), (ADD3, "    return x + 3\n")])] \
        == [False, True]
    assert verifier_module.default_verifier() is first
    verifier_module.shutdown()
    assert verifier_module._default is None


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_load_completions_pairs_by_position_index_or_hash(tmp_path):
    tasks = build_tasks(5, 3)
    c = tmp_path / "c.jsonl"
    _write_jsonl(c, [{"completion": "a"}, {"completion": "b"}, {"completion": "c"}])
    assert load_completions(c, tasks) == [(0, "a"), (1, "b"), (2, "c")]
    _write_jsonl(c, [{"completion": "x", "index": 2}, {"completion": "y", "canonical_hash": tasks[0].canonical_hash}])
    assert load_completions(c, tasks) == [(2, "x"), (0, "y")]
    for rows, msg in [([{"completion": "a"}], "has 1 completions but T has 3 tasks"),
                      ([{"completion": 5}], 'c.jsonl:1: expected an object with a string "completion"'),
                      ([{"completion": "a", "index": 3}], "index 3 is not a task index in [0, 3) of T"),
                      ([{"completion": "a", "canonical_hash": "00"}], "matches no task in T"),
                      ([{"completion": "a", "index": 1, "canonical_hash": tasks[0].canonical_hash}], "different tasks")]:
        _write_jsonl(c, rows)
        with pytest.raises(ValueError, match=msg.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            load_completions(c, tasks, "T")
    c.write_text('{"completion": "a"}\nnot json\n')
    with pytest.raises(ValueError, match="c.jsonl:2: not JSON"):
        load_completions(c, tasks)


def test_cli_verify_prints_one_verdict_per_line(tmp_path):
    tasks = build_tasks(9, 4)
    t, c = tmp_path / "tasks.jsonl", tmp_path / "completions.jsonl"
    save_tasks(t, tasks)
    _write_jsonl(c, [{"completion": tk.reference if i != 1 else "    return None\n"} for i, tk in enumerate(tasks)])
    cmd = [sys.executable, "-m", "harness", "verify", "--tasks", str(t), "--completions", str(c), "--workers", "2"]
    out = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["index"], r["passed"], r["reason"]) for r in rows] == \
        [(0, True, "pass"), (1, False, "wrong_answer"), (2, True, "pass"), (3, True, "pass")]
    assert rows[0]["canonical_hash"] == tasks[0].canonical_hash and len(rows[0]["tests"]) == len(tasks[0].inputs)
    assert json.loads(out.stderr.strip().splitlines()[-1])["counters"]["pass"] == 3
    _write_jsonl(c, [{"completion": "    return 0\n"}])
    bad = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and str(c) in bad.stderr and str(t) in bad.stderr and bad.stdout == ""


def test_verifier_does_not_import_torch():
    code = "import sys, harness.sandbox.verifier, harness.sandbox.gate; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    assert out.stdout.strip() == "False", out.stderr


def test_benchmark_reports_all_methods_and_they_agree():
    from benchmarks import bench_verifier
    figures = bench_verifier.run(n=8, workers=2, chunks=2)
    assert set(figures["verdicts_per_s"]) == {"mp_spawn", "mp_fork", "bare_fork", "sandbox"}
    assert all(r > 0 for r in figures["verdicts_per_s"].values())
    assert figures["methods_agree"] and figures["pass_rate"] == 0.75
    assert figures["sandbox_over_mp_process"] > 0 and figures["sandbox_over_bare_fork"] > 0


def test_workers_die_with_their_parent():
    """A harness killed with SIGKILL takes its sandbox workers along (parent-death signal)."""
    code = ("import sys, time\nfrom harness.sandbox.pool import Sandbox\nsb = Sandbox(workers=2)\n"
            "print(*[w.caps['pid'] for w in sb._workers], flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    proc.kill()
    proc.wait()
    deadline = time.time() + 30  # a wait, not a bound: it ends as soon as they are gone
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie is dead; its reaper may be slow


def test_a_pool_started_from_a_finished_thread_keeps_working():
    box = []
    t = threading.Thread(target=lambda: box.append(Verifier(workers=1)))
    t.start()
    t.join()
    with box[0] as v:
        time.sleep(0.2)
        assert v.verify(ADD3, "    return x + 3\n").passed
