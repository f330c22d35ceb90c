"""The runner: lock checks before the first step, sealed runs never rerun, exact budgets, and
kill -9 at any point resumes to records identical to an uninterrupted run."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from harness.core import records
from harness.running.runner import RunError, run, run_dir
from harness.spec.accounting import Spend, total
from harness.spec.kinds import kind_of
from harness.spec import deviations
from harness.spec.deviations import AUTOMATIC, read_deviations
from harness.spec.lock import LockError
from harness.spec.protocol import load_protocol
from tests.tiny_protocol import freeze_tiny, make_tiny_protocol


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    return freeze_tiny(tmp_path_factory.mktemp("runner"))


@pytest.fixture(scope="module")
def reference_run(frozen):
    """Arm C seed 1, uninterrupted: the records every resumed run must reproduce byte for byte."""
    proto, results = frozen
    return run(str(proto), "C", 1, results, progress=False, tracking=False)


def copy_frozen(frozen, dst: Path) -> Path:
    proto, results = frozen
    shutil.copytree(results / proto.name / "frozen", dst / proto.name / "frozen")
    return dst


def record_bytes(rdir: Path) -> dict[str, bytes]:
    names = ["records.jsonl", "ledger.jsonl", "experience.jsonl", "manifest.json"]
    out = {n: (rdir / n).read_bytes() for n in names if (rdir / n).exists()}
    out.update({p.name: p.read_bytes() for p in sorted((rdir / "checkpoints").iterdir())})
    return out


def test_never_frozen_is_refused(tmp_path):
    proto = make_tiny_protocol(tmp_path, name="unfrozen")
    results = tmp_path / "results"
    with pytest.raises(LockError, match=f"never frozen.*run `make freeze PROTOCOL=unfrozen RESULTS={results}` first"):
        run(str(proto), "A", 1, results, progress=False, tracking=False)


def test_unregistered_arm_or_seed_refused(frozen):
    proto, results = frozen
    with pytest.raises(RunError, match="seed 9 is not registered"):
        run(str(proto), "A", 9, results, progress=False, tracking=False)
    with pytest.raises(RunError, match="arm 'Z' is not registered"):
        run(str(proto), "Z", 1, results, progress=False, tracking=False)


def test_lock_drift_refused_before_the_first_step(frozen, tmp_path):
    proto, results = frozen
    drifted = tmp_path / proto.name
    shutil.copytree(proto, drifted)
    copy_frozen(frozen, tmp_path / "results")
    budget = drifted / "budget.yaml"
    budget.write_text(budget.read_text().replace("monitor_samples: 2", "monitor_samples: 3"))
    with pytest.raises(LockError, match=f"changed: protocols/{proto.name}/budget.yaml"):
        run(str(drifted), "A", 1, tmp_path / "results", progress=False, tracking=False)
    assert not run_dir(tmp_path / "results", proto.name, "A", 1).exists()  # nothing half-written


def test_sealed_run_is_not_rerun_and_budgets_are_exact(frozen, reference_run):
    proto, results = frozen
    assert records.is_sealed(reference_run)
    manifest = records.verify_sealed(reference_run)
    assert manifest["budget_consumed"]["learner_steps"] == manifest["budget_registered"]["learner_steps"]
    assert manifest["budget_consumed"]["solver_rollouts"] == manifest["budget_registered"]["solver_rollouts"]
    with pytest.raises(RunError, match="is sealed: a sealed run is never rerun"):
        run(str(proto), "C", 1, results, progress=False, tracking=False)
    # the final round keeps each probe's greedy completion and the sandbox's reason (the per-item view); no other
    recs = records.RecordLog(reference_run / "records.jsonl").records()
    rounds = [r for r in recs if r["kind"] == "round"]
    final = rounds[-1]["eval"]
    n = len(final["probe_passed"])
    assert len(final["probe_completions"]) == len(final["probe_reasons"]) == n
    assert [reason == "pass" for reason in final["probe_reasons"]] == [b == "1" for b in final["probe_passed"]]
    assert all("probe_completions" not in r["eval"] for r in rounds[:-1]) and "probe_completions" not in recs[0]["base_eval"]


def test_every_arm_consumes_the_registered_steps_and_rollouts(frozen, reference_run):
    """Every registered arm, run for real: the same learner steps (C's recovery inside them), the
    registered solver rollouts where the kind spends them, the same shared evaluation; and the
    manifest's ledger is the sum of the records' (start + rounds)."""
    proto, results = frozen
    protocol = load_protocol(proto)
    consumed = {"C": records.verify_sealed(reference_run)["budget_consumed"]}
    for arm in protocol.arm_names:
        if arm != "C":
            consumed[arm] = records.verify_sealed(run(str(proto), arm, 1, results, progress=False, tracking=False))["budget_consumed"]
    rounds, steps = 2, 3
    n_probe, n_between, monitor = 16, 8, 4 * 2  # the base and the last round score all 16, round 0 the subset of 8
    for arm, c in consumed.items():
        assert c["learner_steps"] == c["update_steps"] + c["recovery_steps"] == rounds * steps, arm
        assert c["solver_rollouts"] == (rounds * 4 * 4 if kind_of(protocol, arm).solver_rollouts else 0), arm
        assert c["probe_rollouts"] == 2 * n_probe + (rounds - 1) * n_between, arm
        assert c["monitor_rollouts"] == (rounds + 1) * monitor, arm
        recs = records.RecordLog(run_dir(results, protocol.name, arm, 1) / "records.jsonl").records()
        assert total(Spend.from_dict(r["budget"], arm) for r in recs).to_dict() == c
    assert consumed["A"]["seed_tasks"] == rounds * 24 and consumed["A"]["generated_tasks"] == 0
    assert consumed["P"]["generated_tasks"] == rounds * steps * 8 and consumed["P"]["seed_tasks"] == 0
    assert consumed["C"]["confirm_tasks"] == rounds * (8 + 8) and consumed["D"]["confirm_tasks"] == rounds * 8
    assert consumed["C"]["screen_rollouts"] == consumed["C"]["confirm_rollouts"] == rounds * 2 * 8
    assert consumed["B"]["confirm_rollouts"] == consumed["N"]["confirm_rollouts"] == 0
    # the negative control and D spend exactly B's rollouts: same proposals, same sampling seeds, same base
    assert consumed["N"]["solver_bytes"] == consumed["B"]["solver_bytes"] and consumed["N"]["seed_tasks"] == consumed["B"]["seed_tasks"]


def test_the_base_is_scored_once_at_freeze_and_read_by_every_run(frozen, tmp_path, monkeypatch):
    """Round -1 is frozen/base_eval.json (hashed in the lock), read by every run and never scored
    again; it equals a fresh evaluation of the frozen base; an edited copy is refused by the lock."""
    from harness.core import paths
    from harness.learning.checkpoint import load_base
    from harness.running import runner
    from harness.running.evaluation import evaluate_base
    from harness.spec.frozen import load_sets
    proto, _ = frozen
    results = copy_frozen(frozen, tmp_path / "results")
    protocol = load_protocol(proto)
    path = paths.base_eval_path(results, protocol.name)
    scored = json.loads(path.read_text())
    real, seeds = runner.evaluate, []

    def counted(model, probes, budget, seed, device, speed=None, keep_completions=False):
        seeds.append(seed)
        return real(model, probes, budget, seed, device, speed, keep_completions=keep_completions)
    monkeypatch.setattr(runner, "evaluate", counted)
    for arm, seed in (("A", 1), ("B", 2)):
        rdir = run(str(proto), arm, seed, results, progress=False, tracking=False, stop_after_round=0)
        start = records.RecordLog(rdir / "records.jsonl").records()[0]
        assert start["base_eval"] == scored["eval"] and start["base_eval_from"] == "frozen/base_eval.json", arm
        assert start["budget"] == scored["budget"]
    assert len(seeds) == 2  # round 0 of each run; the base was not evaluated again
    monkeypatch.undo()
    fresh, spend = evaluate_base(load_base(results, protocol, "cpu"), load_sets(results, protocol)["probe"],
                                 protocol.budget, "cpu")
    assert fresh == scored["eval"] and spend.to_dict() == scored["budget"]
    path.chmod(0o600)
    path.write_text(path.read_text().replace('"probe_pass_rate":', '"probe_pass_rate": 0.0, "was":', 1))
    with pytest.raises(LockError, match="base_eval.json"):
        run(str(proto), "A", 1, results, progress=False, tracking=False)


def test_the_runner_knows_no_arm_by_name():
    """Arms are dispatched by their registered kind; no arm letter appears in the runner's code."""
    source = (PROJECT_ROOT / "harness" / "running" / "runner.py").read_text()
    code = "\n".join(line.split("#")[0] for line in source.splitlines())
    for letter in ("A", "B", "C", "P", "N", "D"):
        assert not re.search(rf"""["']{letter}["']""", code), f"runner.py names arm {letter!r}"
    assert "comps[" not in code and "* G +" not in code


def test_a_round_that_charges_other_than_it_spent_is_refused(frozen, tmp_path, monkeypatch):
    """The runner counts every optimizer step and sampler row itself: an arm that takes a step it
    does not charge (here: one extra SFT step) is refused before its round is recorded."""
    proto, _ = frozen
    results = copy_frozen(frozen, tmp_path / "results")
    from arms import a_sft
    real = a_sft.train_steps

    def one_more_step(model, optimizer, examples, n_steps, **kw):
        stats = real(model, optimizer, examples, n_steps=n_steps + 1, **kw)
        return {**stats, "steps": n_steps}
    monkeypatch.setattr(a_sft, "train_steps", one_more_step)
    with pytest.raises(RunError, match="round 0: arm A: 4 optimizer steps were taken but 3 were charged"):
        run(str(proto), "A", 1, results, progress=False, tracking=False)
    recs = records.RecordLog(run_dir(results, load_protocol(proto).name, "A", 1) / "records.jsonl").records()
    assert [r["kind"] for r in recs] == ["start"]


def _start(proto: Path, results: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "harness", "run", f"protocol={proto}", "arm=C", "seed=1", f"results_dir={results}",
           "progress=off", "tracking=false"]
    return subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


KILL_POINTS = {
    # name: (condition on the run dir, extra delay in seconds) at which the job gets SIGKILL
    "start_record": (lambda d: _lines(d / "records.jsonl") >= 1, 0.0),
    "inside_round_1": (lambda d: _lines(d / "records.jsonl") >= 2, 0.4),
    "round_0_done": (lambda d: _lines(d / "records.jsonl") >= 2, 0.0),
}


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_kill_and_resume_gives_identical_records(frozen, reference_run, tmp_path, point):
    proto, _ = frozen
    results = copy_frozen(frozen, tmp_path / "results")
    rdir = run_dir(results, proto.name, "C", 1)
    job = _start(proto, results)
    deadline = time.time() + 240
    try:
        condition, delay = KILL_POINTS[point]
        while not (rdir.exists() and condition(rdir)):
            assert job.poll() is None, f"the job ended (rc {job.returncode}) before reaching kill point {point}"
            assert time.time() < deadline, f"kill point {point} not reached in time"
            time.sleep(0.02)
        time.sleep(delay)
        assert job.poll() is None, f"the job finished before the kill at {point}"
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert not records.is_sealed(rdir)
    resumed = run(str(proto), "C", 1, results, progress=False, tracking=False)
    # the resume is a deviation the runner logs itself: what, from which round, by whom
    logged = read_deviations(results, proto.name)["entries"]
    start = 0 if point == "start_record" else 1
    assert [(e["what"], e["who"], e["outcome_seen"]) for e in logged] == [(
        "C seed 1 started over from round 0 after an interruption before its first round completed" if start == 0
        else "C seed 1 resumed from round 1 after an interruption", AUTOMATIC, "no")]
    ref, got = record_bytes(reference_run), record_bytes(resumed)
    assert sorted(got) == sorted(ref)
    for name in ref:
        if name == "manifest.json":  # holds the wall clock and the deviations log's head; compare everything else
            a, b = json.loads(ref[name]), json.loads(got[name])
            a.pop("wall_clock_s"), b.pop("wall_clock_s")
            a["files"].pop("timing.log"), b["files"].pop("timing.log")
            assert a.pop("deviations_head") == {"entries": 0, "hash": "0" * 64}  # sealed with no deviation logged
            assert b.pop("deviations_head") == deviations.head(results, proto.name)  # sealed after its resume entry
            assert a == b
        else:
            assert got[name] == ref[name], f"{name} differs after a kill at {point}"


def test_execute_sets_the_thread_count_itself_as_the_pilots_spawned_runs_call_it(frozen, tmp_path, monkeypatch):
    """The pilot's runs call `execute` in spawned processes, not `run`: without the thread count set
    there, each job ran torch's default (every core) beside the others, several times slower and
    with records that depend on the machine's core count."""
    import torch

    from harness.core.settings import RunSettings
    from harness.running import runner
    from harness.spec.frozen import load_base_eval, load_sets
    proto, results = frozen
    p = load_protocol(proto)
    seen, real = [], runner.evaluate
    monkeypatch.setattr(runner, "evaluate", lambda *a, **k: (seen.append(torch.get_num_threads()), real(*a, **k))[1])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runner.execute(p, "A", 1, load_sets(results, p), results / p.name / "frozen" / "base.pt",
                       load_base_eval(results, p.name), tmp_path / "A" / "seed1",
                       RunSettings(results_dir=tmp_path, tracking=False, progress="off", torch_threads=1),
                       lock=None, stop_after_round=0)
    finally:
        torch.set_num_threads(before)
    assert seen == [1]


def test_intermediate_rounds_score_the_subset_and_change_nothing_else(frozen, tmp_path):
    """Rounds before the last score the registered subset; the training, the checkpoints and the
    last round's full evaluation are those of a run that scores every probe every round, and a
    subset round's outcomes are the full evaluation's at the subset's indices."""
    import dataclasses

    from harness.core import paths
    from harness.core.settings import RunSettings
    from harness.running.evaluation import intermediate_subset
    from harness.running.runner import frozen_base_eval, execute
    from harness.spec.frozen import load_sets, verify_frozen
    proto, results = frozen
    protocol = load_protocol(str(proto))
    n_probes, n_sub = protocol.tasks.probe.size, protocol.budget.intermediate_eval_probes
    assert 0 < n_sub < n_probes
    everything = dataclasses.replace(protocol, budget=dataclasses.replace(protocol.budget, intermediate_eval_probes=n_probes))
    lock = verify_frozen(protocol, results)
    sets, base = load_sets(results, protocol), paths.set_paths(results, protocol.name)["base"]
    out = {}
    for name, p in (("subset", protocol), ("all", everything)):
        settings = RunSettings(results_dir=results, tracking=False, progress="off")
        rdir = execute(p, "B", 1, sets, base, frozen_base_eval(results, protocol, lock), tmp_path / name, settings, lock=None)
        out[name] = [r for r in records.RecordLog(rdir / "records.jsonl").records() if r["kind"] == "round"]
        out[name + "_ckpt"] = [(rdir / "checkpoints" / f"round{r}.pt").read_bytes() for r in range(len(out[name]))]
    sub, full = out["subset"], out["all"]
    assert out["subset_ckpt"] == out["all_ckpt"]
    assert [r["train"] for r in sub] == [r["train"] for r in full]
    assert sub[-1]["eval"] == full[-1]["eval"] and sub[-1]["eval"]["probes_scored"] == "all"
    idx = intermediate_subset(n_probes, n_sub, protocol.seeds.task_seed)
    for r in range(len(sub) - 1):
        assert sub[r]["eval"]["probes_scored"] == "subset"
        assert sub[r]["eval"]["probe_passed"] == "".join(full[r]["eval"]["probe_passed"][i] for i in idx)
        assert sub[r]["budget"]["probe_rollouts"] == n_sub and full[r]["budget"]["probe_rollouts"] == n_probes
