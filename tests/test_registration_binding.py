"""A registration cannot outlive its figures: an underpowered_override names the shortfalls it excuses
and the base they were measured on, freeze refuses any other (a new shortfall, a worse value, another
base) and prints the block to write, another base than the one the registration was sized on is refused
before the pilot unless model.yaml says what to do, and every output names both bases."""
import dataclasses
import json
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.integrate import quad
from scipy.optimize import brentq
from scipy.special import expit
from scipy.stats import binom

from harness.core import paths, records
from harness.freeze import base as freeze_base
from harness.freeze.freeze import RegistrationError, check_registration, freeze, power_report
from harness.readout import words
from harness.readout.design import readout_design, registration
from harness.spec.deviations import read_deviations
from harness.spec.protocol import Override, load_protocol
from harness.stats import contrasts, power
from harness.stats.design import model, summary
from tests.tiny_protocol import make_tiny_protocol

OTHER = "cd" * 32  # a base sha256 no recipe builds here


def _run(proto, results):
    lines = []
    try:
        return freeze(str(proto), results, out=lines.append), "\n".join(lines)
    except RegistrationError as err:
        return err, "\n".join(lines)


def _write(proto, fname: str, change: dict) -> None:
    data = yaml.safe_load((proto / fname).read_text())
    data.update(change)
    (proto / fname).write_text(yaml.safe_dump(data, sort_keys=False))


def _printed_override(text: str) -> dict:
    """The underpowered_override block freeze printed, as YAML."""
    lines = text.splitlines()
    start = lines.index("underpowered_override:")
    block = [lines[start]] + [x for x in lines[start + 1:start + 40] if x.startswith("  ")]
    return yaml.safe_load("\n".join(block))["underpowered_override"]


def _another_host(monkeypatch, protocol_seed: int = 8) -> None:
    """Freeze's base builder as another host's: the same protocol builds other bytes (here: another seed)."""
    real = freeze_base.build_base

    def other(protocol, warmup, device="cpu", progress=True, out=None):
        recipe = dataclasses.replace(protocol.model.base, seed=protocol_seed)
        return real(dataclasses.replace(protocol, model=dataclasses.replace(protocol.model, base=recipe)), warmup,
                    device, progress, out)
    monkeypatch.setattr(freeze_base, "build_base", other)


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    """A tiny protocol registered on the base this host builds, the way a user registers one: a freeze
    that names another base is refused before the pilot (naming the built one), the base written into
    model.yaml; then a freeze without an override refuses after the design analysis and prints the block
    to write, which is written (with a reason); the next freeze locks. Returns (protocol dir, results,
    the built sha256, the texts of the four freezes, the printed override)."""
    root = tmp_path_factory.mktemp("sized")
    proto = make_tiny_protocol(root, model={"sized_on_base": "0" * 12}, decision={"underpowered_override": None})
    results = root / "results"
    err, first = _run(proto, results)
    assert isinstance(err, RegistrationError) and "[pilot]" not in first and "\n" not in str(err)
    built = re.search(r"built base sha256 ([0-9a-f]{64}), not the base", str(err)).group(1)
    _write(proto, "model.yaml", {"sized_on_base": built})
    refused, second = _run(proto, results)
    assert isinstance(refused, RegistrationError), "the tiny design misses the power: refused without an override"
    second += "\n" + str(refused)
    printed = _printed_override(second)
    assert printed["reason"].startswith("<") and printed["sized_on_base"] == built
    _write(proto, "decision.yaml", {"underpowered_override": {**printed, "reason": "the tiny protocol of the tests, "
                                                                                   "sized to run in seconds"}})
    done, third = _run(proto, results)
    assert not isinstance(done, RegistrationError), str(done)
    return proto, results, built, (first, second, third), printed, done


