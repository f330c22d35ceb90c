"""`make freeze`: materialised sets, a deterministic base, loud warnings, and no re-freeze of
changed content."""
import json
import re
import shutil

import pytest

from families.code import program_class
from harness.core.paths import PREREG_NAME, frozen_dir, set_paths
from harness.core.records import sha256_file
from harness.freeze.conformance import PROPERTIES
from harness.freeze.freeze import freeze
from harness.spec.frozen import load_sets, verify_frozen
from harness.spec.lock import LockError
from harness.spec.protocol import load_protocol
from harness.tasks.splits import build_splits
from tests.tiny_protocol import make_tiny_protocol


def run_freeze(proto, results):
    lines = []
    out = freeze(str(proto), results, out=lines.append)
    return out, "\n".join(lines)


def test_freeze_materialises_the_registered_splits_and_is_idempotent(tmp_path):
    proto = make_tiny_protocol(tmp_path)
    results = tmp_path / "results"
    first, text = run_freeze(proto, results)
    p = load_protocol(proto)
    sets = load_sets(results, p)
    want = build_splits(p.family, p.seeds.task_seed, p.split_sizes(), p.guard,
                        p.tasks.leak_guard.max_held_out_fraction, confirm_batch=p.tasks.confirm.per_round)
    for split in want:
        assert [x.canonical_hash for x in sets[split]] == [x.canonical_hash for x in want[split]], split
    assert sets["probe"][0].expected == want["probe"][0].expected  # auditors see what was probed, answers included
    assert "base probe pass rate" in text and "P(keep_both) at the sesoi" in text and "P(commit)" in text
    assert "split mix by depth, template and phrasing" in text and "seed_set: covers" in text
    # beside it, each split's mix by program class, and the constant-free programs held out against their cap
    assert "split mix by program class" in text and "constant_free programs held out" in text
    # before any of it, the conformance suite on the family: every property passed, the report frozen and locked
    assert text.index("conformance of the task family 'code' version 1") < text.index("split mix by")
    assert text.count("[freeze]   pass  ") == 7 and "FAIL" not in text
    report = json.loads((frozen_dir(results, p.name) / "conformance.json").read_text())
    assert [c["property"] for c in report["checks"] if c["ok"]] == list(PROPERTIES)
    assert "frozen/conformance.json" in first["lock"]["entries"] and "recipe/family" in first["lock"]["entries"]
    free_row = next(line for line in text.splitlines() if line.startswith("[freeze] constant_free "))
    assert [int(n) for n in free_row.split("|")[1].split()[::2]] == [
        sum(program_class(t) == "constant_free" for t in want[split]) for split in want]
    assert "same steps with other constants: train" in text
    base = set_paths(results, p.name)["base"].read_bytes()
    # the pre-registration: written under frozen/, hashed in the lock, in the registries' vocabulary
    prereg = frozen_dir(results, p.name) / PREREG_NAME
    text = prereg.read_text()
    assert first["lock"]["entries"][f"frozen/{PREREG_NAME}"] == sha256_file(prereg)
    for heading in ("## 1. Hypotheses", "## 2. Design", "## 3. Sampling plan", "## 4. Variables", "## 5. Analysis plan",
                    "## 6. Inference criteria", "## 7. Data exclusion and missing data", "## 8. Deviations"):
        assert heading in text, heading
    assert "**H B-A**: arm B ends with a higher probe pass rate than arm A" in text and "P(keep_both)" in text
    pilot = json.loads((frozen_dir(results, p.name) / "pilot.json").read_text())
    assert (f"ran before the lock on the **calibration split**: {pilot['calibration']['n_items']} tasks" in text
            and f"(pass rate {100 * first['base_pass_rate']:.1f}%)" in text)
    # readable by the group and others like the readout: the document 0444, the folders above it passable;
    # the answers and the lock stay owner-only
    mode = lambda q: q.stat().st_mode & 0o777  # noqa: E731
    assert mode(prereg) == 0o444
    assert all(mode(d) & 0o011 == 0o011 for d in (results, results / p.name, frozen_dir(results, p.name)))
    assert mode(frozen_dir(results, p.name) / "sets") == 0o700 and mode(frozen_dir(results, p.name) / "FROZEN.lock") == 0o600
    again, _ = run_freeze(proto, results)  # same content: a no-op that verifies
    assert again["lock"]["lock_hash"] == first["lock"]["lock_hash"]
    shutil.rmtree(results)
    run_freeze(proto, results)  # rebuilt from the recipe: the same bytes
    assert set_paths(results, p.name)["base"].read_bytes() == base
    assert prereg.read_text() == text  # a pure function of the protocol and the design analysis
    prereg.chmod(0o644)  # as a tamperer would
    prereg.write_text(text + "an edit after freeze\n")
    with pytest.raises(LockError, match=PREREG_NAME):
        run_freeze(proto, results)