def test_a_freeze_prints_the_override_to_write_and_writing_it_registers_the_figures(sized):
    proto, results, built, (first, second, third), printed, done = sized
    # refused at the base, before any measurement, naming it: model.yaml names another
    assert "stage 3/5 pilot" not in first
    # refused after the design, in one line naming every figure and what is missing, the block printed above it
    power = done["power"]["registration"]
    assert printed["shortfalls"] == {f["name"]: f["value"] for f in power["figures"]} and printed["shortfalls"]
    assert "decision.yaml states no underpowered_override; to register it anyway write the underpowered_override " \
           "printed above" in second.splitlines()[-1]
    # written, the next freeze reuses the base and the pilot (neither reads the registration's keys) and locks
    assert "base checkpoint built by this recipe already: reused" in third and "measured this very protocol and base; kept" in third, \
        "\n".join(x for x in third.splitlines() if "base" in x or "pilot" in x)
    assert f"which names these figures on this base ({built[:12]})" in third
    lock = json.loads(paths.lock_path(results, "tiny").read_text())
    assert lock["meta"]["registration"]["shortfalls"] == printed["shortfalls"]
    assert lock["meta"]["registration"]["override"]["sized_on_base"] == built
    assert power["base"]["sha256"] == built and power["other_base"] is False and power["unexcused"] == []
    prereg = (paths.frozen_dir(results, "tiny") / paths.PREREG_NAME).read_text()
    assert f"about the figures it names on base {built[:12]}" in prereg
    assert f"Base: this experiment built base sha256 {built[:12]}" in prereg and "the base the registration was sized on" in prereg


def test_a_protocol_whose_base_changes_between_two_freezes_is_refused_at_the_second_naming_both(sized, tmp_path,
                                                                                                 monkeypatch):
    """The same protocol, frozen again where the base comes out other bytes (another host): refused in one
    line naming both sha256 in full, before the pilot; nothing is locked."""
    proto, _, built, *_ = sized
    _another_host(monkeypatch)
    err, text = _run(proto, tmp_path / "results")
    assert isinstance(err, RegistrationError)
    msg = str(err)
    other = re.search(r"this host built base sha256 ([0-9a-f]{64})", msg).group(1)
    assert other != built and f"not the base the registration was sized on, sha256 {built}" in msg
    assert "\n" not in msg and "freeze stops before the pilot (on_other_base: refuse, the default)" in msg
    assert "stage 3/5 pilot" not in text and not paths.lock_path(tmp_path / "results", "tiny").exists()


def test_another_base_as_a_registered_deviation_or_resized(sized, tmp_path, monkeypatch):
    """on_other_base: resize measures the other base and refuses with the registration to write for it,
    which then locks, reusing the base and the pilot; on_other_base: deviation locks on it, logs the
    deviation once with both sha256, and PREREGISTRATION.md sets the two bases side by side."""
    import shutil
    proto, _, built, *_ = sized
    _another_host(monkeypatch)
    resized = shutil.copytree(proto, tmp_path / "resized" / "tiny")
    _write(resized, "model.yaml", {"on_other_base": "resize"})
    err, text = _run(resized, tmp_path / "r1")
    assert isinstance(err, RegistrationError) and "stage 3/5 pilot" in text
    other = re.search(r"measured on base sha256 ([0-9a-f]{64}), not the base", str(err)).group(1)
    assert other != built and f"sized_on_base: {other}" in text.splitlines()
    printed = _printed_override(text)
    assert printed["sized_on_base"] == other and printed["reason"].startswith("<")  # the old reason is another base's
    _write(resized, "model.yaml", {"sized_on_base": other})
    _write(resized, "decision.yaml", {"underpowered_override": {**printed, "reason": "registered anew on the base this "
                                                                                     "host builds, its own figures"}})
    done, again = _run(resized, tmp_path / "r1")
    assert not isinstance(done, RegistrationError), str(done)
    assert "reused" in again and "measured this very protocol and base; kept" in again, \
        "\n".join(x for x in again.splitlines() if "base" in x or "pilot" in x)

    deviated = shutil.copytree(proto, tmp_path / "deviated" / "tiny")
    _write(deviated, "model.yaml", {"on_other_base": "deviation"})
    results = tmp_path / "r2"
    done, text = _run(deviated, results)
    assert not isinstance(done, RegistrationError), str(done)
    assert "WARNING: on_other_base: deviation" in text and "deviation logged in" in text
    [entry] = read_deviations(results, "tiny")["entries"]
    assert entry["what"] == (f"frozen on base sha256 {other}, not on the base the registration was sized on, sha256 "
                             f"{built} (model.yaml sized_on_base)") and entry["outcome_seen"] == "no"
    assert "they were measured on base" in entry["why"]  # the override's figures are the other base's
    _run(deviated, results)  # frozen: verified, and the deviation is not logged twice
    assert len(read_deviations(results, "tiny")["entries"]) == 1
    prereg = (paths.frozen_dir(results, "tiny") / paths.PREREG_NAME).read_text()
    assert f"| built by this freeze, every arm's start | `{other}` |" in prereg
    assert f"| the registration was sized on (model.yaml `sized_on_base`) | `{built}` | another base |" in prereg
    assert "NOT the base the registration was sized on" in prereg