def test_refreezing_changed_content_is_refused(tmp_path):
    proto = make_tiny_protocol(tmp_path)
    results = tmp_path / "results"
    run_freeze(proto, results)
    decision = proto / "decision.yaml"
    decision.write_text(decision.read_text().replace("sesoi: 0.05", "sesoi: 0.04"))
    with pytest.raises(LockError, match="a changed protocol is a new protocol"):
        run_freeze(proto, results)


def test_freeze_refuses_a_base_off_its_range_and_warns_when_underpowered(tmp_path):
    from harness.core import paths
    from harness.spec.protocol import ProtocolError
    proto = make_tiny_protocol(tmp_path, model={"base_pass_range": [0.9, 1.0]})
    lines = []
    with pytest.raises(ProtocolError, match=r"model.yaml: key 'base_pass_range': the base passes 0\.\d{3} of the "
                                            r"pilot's calibration split, outside the registered range \[0.9, 1.0\]"):
        freeze(str(proto), tmp_path / "results", out=lines.append)
    assert not paths.lock_path(tmp_path / "results", "tiny").exists()
    # refused as soon as the base is measured: no arm's round is run for a freeze that cannot pass
    assert "base on the calibration split" in "\n".join(lines) and "one round of every arm" not in "\n".join(lines)
    _, text = run_freeze(make_tiny_protocol(tmp_path / "plain"), tmp_path / "results2")
    assert "WARNING: underpowered" in text
    # the tiny protocol inherits smoke's stated override: frozen, with the reason printed and pre-registered
    assert "registered below the power 0.8 by the stated override" in text
    prereg = (tmp_path / "results2" / "tiny" / "frozen" / "PREREGISTRATION.md").read_text()
    assert "**Registered below the power criterion, a deviation stated before any run.**" in prereg
    assert "a pipeline check of the harness" in prereg


def test_freeze_refuses_an_underpowered_design_without_a_stated_reason(tmp_path):
    """decision.yaml underpowered_override: null, and a design below the registered power: one line
    naming each figure that misses and what to do."""
    from harness.freeze.freeze import RegistrationError, check_registration, power_report
    p = load_protocol(make_tiny_protocol(tmp_path, decision={"underpowered_override": None}))
    report = power_report(p)
    short = report["registration"]["shortfalls"]
    assert any(s.startswith("designed P(keep_both | sesoi) 0.") for s in short)
    with pytest.raises(RegistrationError) as err:
        check_registration(p, report, out=lambda *a: None)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("freeze tiny: the design misses the registered power 0.8: designed P(")
    assert "decision.yaml states no underpowered_override; to register it anyway write the underpowered_override " \
           "printed above into" in msg and "tools.design_grid" in msg
    check_registration(p, {"registration": {"shortfalls": [], "override": None}})  # a powered design passes