# ---------------------------------------------------------------- the override's binding, figure by figure

@pytest.fixture(scope="module")
def short(tmp_path_factory):
    """(protocol, report) of a tiny design below the power (no pilot: the registered assumptions), on base 'ab'*32."""
    p = load_protocol(make_tiny_protocol(tmp_path_factory.mktemp("short"), decision={"underpowered_override": None}))
    return p, power_report(p, None, {"sha256": "ab" * 32, "pass_rate": 0.1})


def _with_override(p, shortfalls, base="ab" * 32, reason="the tiny design of the tests, far below the power"):
    o = Override(reason=reason, shortfalls=shortfalls, sized_on_base=base)
    return dataclasses.replace(p, decision=dataclasses.replace(p.decision, underpowered_override=o))


def _check(p, base="ab" * 32):
    report = power_report(p, None, {"sha256": base, "pass_rate": 0.1})
    lines = []
    try:
        check_registration(p, report, out=lines.append)
    except RegistrationError as err:
        return str(err), "\n".join(lines)
    return None, "\n".join(lines)


def test_an_override_written_for_one_shortfall_does_not_excuse_another(short):
    p, report = short
    figures = {f["name"]: f["value"] for f in report["registration"]["figures"]}
    assert {"designed.keep_both", "designed.positive_control", "designed.joint"} <= set(figures)
    # naming one: the others are new shortfalls, each named in the one-line refusal
    msg, printed = _check(_with_override(p, {"designed.keep_both": figures["designed.keep_both"]}))
    assert msg is not None and "\n" not in msg
    assert "a shortfall the override does not name (designed.positive_control)" in msg
    assert "a shortfall the override does not name (designed.keep_both)" not in msg
    assert _printed_override(printed)["shortfalls"] == figures  # what to write: every figure, on this base
    # naming every one at its value, on this base: registered, the reason printed
    msg, text = _check(_with_override(p, figures))
    assert msg is None and "which names these figures on this base (abababababab)" in text
    # a better value than named still holds; a worse one does not
    better = {**figures, "designed.positive_control": figures["designed.positive_control"] - 0.005}
    assert _check(_with_override(p, better))[0] is None
    worse = {**figures, "designed.positive_control": figures["designed.positive_control"] + 0.005}
    msg, _ = _check(_with_override(p, worse))
    assert f"worse than the {worse['designed.positive_control']:.3f} the override names (designed.positive_control)" in msg
    # the same figures measured on another base: not the override's
    msg, _ = _check(_with_override(p, figures), base=OTHER)
    assert "they were measured on base cdcdcdcdcdcd, and the override names its figures on base abababababab" in msg
    # a reason alone (an older protocol's form) names nothing: refused, the block printed
    old = dataclasses.replace(p, decision=dataclasses.replace(p.decision, underpowered_override="a reason alone, "
                                                                                                   "as protocols wrote"))
    msg, printed = _check(old)
    assert "states a reason but names no figures" in msg and "underpowered_override:" in printed
    # shortfalls: any (a protocol not sized to decide): every figure on every base, said so
    anything = dataclasses.replace(p, decision=dataclasses.replace(p.decision, underpowered_override=Override(
        reason="a pipeline check, not sized to decide anything", shortfalls="any")))
    msg, text = _check(anything, base=OTHER)
    assert msg is None and "which excuses any shortfall on any base" in text