def test_freeze_refuses_a_positive_control_below_the_sesoi_in_its_pilot(tmp_path):
    """P registered with a training of its own (arms.yaml: 5 steps a round, not the contenders' 3, at lr
    0, so it stays the base): the pilot runs it under that registration (the runner refuses a round that
    breaks it), its gain over the base on the calibration split is exactly 0, and freeze, with no stated
    override, refuses in one line naming the pilot's P - base, the split and the sesoi; nothing is locked."""
    import json

    from harness.core import paths
    from harness.freeze.freeze import RegistrationError
    proto = make_tiny_protocol(tmp_path, arms={"P": {"learner_steps_per_round": 5, "lr": 0.0}},
                               decision={"underpowered_override": None})
    results = tmp_path / "results"
    lines = []
    with pytest.raises(RegistrationError) as err:
        freeze(str(proto), results, out=lines.append)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("freeze tiny: the design misses the registered power 0.8: ")
    assert "; pilot P - base on the calibration split +0.0 pts (after round 1, mean of 2 seeds), below the sesoi 5.0 pts" in msg
    assert "give the positive control a training budget that reaches the sesoi in the pilot (arms.yaml)" in msg
    assert re.search(r"; pilot P - A on the calibration split [-+]\d+\.\d pts \(after round 1, mean of 2 seeds\), below "
                     r"its check's margin 3\.0 pts: the registered check that P beats A is more likely to fail", msg)
    data = json.loads(paths.pilot_path(results, "tiny").read_text())
    assert data["arms"]["P"]["vs_base"] == 0.0
    assert all(s["passed"] == data["base"]["passed"] for s in data["arms"]["P"]["seeds"].values())
    assert not paths.lock_path(results, "tiny").exists() and not paths.freeze_summary_path(results, "tiny").exists()


def test_an_override_must_be_a_stated_reason(tmp_path):
    from harness.spec.protocol import ProtocolError
    with pytest.raises(ProtocolError, match="key 'underpowered_override': expected null, or the stated reason"):
        load_protocol(make_tiny_protocol(tmp_path, decision={"underpowered_override": "yes"}))


def test_a_failed_freeze_leaves_no_lock_and_a_rerun_reuses_the_base(tmp_path, monkeypatch):
    """The lock is written last: a freeze that dies after building the base (here: while scoring it
    in the sandbox) leaves no lock; running it again reuses the base built by the same recipe."""
    import harness.freeze.base as fz
    from harness.core import paths
    proto = make_tiny_protocol(tmp_path)
    results = tmp_path / "results"

    def dies(*a, **k):
        raise KeyboardInterrupt  # as if killed mid-freeze
    monkeypatch.setattr(fz, "base_eval_record", dies)
    with pytest.raises(KeyboardInterrupt):
        run_freeze(proto, results)
    name = load_protocol(proto).name
    assert not paths.lock_path(results, name).exists()
    assert not paths.freeze_summary_path(results, name).exists()
    base = set_paths(results, name)["base"].read_bytes()
    with pytest.raises(LockError, match="never frozen"):  # nothing can take the half-frozen tree for valid
        verify_frozen(load_protocol(proto), results)
    monkeypatch.undo()
    out, text = run_freeze(proto, results)
    assert "reused" in text and "building the base" not in text
    assert set_paths(results, name)["base"].read_bytes() == base
    assert paths.lock_path(results, name).exists() and out["base_pass_rate"] >= 0
    _, again = run_freeze(proto, results)  # frozen: one line that verifies, no re-run of the freeze
    assert again.count("\n") == 0 and "lock verified" in again