def test_the_printed_override_loads_and_a_placeholder_reason_does_not(short, tmp_path):
    from harness.spec.protocol import ProtocolError
    p, report = short
    figures = report["registration"]["figures"]
    from harness.freeze.freeze import override_yaml
    block = yaml.safe_load("\n".join(override_yaml(figures, "ab" * 32, "a reason about these very figures here")))
    loaded = load_protocol(make_tiny_protocol(tmp_path / "ok", decision=block)).decision.underpowered_override
    assert loaded == Override(reason="a reason about these very figures here", sized_on_base="ab" * 32,
                              shortfalls={f["name"]: f["value"] for f in figures})
    placeholder = yaml.safe_load("\n".join(override_yaml(figures, "ab" * 32, "<why this design is registered below>")))
    with pytest.raises(ProtocolError, match="key 'underpowered_override': expected null, or the stated reason"):
        load_protocol(make_tiny_protocol(tmp_path / "bad", decision=placeholder))
    for bad in ({"reason": "five words of a reason", "shortfalls": {"designed.joint": 0.5}},  # no base named
                {"reason": "five words of a reason here", "shortfalls": "any", "sized_on_base": "ab" * 6},
                {"reason": "five words of a reason here", "shortfalls": {}, "sized_on_base": "ab" * 6}):
        with pytest.raises(ProtocolError, match="key 'underpowered_override'"):
            load_protocol(make_tiny_protocol(tmp_path / "bad", name=f"x{len(str(bad))}",
                                             decision={"underpowered_override": bad}))


def test_the_shipped_overrides_name_their_figures_and_base():
    main = load_protocol("main")
    o = main.decision.underpowered_override
    assert isinstance(o, Override) and main.model.sized_on_base == o.sized_on_base and main.model.on_other_base == "deviation"
    assert set(o.shortfalls) == {"pessimistic.keep_both", "pessimistic.joint", "pilot.P-A"}
    assert o.reason.startswith(f"on base {o.sized_on_base[:8]}")
    for name in ("smoke", "polygon", "loops"):  # pipeline checks: not sized to decide, on any base
        assert load_protocol(name).decision.underpowered_override.excuses_any, name


# ---------------------------------------------------------------- the joint probability

def test_the_joint_probability_is_read_on_the_rules_own_experiments():
    """joint_at reads the positive control's check on the experiments whose keep_both rule_oc counts: with a
    check that cannot fail (a margin of -1, P 50 points above A and a base at the floor) it IS keep_both
    at the sesoi, draw for draw; with the registered check it is at most that, and it is the joint figure
    freeze holds against the power (not the product of the two)."""
    from tests.test_design import ASSUMED, DESIGN, SPEC
    m = {**ASSUMED, "seed_sd": dict.fromkeys("ABC", 0.006), "seed_agreement": dict.fromkeys("ABC", 0.9),
         "arm_agreement": 0.85}
    vc = dataclasses.replace(model.VarianceComponents.from_moments(m, "pilot"), base_rate=0.01, n_seeds=4)
    design = {**DESIGN, "replicates": 300}
    rule = power.rule_oc(SPEC, design, vc, 256, 4)
    at = next(c for c in rule.cells if c.effect_BA == 0.05 and c.effect_CB == 0.05)
    assert 0.2 < at.keep_both < 0.8  # a cell the draws decide either way
    sure = [{"role": "positive", "arm": "P", "versus": ["base", "A"], "margin": -1.0}]  # P 50 pts above A: it passes
    assert power.joint_at(SPEC, design, vc, 256, 4, sure, 0.05, 0.05, 0.5) == pytest.approx(at.keep_both, abs=1e-9)
    checks = [{"role": "positive", "arm": "P", "versus": ["base", "A"], "margin": 0.03}]
    joint = power.joint_at(SPEC, design, vc, 256, 4, checks, 0.05, 0.05, 0.05)
    assert 0 < joint < at.keep_both
    d = power.design_analysis(SPEC, {**design, "positive_control_effect": 0.05}, vc, 64, 3, control_checks=checks)
    assert d.joint.p == pytest.approx(power.joint_at(SPEC, design, vc, 64, 3, checks, 0.05, 0.05, 0.05))
    assert summary.design_summary(d)["joint_power"] == d.joint.p
    named = {f.name: f.value for f in summary.registration_figures(d)}
    assert named["designed.joint"] == summary.figure_value(d.joint.p)
    assert d.pessimistic.joint is not None and d.pessimistic.joint.p <= d.pessimistic.keep_both_at_sesoi.p
    assert power.joint_at(SPEC, design, vc, 64, 3, [], 0.05, 0.05, 0.05) is None  # no positive control


# ---------------------------------------------------------------- the observed design at the base's own rate

def _intercept(rate: float, sd: float) -> float:
    """mu with E[L(mu + sd Z)] = rate, Z ~ N(0, 1) (written here, apart from the harness's)."""
    mean = lambda mu: quad(lambda z: expit(mu + sd * z) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi), -12, 12)[0]  # noqa
    return brentq(lambda mu: mean(mu) - rate, -40, 40)


def _check_power(c, a_rate: float, base_rate: float, effect: float, margin: float, alpha: float, n: int, k: int,
                 reps: int, seed: int) -> float:
    """P(the positive control's check passes) by a simulation of the model written here: item effect shared by
    every arm, an arm x item effect and a run effect per seed (A's run SD) for P and A, the base one model
    (no run effect, the same outcomes for every seed). P beats X when its mean gap over items x seeds is at
    least the margin and the one-sided exact sign test on the items' net differences gives p < alpha."""
    rng = np.random.default_rng(seed)
    item, own, run = c.item_sd, c.arm_item_sd, c.run_sd["A"]
    alpha_i = rng.standard_normal((reps, 1, n)) * item

    def arm(rate, run_sd, seeds):
        mu = _intercept(rate, np.sqrt(item ** 2 + own ** 2 + run_sd ** 2))
        logit = mu + alpha_i + own * rng.standard_normal((reps, 1, n)) + run_sd * rng.standard_normal((reps, seeds, 1))
        return (rng.random((reps, seeds, n)) < expit(logit)).astype(float)
    p, a, base = arm(a_rate + effect, run, k), arm(a_rate, run, k), arm(base_rate, 0.0, 1)

    def beats(lo):
        net = p.mean(1) - lo.mean(1)
        hi_n, lo_n = (net > 0).sum(1), (net < 0).sum(1)
        sign_p = np.where(hi_n + lo_n > 0, binom.sf(hi_n - 1, np.maximum(hi_n + lo_n, 1), 0.5), 1.0)
        return (p.mean((1, 2)) - lo.mean((1, 2)) >= margin) & (sign_p < alpha)
    return float((beats(base) & beats(a)).mean())