def test_a_base_from_another_recipe_is_rebuilt(tmp_path, monkeypatch):
    import json as _json

    import harness.freeze.base as fz
    from harness.core import paths
    proto = make_tiny_protocol(tmp_path)
    results = tmp_path / "results"
    monkeypatch.setattr(fz, "base_eval_record", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        run_freeze(proto, results)
    name = load_protocol(proto).name
    recipe = paths.base_recipe_path(results, name)
    known = _json.loads(recipe.read_text())
    known["recipe"]["warmup_sha256"] = "0" * 64
    recipe.write_text(_json.dumps(known))
    monkeypatch.undo()
    _, text = run_freeze(proto, results)
    assert "building the base" in text and "reused" not in text


def test_the_base_is_built_with_the_recipes_threads_and_the_callers_are_restored(tmp_path):
    """base.torch_threads is part of the recipe: the same recipe gives the same bytes, and the
    caller's thread count (a run's: one) is back afterwards."""
    import torch

    from harness.freeze.base import build_base
    proto = make_tiny_protocol(tmp_path, model={"base": {"steps": 8, "torch_threads": 2}})
    p = load_protocol(proto)
    warmup = build_splits(p.family, p.seeds.task_seed, {**p.split_sizes(), "warmup": 40}, p.guard)["warmup"]
    torch.set_num_threads(1)
    seen = []
    real = torch.set_num_threads
    try:
        torch.set_num_threads = lambda n: (seen.append(n), real(n))[1]
        first = build_base(p, warmup, progress=False)
    finally:
        torch.set_num_threads = real
    assert seen == [2, 1] and torch.get_num_threads() == 1
    assert build_base(p, warmup, progress=False) == first


def test_a_positive_control_that_led_an_arm_of_its_check_by_less_than_the_margin_in_the_pilot_is_a_shortfall(tmp_path):
    """The design simulates P's check at its registered effect; a pilot in which P led A by less than the
    check's margin says that effect is optimistic. Freeze names it as a shortfall, P's lead over the base
    aside (the sesoi bounds that)."""
    from harness.readout.design import control_gains, registration
    p = load_protocol(make_tiny_protocol(tmp_path))
    margin = p.arms["P"].check.margin

    def pilot(p_rate, a_rate):
        arm = lambda rate: {"round": 1, "seeds": {"1": {}, "2": {}}, "pass_rate_mean": rate, "vs_base": rate - 0.1}  # noqa: E731
        return {"arms": {"A": arm(a_rate), "P": arm(p_rate)}}
    close, clear = pilot(0.20, 0.20 - margin / 2), pilot(0.20, 0.20 - 2 * margin)
    [g] = control_gains(p, close)
    assert g["short"] == [{"arm": "A", "gap": pytest.approx(margin / 2), "margin": margin}]
    assert control_gains(p, clear)[0]["short"] == []
    from harness.readout.design import protocol_design
    from harness.stats.design.summary import registration_shortfalls
    design = protocol_design(p)
    short = registration(p, design, close)["shortfalls"]
    assert short == registration_shortfalls(design) + [
        f"pilot P - A on the calibration split +{100 * margin / 2:.1f} pts (after round 1, mean of 2 seeds), "
        f"below its check's margin {100 * margin:.1f} pts: the registered check that P beats A is more "
        f"likely to fail than the design's positive-control power says"]
    assert registration(p, design, clear)["shortfalls"] == registration_shortfalls(design)


def test_freeze_names_the_base_the_registration_was_sized_on_and_refuses_another(tmp_path):
    import dataclasses

    from harness.freeze.freeze import RegistrationError, base_identity_lines
    from harness.spec.protocol import ProtocolError
    p = load_protocol(make_tiny_protocol(tmp_path))
    assert p.model.sized_on_base is None and p.model.on_other_base == "refuse"  # a protocol naming none
    assert base_identity_lines(p, "ab" * 32) == [
        "[freeze] base sha256 abababababab; model.yaml names no base this registration was sized on (sized_on_base: null)"]
    named = dataclasses.replace(p, model=dataclasses.replace(p.model, sized_on_base="ab" * 6))
    assert base_identity_lines(named, "ab" * 32) == [
        "[freeze] base sha256 abababababab: the base this registration was sized on (model.yaml sized_on_base)"]
    with pytest.raises(RegistrationError) as err:  # another base: refused (the default), both sha256 named in full
        base_identity_lines(named, "cd" * 32)
    msg = str(err.value)
    assert "\n" not in msg and f"built base sha256 {'cd' * 32}, not the base the registration was sized on, sha256 " \
                              f"{'ab' * 6} (" in msg and "freeze stops before the pilot (on_other_base: refuse" in msg
    for mode, said in (("resize", "the pilot and the design analysis are measured on this base"),
                       ("deviation", "WARNING: on_other_base: deviation: the experiment runs on this base")):
        other = dataclasses.replace(named, model=dataclasses.replace(named.model, on_other_base=mode))
        assert said in "\n".join(base_identity_lines(other, "cd" * 32))
    with pytest.raises(ProtocolError, match=r"model.yaml: key 'on_other_base': expected one of \['refuse', 'resize', "):
        load_protocol(make_tiny_protocol(tmp_path / "mode", model={"on_other_base": "warn"}))
    with pytest.raises(ProtocolError, match=r"model.yaml: key 'sized_on_base': expected null, or the sha256"):
        load_protocol(make_tiny_protocol(tmp_path / "bad", model={"sized_on_base": "C8E60501B104"}))
    assert load_protocol("main").model.sized_on_base.startswith("c8e60501b104")