def test_the_observed_design_simulates_the_base_at_its_own_pass_rate(tmp_path):
    """The readout's observed design reads the base's probe pass rate from frozen/base_eval.json (here 10%,
    A at about 30%): its positive control's power at the registered P - A matches a simulation of the same
    components written here within Monte-Carlo error; with the base put at A's rate (as when the observed
    components carried no base rate) the same simulation gives a figure far off it."""
    proto = make_tiny_protocol(tmp_path, tasks={"probe": {"size": 150}, "calibration": {"size": 150}},
                               seeds={"run_seeds": [1, 2, 3], "pilot_seeds": 2},
                               decision={"design": {"replicates": 1000}})
    p = load_protocol(proto)
    results = tmp_path / "results"
    base_eval = paths.base_eval_path(results, p.name)
    base_eval.parent.mkdir(parents=True)
    base_eval.write_text(records.canonical_json({"base_sha256": "ab" * 32, "eval": {"probe_pass_rate": 0.1}}))
    rng = np.random.default_rng(3)
    difficulty = rng.normal(0, 1.2, 150)
    rows = [(arm, s, i, int(rng.random() < expit(lift + difficulty[i] + rng.normal(0, 0.3))))
            for arm, lift in (("A", -0.9), ("B", -0.8), ("C", -0.8)) for s in (1, 2, 3) for i in range(150)]
    items = pd.DataFrame(rows, columns=list(contrasts.COLUMNS))
    observed = readout_design(p, items, results).observed
    c = observed.components
    assert c.source == "observed" and c.base_rate == 0.1 and abs(c.control_rate - 0.1) > 0.15
    [ctrl] = observed.positive_controls
    effect, margin, alpha = ctrl.effect, ctrl.margin, p.decision.alpha
    reps = 20000
    mine = _check_power(c, ctrl.control_rate, 0.1, effect, margin, alpha, 150, 3, reps, seed=11)
    se = np.sqrt(ctrl.p_pass_at_effect * (1 - ctrl.p_pass_at_effect) / 1000 + mine * (1 - mine) / reps)
    assert abs(ctrl.p_pass_at_effect - mine) <= 3.5 * se, (ctrl.p_pass_at_effect, mine, se)
    at_a = _check_power(c, ctrl.control_rate, c.control_rate, effect, margin, alpha, 150, 3, reps, seed=11)
    assert abs(ctrl.p_pass_at_effect - at_a) > 5 * se, (ctrl.p_pass_at_effect, at_a, se)


# ---------------------------------------------------------------- what a reader is told

def test_every_output_names_both_bases_and_says_when_they_differ(tmp_path):
    """A read-out experiment whose base is not the one its registration was sized on (a deviation): verdict.json,
    report.md, the command's last lines and the MLflow readout run's tags name both and say what it means; the
    same experiment on its own base says that in one sentence."""
    from harness.cli.main import _verdict_line, base_tags
    from harness.readout.analyzer import readout
    from tests.fixtures_runs import build_tree
    tree = build_tree(tmp_path / "other", changes={"model.yaml": {"sized_on_base": "ef" * 6, "on_other_base": "deviation"}})
    out = readout(tree.protocol_dir, tree.results_dir)
    verdict = json.loads((out / "verdict.json").read_text())
    reg = verdict["registration"]
    built = verdict["inputs"]["base_sha256"]
    assert reg["base"] == {"sha256": built, "pass_rate": 0.2} and reg["sized_on_base"] == "ef" * 6 and reg["other_base"]
    sentence = words.base_words(reg)
    assert sentence.startswith(f"Base: this experiment built base sha256 {built[:12]}, probe pass rate 20.0%, NOT the "
                               "base the registration was sized on (efefefefefef")
    assert "(on_other_base: deviation), logged in DEVIATIONS.jsonl" in sentence
    report = (out / "report.md").read_text()
    verdict_section = report.split("## Verdict")[1].split("\n## ")[0]
    assert sentence.replace("Base:", "**Base:**", 1) in verdict_section
    assert "is not the base the registration was sized on (efefefefefef): the protocol's own figures and the " \
           "override's reason are about that base, not this one" in report
    assert _verdict_line(out).splitlines()[-1] == sentence  # the command's last line
    tags = base_tags(verdict)
    assert tags["base_sha256"] == built and tags["sized_on_base"] == "ef" * 6 and tags["base_differs"] == "true"
    assert tags["base"] == sentence

    same = build_tree(tmp_path / "same", changes={"model.yaml": {"sized_on_base": built}})
    verdict = json.loads((readout(same.protocol_dir, same.results_dir) / "verdict.json").read_text())
    assert verdict["registration"]["other_base"] is False
    assert words.base_words(verdict["registration"]) == (f"Base: this experiment built base sha256 {built[:12]}, probe "
                                                         f"pass rate 20.0%, the base the registration was sized on "
                                                         f"(model.yaml sized_on_base {built[:12]}).")
    assert base_tags(verdict)["base_differs"] == "false"
    unknown = registration(load_protocol(same.protocol_dir), verdict["design"]["designed"], None)  # no base given
    assert unknown["base"] is None and unknown["other_base"] is None and words.base_words(unknown) is None
