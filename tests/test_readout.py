"""The one-shot readout: it reads only sealed, intact, registered runs tied to the lock, applies the
registered analysis to the final round, writes a canonical verdict + report + figures, and seals them."""
import json
import re
from collections import Counter

import markupsafe
import numpy as np
import pytest

from harness.core import records
from harness.core.paths import set_paths
from harness.core.records import sha256_file
from harness.readout import report
from harness.readout.analyzer import ReadoutError, readout
from harness.spec.lock import LOCK_NAME
from families.code import PROGRAM_CLASSES, program_class
from harness.tasks.splits import load_tasks
from tests.fixtures_runs import (
    BASE_PASSES,
    N_PROBES,
    OUTCOMES,
    ROUNDS,
    build_tree,
    edit_bytes,
    edit_line,
)


@pytest.fixture
def tree(tmp_path):
    return build_tree(tmp_path)


@pytest.fixture(scope="module")
def read_out(tmp_path_factory):
    """(tree, readout dir) of one keep_both readout, shared by the tests that only read it."""
    t = build_tree(tmp_path_factory.mktemp("sealed"))
    return t, readout(t.protocol_dir, t.results_dir)


def _verdict(out):
    return json.loads((out / "verdict.json").read_text())


def _no_readout_left(tree):
    base = tree.results_dir / tree.name
    return not tree.readout.exists() and not [p for p in base.iterdir() if p.name.startswith(".readout-")]


# ---------------------------------------------------------------- what a readout writes

def test_readout_writes_a_sealed_canonical_verdict_report_and_figures(read_out):
    tree, out = read_out
    assert out == tree.readout and records.is_sealed(out)
    manifest = records.verify_sealed(out)
    figures = ["commit_curve.png", "contrasts.png", "heircommit.png", "heldout_bpb.png", "monitors.png",
               "probe_pass_rate.png", "train_loss.png"]
    assert sorted(manifest["files"]) == sorted(figures + ["items.html", "report.html", "report.md", "verdict.json"])
    raw = (out / "verdict.json").read_bytes()
    v = json.loads(raw)
    assert raw == (json.dumps(v, sort_keys=True, indent=2) + "\n").encode()  # canonical
    assert manifest["verdict_sha256"] == records.sha256_bytes(raw)

    # the hashes it was computed from: the lock and every run's manifest and chain heads
    lock = json.loads((tree.frozen / LOCK_NAME).read_text())
    assert v["inputs"]["lock_hash"] == lock["lock_hash"]
    assert v["inputs"]["lock_file_sha256"] == sha256_file(tree.frozen / LOCK_NAME)
    assert sorted(v["inputs"]["runs"]) == [f"{a}/seed{s}" for a in "ABC" for s in (1, 2)]
    for key, run in v["inputs"]["runs"].items():
        arm, seed = key.split("/seed")
        assert run["manifest_sha256"] == sha256_file(tree.run(arm, int(seed)) / "manifest.json")
        assert run["chain_heads"]["records.jsonl"] == records.verify_chain(tree.run(arm, int(seed)) / "records.jsonl")

    # the analysis saw the final round only (round 0 passed BASE_PASSES everywhere)
    arms = v["analysis"]["arms"]
    assert {a: (m["passed"], m["n"]) for a, m in arms.items()} == {
        a: (sum(OUTCOMES["keep_both"][a].values()), 2 * N_PROBES) for a in "ABC"}
    assert v["analysis"]["verdict"]["outcome"] == "keep_both"
    assert v["analysis"]["spec"]["bootstrap"]["n_resamples"] == 999

    text = (out / "report.md").read_text()
    for needle in (lock["lock_hash"], f"python {lock['meta']['python']}, torch {lock['meta']['torch']}",
                   "rng seed 20261129", "| B-A |", "two-stage bootstrap interval", "keep_both",
                   "**Design:** 40 probes x 2 seeds per arm", "## Design analysis",
                   "### Designed (variance components from the registered ASSUMPTIONS",
                   "### Observed (variance components from this experiment's outcomes)", "![commit_curve](commit_curve.png)",
                   "## Verdict\n\n**Verdict: keep_both**, decided by the decision rule. B-A supported", "C/seed2 | 1 | retain",
                   "### Design summary",
                   "PASS: learner steps equal", "PASS: no probe task", "held-out bits per byte", "![contrasts](contrasts.png)"):
        assert needle in text, needle
    assert str(tree.root) not in text and str(tree.root) not in raw.decode()  # nothing machine-dependent
    for png in figures:
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and b"matplotlib" not in data and b"Software" not in data
    # what a reviewer reads is readable alike: every file of the readout has one mode, and the folders above it
    # let the group and others through (without listing them) while the frozen answers stay owner-only
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {0o444}
    assert all(d.stat().st_mode & 0o011 == 0o011 for d in (tree.results_dir, tree.results_dir / tree.name, out))
    assert (tree.frozen / "sets").stat().st_mode & 0o777 == 0o700


def test_a_registration_below_its_power_is_said_in_the_verdict(read_out):
    """The fixture's protocol registers smoke's stated override: the verdict carries the shortfalls and
    the reason, and the report's verdict section says so before any other section."""
    _, out = read_out
    reg = _verdict(out)["registration"]
    assert reg["shortfalls"] and reg["override"].startswith("a pipeline check of the harness")
    text = (out / "report.md").read_text()
    verdict_section = text[:text.index("\n## ", text.index("Verdict:"))]
    assert "> **Warning:** the design is below its registered power, registered so by a stated override\n" in verdict_section
    warnings = text[text.index("## Warnings"):text.index("\n## ", text.index("## Warnings") + 1)]
    assert "Registered below its power criterion by a stated override" in warnings and reg["override"] in warnings


def test_the_report_names_the_one_base_the_verdict_rests_on(read_out):
    """Limitations: the base's sha256 and pass rate, as the verdict records them, and that another base
    of the same recipe can move the contrasts by more than the sesoi (the measured figure)."""
    _, out = read_out
    v = _verdict(out)
    text = (out / "report.md").read_text()
    section = text[text.index("\n## Limitations\n"):text.index("\n## Provenance\n")]
    base = v["against_base"]["A"]["mean_lo"]
    assert f"(sha256 {v['inputs']['base_sha256'][:12]}, passing {100 * base:.1f}% of the probes)" in section
    assert "the verdict is about the loop started from that base, not about the recipe" in section
    assert "B-A read -0.9 pts (`ruled_out`) and -10.8 pts (`reversed`)" in section
    assert section.rstrip().endswith("bases as a registered factor are not built.")  # no base spread registered


def test_the_report_says_what_the_verdict_costs_about_the_recipe_where_a_base_spread_is_registered(read_out):
    """With decision.yaml design.base_spread, the designed and observed analyses carry the design about the
    recipe: the report's Design analysis section shows its table for each, and Limitations names how often
    the labels are wrong about the recipe and the bases a claim about it would take (the designed figures)."""
    from harness.stats.design.records import BaseContrastOC, BaseOC
    _, out = read_out
    v = _verdict(out)
    row = lambda key, sd, level, need: BaseContrastOC(  # noqa: E731
        contrast=key, base_sd=sd, base_sd_upper=4 * sd, per_base_se=0.012, supported_at_0=level, reversed_at_0=0.03,
        ruled_out_at_sesoi=0.04, ruled_out_at_0=0.3, supported_at_sesoi=0.6, level_se=0.01, bases_needed=need,
        bases_needed_upper=None, per_base_se_few=0.015, bases_needed_few=need + 1)
    bases = BaseOC(bases_measured=2, level=0.8, seeds_per_base=2, fewest_seeds=2,
                   contrasts=[row("B-A", 0.07, 0.354, 14), row("C-B", 0.015, 0.081, 3)]).to_dict()
    for which in ("designed", "observed"):
        v["design"][which]["bases"] = bases
    text = report.render_report(v, [])
    design = text[text.index("\n## Design analysis"):text.index("\n## ", text.index("\n## Design analysis") + 5)]
    assert design.count("About the recipe, not this base") == 2
    assert "| B-A | 7.0 pts (28.0 pts) | 0.354 | 0.030 | 0.040 | 14 (> 1000) | 15 |" in design
    section = text[text.index("\n## Limitations\n"):text.index("\n## Provenance\n")]
    assert ("this design's B-A label is wrong about the recipe with P up to 0.354 (alpha 0.05), and a claim about "
            "the recipe would take bases of 2 seeds: B-A 14, C-B 3") in section
    assert "(B-A 7.0 pts, C-B 1.5 pts, measured over 2 bases)" in section and "not built" not in section


def test_report_html_is_self_contained_and_rendered_from_the_same_sections(read_out):
    tree, out = read_out
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    v = _verdict(out)
    figures = sorted(p.name for p in out.glob("*.png"))
    # every figure inline, nothing fetched from outside the file
    assert html.count('src="data:image/png;base64,') == len(figures) == md.count("![")
    assert re.findall(r'(?:src|href)="(?!data:|#)([^"]*)"', html) == [report.PREREGISTRATION_LINK, report.ITEMS_LINK]
    assert "<link" not in html and "<script src" not in html
    # the same sections, in the same order, in both
    assert re.findall(r"<h2>(.*?)</h2>", html) == [
        re.sub(r"`([^`]+)`", r"<code>\1</code>", h) for h in re.findall(r"^## (.*)$", md, flags=re.M)]
    assert html.count("<h2>Verdict</h2>") == 1 and md.count("\n## Verdict\n") == 1
    assert v["verdict"]["reason"] in md and str(markupsafe.escape(v["verdict"]["reason"])) in html
    assert "<strong>Verdict: keep_both</strong>, decided by the decision rule." in html
    for needle in ("The arms", "Per stratum", "Learning curves", "Compute ledger", "Design analysis",
                   "The commit gate", "Every arm against the base", "Figure: probe pass rate (%)"):
        assert needle in md and needle in html, needle
    assert md.count("*Figure: ") == len(figures)
    # what each arm is, from its kind's module
    assert "| **A** | `sft` | arm | Arm A, the control: masked-CE SFT on the seed task set's reference solutions. |" in md


def test_per_stratum_rates_are_in_the_verdict_and_add_up_to_each_arms_rate(read_out):
    tree, out = read_out
    v = _verdict(out)
    st = v["strata"]
    assert sum(st["n_items"].values()) == N_PROBES
    for arm, rates in st["arms"].items():
        total = sum(rates[n] * st["n_items"][n] for n in st["names"]) / N_PROBES
        assert total == pytest.approx(v["analysis"]["arms"][arm]["mean"])
    assert sum(st["base"][n] * st["n_items"][n] for n in st["names"]) / N_PROBES == pytest.approx(BASE_PASSES / N_PROBES)
    md = (out / "report.md").read_text()
    assert "| stratum | probes | base | A | B | C |" in md
    # the same per program class, each arm's gain over the base beside its rate, a row each in the table
    probes = load_tasks(set_paths(tree.results_dir, tree.name)["probe"], tree.protocol.family)
    cl = st["classes"]
    want = Counter(program_class(t) for t in probes)
    assert cl["names"] == [c for c in PROGRAM_CLASSES if want[c]] and cl["n_items"] == dict(want)
    for arm, rates in cl["arms"].items():
        assert sum(rates[c] * cl["n_items"][c] for c in cl["names"]) / N_PROBES == pytest.approx(v["analysis"]["arms"][arm]["mean"])
        for c in cl["names"]:
            assert cl["gain"][arm][c] == pytest.approx(rates[c] - cl["base"][c])
    for c in cl["names"]:
        row = next(line for line in md.splitlines() if line.startswith(f"| class `{c}` |"))
        cells = [x.strip() for x in row.strip("|").split("|")]
        assert cells[1] == str(want[c]) and cells[2] == f"{100 * cl['base'][c]:.1f}%"
        assert cells[3] == f"{100 * cl['arms']['A'][c]:.1f}% ({100 * cl['gain']['A'][c]:+.1f} pts)"


def test_each_figures_series_labels_are_the_runs_it_plots(tmp_path, monkeypatch):
    """C's and D's gate runs each labelled by their own arm and seed; each curve's legend names the arms
    it plots with their seed counts, and the base once."""
    tree = build_tree(tmp_path, controls=True)
    drawn, save = {}, report.figures._save
    monkeypatch.setattr(report.figures, "_save", lambda fig, path: (drawn.__setitem__(path.name, fig), save(fig, path)))
    v = _verdict(readout(tree.protocol_dir, tree.results_dir))
    gate = drawn["heircommit.png"].axes[0]
    assert [t.get_text() for t in gate.get_yticklabels()] == ["C seed 1", "C seed 2", "D seed 1", "D seed 2"]
    arms = sorted(tree.protocol.arm_names)
    for name in ("probe_pass_rate.png", "heldout_bpb.png"):
        labels = drawn[name].axes[0].get_legend().get_texts()
        assert [t.get_text() for t in labels] == [f"{a} (mean of 2 seeds)" for a in arms] + ["base (round -1)"], name
    assert "base" not in " ".join(t.get_text() for t in drawn["train_loss.png"].axes[0].get_legend().get_texts())
    mon = [t.get_text() for t in drawn["monitors.png"].legends[0].get_texts()]
    assert mon == arms  # the eval monitors are recorded for every arm
    contrasts = [t.get_text() for t in drawn["contrasts.png"].axes[0].get_yticklabels()]
    assert contrasts == [f"{k} ({c['label']})" for k, c in sorted(v["analysis"]["contrasts"].items())]
    assert drawn["contrasts.png"].axes[0].get_xlabel().startswith("pass-rate gap (pts)")


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
def test_each_verdict_outcome_is_reachable_through_the_readout(tmp_path, outcome):
    tree = build_tree(tmp_path, OUTCOMES[outcome])
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)
    v = _verdict(out)["analysis"]["verdict"]
    assert v["outcome"] == outcome
    assert f"**Verdict: {outcome}**, decided by the decision rule. {v['clause']}" in (out / "report.md").read_text()


def test_items_are_the_final_round_per_seed_and_the_seed_test_sees_both_arms(tmp_path):
    finals = {"A": {1: 8, 2: 12}, "B": 20, "C": {1: 20, 2: 22}}
    v = _verdict(readout(*_paths(build_tree(tmp_path, finals)), figures=False))
    a = v["analysis"]
    assert a["per_seed"] == {"A": {"1": 0.2, "2": 0.3}, "B": {"1": 0.5, "2": 0.5}, "C": {"1": 0.5, "2": 0.55}}
    ba = a["contrasts"]["B-A"]
    assert (ba["seed_rates_hi"], ba["seed_rates_lo"]) == ([0.5, 0.5], [0.2, 0.3])
    # Welch on {0.5, 0.5} vs {0.2, 0.3}: t = 0.25 / sqrt(0.005 / 2) = 5, df = 1
    assert ba["welch_t"] == pytest.approx(5.0) and ba["welch_df"] == pytest.approx(1.0)
    # items 0-7 tie (both pass on both seeds); 8-11: net +1; 12-19: net +2; the rest tie at 0
    assert (ba["n_items_hi"], ba["n_items_lo"], ba["n_items_tied"]) == (12, 0, N_PROBES - 12)
    # the observed design analysis read these very outcomes
    moments = v["design"]["observed"]["components"]["moments"]
    assert moments["pass_rates"] == {"A": 0.25, "B": 0.5, "C": 0.525}
    assert moments["seed_agreement"]["A"] == pytest.approx(1 - 4 / N_PROBES)


def _paths(tree):
    return tree.protocol_dir, tree.results_dir


# ---------------------------------------------------------------- refusals: tamper of each kind

def _tamper_record_line(t):
    edit_line(t.run("A", 1) / "records.jsonl", 3, '"mean_loss":0.5', '"mean_loss":0.6')
    return "A/seed1/records.jsonl:3"


def _tamper_manifest(t):
    edit_bytes(t.run("B", 2) / "manifest.json", b'"wall_clock_s": 12.5', b'"wall_clock_s": 12.4')
    return "B/seed2/manifest.json"


def _tamper_checkpoint(t):
    edit_bytes(t.run("C", 1) / "checkpoints" / "round1.pt", b"fake", b"Fake")
    return "C/seed1/checkpoints/round1.pt"


def _tamper_ledger(t):
    edit_line(t.run("B", 1) / "ledger.jsonl", 2, '"win_rate":0.5', '"win_rate":0.6')
    return "B/seed1/ledger.jsonl:2"


def _tamper_lock(t):
    lock = json.loads((t.frozen / LOCK_NAME).read_text())
    digest = lock["entries"]["frozen/probe.jsonl"]
    edit_bytes(t.frozen / LOCK_NAME, digest.encode(), (("0" if digest[0] != "0" else "1") + digest[1:]).encode())
    return LOCK_NAME


def _tamper_lock_form(t):
    edit_bytes(t.frozen / LOCK_NAME, b'"created": ', b'"created":  ')  # unhashed meta, same content
    return f"{LOCK_NAME}: not byte-identical"


def _tamper_probe_set(t):
    edit_bytes(t.frozen / "sets" / "probe.jsonl", b'"template": "arith"', b'"template": "arith" ')
    return "frozen/sets/probe.jsonl"


def _tamper_base(t):
    edit_bytes(t.frozen / "base.pt", b"fake", b"Fake")
    return "frozen/base.pt"


def _tamper_experience(t):
    edit_line(t.run("C", 2) / "experience.jsonl", 1, '"kept":true', '"kept":false')  # round 0, committed
    return "C/seed2/experience.jsonl:1"


def _tamper_timing(t):
    edit_bytes(t.run("A", 2) / "timing.log", b'"eval_s": 1.0', b'"eval_s": 0.0')
    return "A/seed2/timing.log: sha256 differs from the manifest"


@pytest.mark.parametrize("tamper", [_tamper_record_line, _tamper_manifest, _tamper_checkpoint, _tamper_ledger,
                                    _tamper_experience, _tamper_timing, _tamper_lock, _tamper_lock_form,
                                    _tamper_probe_set, _tamper_base])
def test_any_tamper_is_refused_naming_the_file_and_line(tree, tamper):
    where = tamper(tree)
    with pytest.raises(ReadoutError) as err:
        readout(tree.protocol_dir, tree.results_dir)
    assert where in str(err.value)
    assert _no_readout_left(tree)


def test_a_record_that_does_not_match_its_checkpoint_is_refused(tmp_path):
    def wrong_checkpoint(arm, seed, r, rec):
        if (arm, seed, r) == ("B", 2, 1):
            rec["checkpoint"] = "ab" * 32

    tree = build_tree(tmp_path, edit_round=wrong_checkpoint)
    records.verify_sealed(tree.run("B", 2))  # the seal alone is intact: only the record<->file link breaks
    with pytest.raises(ReadoutError, match=r"B/seed2/checkpoints/round1\.pt: .*records\.jsonl:3 'checkpoint'"):
        readout(tree.protocol_dir, tree.results_dir)


def test_a_run_sealed_under_another_lock_is_refused(tmp_path):
    def other_lock(arm, seed, fields):
        if (arm, seed) == ("C", 2):
            fields["lock_hash"] = "f" * 64

    tree = build_tree(tmp_path, edit_manifest=other_lock)
    with pytest.raises(ReadoutError, match=r"C/seed2/manifest\.json: 'lock_hash' is 'f{64}'"):
        readout(tree.protocol_dir, tree.results_dir)


def test_a_wall_clock_that_is_not_the_sum_of_timing_log_is_refused(tmp_path):
    def other_wall_clock(arm, seed, fields):
        if (arm, seed) == ("A", 1):
            fields["wall_clock_s"] = 1.0

    tree = build_tree(tmp_path, edit_manifest=other_wall_clock)
    with pytest.raises(ReadoutError, match=r"A/seed1/manifest\.json: 'wall_clock_s' is 1\.0, timing\.log sums to 12\.500"):
        readout(tree.protocol_dir, tree.results_dir)


def test_an_unsealed_run_is_refused(tree):
    marker = tree.run("A", 2) / "SEALED"
    marker.parent.chmod(0o755)
    marker.unlink()
    with pytest.raises(ReadoutError, match=r"A/seed2/SEALED: run directory is not sealed"):
        readout(tree.protocol_dir, tree.results_dir)


def test_a_missing_run_is_refused_by_name(tmp_path):
    tree = build_tree(tmp_path, skip=(("C", 2),))
    with pytest.raises(ReadoutError, match=r"missing run\(s\) \[.*C/seed2'\]"):
        readout(tree.protocol_dir, tree.results_dir)
    assert _no_readout_left(tree)


@pytest.mark.parametrize("extra", ["A/seed3", "D"])
def test_an_unregistered_run_is_refused_by_name(tree, extra):
    (tree.results_dir / tree.name / extra).mkdir(parents=True)
    with pytest.raises(ReadoutError, match=rf"unregistered run\(s\) \[.*{re.escape(extra)}'\]"):
        readout(tree.protocol_dir, tree.results_dir)


def test_a_second_readout_refuses_and_points_to_audit(read_out):
    tree, out = read_out
    before = {p: sha256_file(p) for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ReadoutError, match=r"runs once.*make audit PROTOCOL=fixture RESULTS="):
        readout(tree.protocol_dir, tree.results_dir)
    assert {p: sha256_file(p) for p in out.rglob("*") if p.is_file()} == before and len(before) == 13


def test_an_interrupted_readout_leaves_nothing_half_written(tree, monkeypatch):
    def crash(verdict, out_dir):
        (out_dir / "probe_pass_rate.png").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "write_figures", crash)
    with pytest.raises(KeyboardInterrupt):
        readout(tree.protocol_dir, tree.results_dir)
    assert _no_readout_left(tree)
    monkeypatch.undo()
    assert records.is_sealed(readout(tree.protocol_dir, tree.results_dir, figures=False))


# ---------------------------------------------------------------- checks reported, not refused

def test_a_probe_task_at_the_solver_fails_the_leakage_check(tmp_path):
    out = readout(*_paths(build_tree(tmp_path, leak=True)), figures=False)
    leak = _verdict(out)["checks"]["leakage"]
    assert not leak["ok"]
    assert [(x["ledger"], x["line"], x["matched"]) for x in leak["probe_hashes_at_solver"]] == [
        ("B/seed1/ledger.jsonl", 1, ["canonical"]), ("B/seed2/ledger.jsonl", 1, ["canonical"])]
    text = (out / "report.md").read_text()
    assert "FAIL: no probe task" in text and "the leakage check failed" in text


def test_budget_inequality_and_wall_clock_overrun_are_flagged(tmp_path):
    def fewer_steps(arm, seed, r, rec):
        if (arm, seed, r) == ("A", 1, 0):
            rec["budget"]["learner_steps"] -= 1  # a consistent record of one step too few
            rec["budget"]["update_steps"] -= 1

    out = readout(*_paths(build_tree(tmp_path, edit_round=fewer_steps, wall_clock_s=250.0)), figures=False)
    budget = _verdict(out)["checks"]["budget"]
    assert not budget["ok"] and budget["wall_clock_exceeded"] == [f"{a}/seed{s}" for a in "ABC" for s in (1, 2)]
    assert budget["consumed"]["A/seed1"]["learner_steps"] == 2 * 5 - 1
    # C's recovery (round 1: retained after recovery) is inside its steps, and every other entry is in the ledger
    assert budget["consumed"]["C/seed1"]["learner_steps"] == 2 * 5 and budget["consumed"]["C/seed1"]["recovery_steps"] == 2
    assert budget["per_arm"]["confirm_rollouts"] == budget["per_arm"]["screen_rollouts"] == {
        "A": [0, 0], "B": [0, 0], "C": [2 * 2 * 4] * 2}  # root and successor on 4 probes, 2 rounds
    text = (out / "report.md").read_text()
    assert "FAIL: learner steps equal across every arm" in text
    assert "FLAG: wall clock within the registered 100 s per run: exceeded by A/seed1" in text
    assert "PASS: solver rollouts as registered" in text
    assert "| recovery_steps | 0 | 0 | 2 |" in text and "| learner_steps (held equal) | 9 / 10 | 10 | 10 |" in text


def test_report_shows_the_base_and_every_round_in_the_series(read_out):
    v = _verdict(read_out[1])
    s = v["series"]["C/seed1"]
    assert s["base"]["probe_pass_rate"] == BASE_PASSES / N_PROBES
    assert [r["round"] for r in s["rounds"]] == list(range(ROUNDS))
    assert [r["heircommit"]["decision"] for r in s["rounds"]] == ["commit", "retain"]
    assert "heircommit" not in v["series"]["B/seed1"]["rounds"][0]


def _bits(rng, p):
    return "".join("1" if rng.random() < p else "0" for _ in range(N_PROBES))


def test_sign_p_is_the_binomial_test_on_per_item_net_differences_recomputed_from_the_records(tmp_path):
    from scipy.stats import binomtest
    rng = np.random.default_rng(21)
    finals = {arm: {s: _bits(rng, p) for s in (1, 2)} for arm, p in (("A", 0.3), ("B", 0.5), ("C", 0.6))}
    tree = build_tree(tmp_path, finals)
    v = _verdict(readout(*_paths(tree), figures=False))
    passed = {}
    for arm in "ABC":
        for seed in (1, 2):
            rec = json.loads((tree.run(arm, seed) / "records.jsonl").read_text().splitlines()[-1])
            passed[arm, seed] = [int(ch) for ch in rec["eval"]["probe_passed"]]
    for hi, lo in (("B", "A"), ("C", "B")):
        d = [sum(passed[hi, s][i] - passed[lo, s][i] for s in (1, 2)) for i in range(N_PROBES)]
        pos, neg = sum(x > 0 for x in d), sum(x < 0 for x in d)
        want = binomtest(pos, pos + neg, 0.5, alternative="greater").pvalue
        assert v["analysis"]["contrasts"][f"{hi}-{lo}"]["sign_p"] == pytest.approx(want, rel=1e-9)


def test_relabelling_seeds_changes_no_number_of_the_readout(tmp_path):
    rng = np.random.default_rng(22)
    finals = {arm: {s: _bits(rng, p) for s in (1, 2)} for arm, p in (("A", 0.3), ("B", 0.5), ("C", 0.6))}
    swapped = {**finals, "C": {1: finals["C"][2], 2: finals["C"][1]}, "A": {1: finals["A"][2], 2: finals["A"][1]}}
    one = _verdict(readout(*_paths(build_tree(tmp_path / "one", finals)), figures=False))
    two = _verdict(readout(*_paths(build_tree(tmp_path / "two", swapped)), figures=False))
    for v in (one, two):
        v["analysis"].pop("per_seed")
    assert json.dumps(one["analysis"], sort_keys=True) == json.dumps(two["analysis"], sort_keys=True)
    assert json.dumps(one["design"], sort_keys=True) == json.dumps(two["design"], sort_keys=True)


def test_a_readout_at_a_ceiling_ends_in_a_verdict(tmp_path):
    """A at 0.9 (B and C above it): the observed design places its simulated control low enough that
    2 x sesoi on both contrasts fits under a pass rate of 1, and the readout ends in a verdict."""
    finals = {"A": {1: 36, 2: 35}, "B": {1: 38, 2: 37}, "C": {1: 40, 2: 39}}
    v = _verdict(readout(*_paths(build_tree(tmp_path, finals)), figures=False))
    assert v["analysis"]["verdict"]["outcome"] in ("keep_both", "drop_heircommit", "loop_earns_nothing", "not_resolved")
    obs = v["design"]["observed"]
    assert "error" not in obs and obs["components"]["control_rate"] == pytest.approx(0.8875)
    top = max(obs["rule"]["cells"], key=lambda c: c["effect_BA"] + c["effect_CB"])
    assert top["control_rate"] + top["effect_BA"] + top["effect_CB"] < 1
    # the flat design summaries, designed and observed
    keys = ["gate_commit_at_minus_sesoi", "gate_commit_at_plus_sesoi", "keep_both_at_sesoi", "keep_both_false_positive",
            "positive_control_power", "ruled_out_at_sesoi"]
    for key in ("design_summary", "design_summary_observed"):
        assert sorted(v[key]) == keys and v[key]["positive_control_power"] is None  # no control arm registered here
        assert 0 <= v[key]["ruled_out_at_sesoi"] <= 1 and 0 <= v[key]["keep_both_false_positive"] <= 1


def test_the_per_item_view_shows_each_arms_final_completion_and_marks_disagreement(tmp_path):
    def keep_completions(arm, seed, r, rec):
        if r == ROUNDS - 1:
            bits = rec["eval"]["probe_passed"]
            rec["eval"]["probe_completions"] = [f"    return {arm}{seed}_{i} < 3\n" for i in range(N_PROBES)]
            rec["eval"]["probe_reasons"] = ["pass" if b == "1" else "wrong_answer" for b in bits]

    tree = build_tree(tmp_path, OUTCOMES["keep_both"], edit_round=keep_completions)
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)
    html = (out / "items.html").read_text()
    rows = re.findall(r'<tr data-disagree="([01])">', html)
    # A's seeds pass the first 10 and 11 probes, B's 20 and 21, C's 30 and 31: runs disagree on probes 10-30 only
    assert rows == ["0"] * 10 + ["1"] * 21 + ["0"] * 9
    assert "return B2_12 &lt; 3" in html and "seed 2:\nfail (wrong_answer)" in html  # escaped, per seed
    assert "only the probes where arms disagree" in html and "21 of 40 probes" in html
    prompt = load_tasks(tree.frozen / "sets" / "probe.jsonl", tree.protocol.family)[0].prompt
    assert str(markupsafe.escape(prompt)) in html
    assert str(markupsafe.escape(_verdict(out)["verdict"]["sentence"])) in html


def test_the_verdict_says_how_far_to_trust_each_label(read_out):
    """Each decision contrast's label with its interval and run bound in points, and how often the
    rule gives that label when it is wrong and when it is right at the observed components."""
    from harness.readout.report import trust_lines
    from harness.stats.design.summary import label_reliability
    _, out = read_out
    verdict = _verdict(out)
    lines, _ = trust_lines(verdict)
    c = verdict["analysis"]["contrasts"]["B-A"]
    rel = label_reliability(verdict["design"]["observed"], "B-A", c["label"])
    assert c["label"] == "supported" and rel is not None
    assert lines[0].startswith("B-A `supported` (it requires the one-sided sign test p < alpha, the interval's and the "
                               "run bound's low ends above 0, and the gap beyond the seed spread): gap +25.0 pts, "
                               f"interval [{100 * c['ci_low']:+.1f} pts, {100 * c['ci_high']:+.1f} pts], run bound "
                               f"[{100 * c['run_bound_low']:+.1f} pts, {100 * c['run_bound_high']:+.1f} pts]")
    assert f"says `supported` with P {rel.level:.3f} when the gap is truly 0 (nominal alpha 0.05)" in lines[0]
    assert f"with P {rel.power:.3f} when it truly equals the sesoi" in lines[0]
    cells = verdict["design"]["observed"]["rule"]["cells"]
    assert rel.level == max(x["labels"]["B-A"]["supported"] for x in cells if x["effect_BA"] == 0)
    assert "What decided it, and how far to trust it." in _verdict_section((out / "report.md").read_text())


def _verdict_section(md: str) -> str:
    return md[md.index("## Verdict\n"):md.index("\n## ", md.index("## Verdict\n") + 1)]


def test_the_verdict_paragraph_states_the_deciding_label_its_numbers_and_every_warning(tmp_path, monkeypatch):
    """loop_earns_nothing: B-A `ruled_out` decides alone. The verdict paragraph gives its interval and run
    bound as numbers, its observed level and power, and every warning of the design analysis (designed
    and observed) and of a label above its level, before any other section; C-B is the other label."""
    from harness.readout.report import headline
    from harness.stats.design.summary import label_reliability
    tree = build_tree(tmp_path, OUTCOMES["loop_earns_nothing"])
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)
    v = _verdict(out)
    assert v["verdict"]["outcome"] == "loop_earns_nothing"
    c = v["analysis"]["contrasts"]["B-A"]
    assert c["label"] == "ruled_out" and c["run_bound_high"] is not None
    h = headline(v)
    assert len(h["deciding"]) == 1 and h["deciding"][0].startswith(
        "B-A `ruled_out` (it requires the interval's and the run bound's high ends below the sesoi (+5.0 pts)): gap "
        f"{100 * c['gap']:+.1f} pts, interval [{100 * c['ci_low']:+.1f} pts, {100 * c['ci_high']:+.1f} pts], run bound "
        f"[{100 * c['run_bound_low']:+.1f} pts, {100 * c['run_bound_high']:+.1f} pts]")
    rel = label_reliability(v["design"]["observed"], "B-A", "ruled_out")
    assert (f"the rule says `ruled_out` with P {rel.level:.3f} when the gap truly equals the sesoi (nominal alpha "
            f"0.05) and with P {rel.power:.3f} when it is truly 0") in h["deciding"][0]
    assert [x.split(" `")[0] for x in h["trust"]] == ["C-B"]
    section = _verdict_section((out / "report.md").read_text())
    assert h["deciding"][0] in section and h["trust"][0] in section
    # every design warning, registered and observed, is in the Warnings section below the verdict, once, and the
    # verdict section has one line per distinct warning
    warnings = [f"the design as registered: {w}" for w in v["design"]["designed"]["warnings"]
                if not w.startswith(("underpowered:", "at the pessimistic components", "the positive control ("))]
    warnings += [f"the design at the observed components: {w}" for w in v["design"]["observed"]["warnings"]]
    md = (out / "report.md").read_text()
    full = md[md.index("## Warnings"):md.index("\n## ", md.index("## Warnings") + 1)]
    assert warnings and all(full.count(w[1:]) == 1 for w in warnings)
    assert section.count("> **Warning:** ") == len(h["warnings"]) == len(set(h["warnings"]))
    assert [line for line in section.splitlines() if line.startswith("> **Warning:** ")] == [
        f"> **Warning:** {w}" for w in h["warnings"]]

    # a label above its level at the observed components is a headline warning
    obs = v["design"]["observed"]
    for cell in obs["rule"]["cells"]:
        if cell["effect_BA"] == obs["sesoi"]:
            cell["labels"]["B-A"]["ruled_out"] = 0.2
    h = headline(v)
    assert "at the observed variance components the rule says `ruled_out` with P 0.200" in h["deciding"][0]
    assert "B-A's label `ruled_out` holds its level poorly" in h["warnings"]
    assert [w for _, lines in h["warning_details"] for w in lines if w.startswith(
        "B-A's label `ruled_out` holds its level poorly here: at the observed variance components it arises with P 0.200")]


def test_a_not_supported_label_says_how_likely_it_is_at_the_sesoi(tmp_path):
    """not_resolved: B-A `not_supported` decides; its line says how often the rule finds `supported` when
    the gap truly equals the sesoi, and so how likely a gap that large goes unseen."""
    from harness.readout.report import headline
    from harness.stats.design.summary import label_reliability
    out = readout(*_paths(build_tree(tmp_path, OUTCOMES["not_resolved"])), figures=False)
    v = _verdict(out)
    h = headline(v)
    found = label_reliability(v["design"]["observed"], "B-A", "supported").power
    assert h["deciding"][0].startswith("B-A `not_supported` (it requires none of supported, ruled_out or reversed to hold)")
    assert (f"the rule says `supported` with P {found:.3f} when the gap truly equals the sesoi, so a gap that large goes "
            f"unseen with P {1 - found:.3f}.") in h["deciding"][0]


def test_contrast_bullets_and_the_design_summary_read_as_words(read_out):
    """No Python list or internal criterion name in the contrasts' bullets; the design summary is a row
    per figure with two value columns (it fits the page), each figure in words with its verdict.json key."""
    from harness.readout.controls import CRITERIA_WORDS
    _, out = read_out
    md = (out / "report.md").read_text()
    contrasts = md[md.index("## Contrasts"):md.index("\n## ", md.index("## Contrasts") + 1)]
    bullets = [line for line in contrasts.splitlines() if line.startswith("- ")]
    assert len(bullets) == 2 and not [b for b in bullets if "[" in b or "]" in b]
    assert not [k for k in CRITERIA_WORDS if k in contrasts]
    assert bullets[0] == ("- B-A: held: gap beyond the seed spread, interval's low end above 0, run bound's low end "
                          "above 0, one-sided sign test p < alpha; not held: interval's high end below the sesoi, run "
                          "bound's high end below the sesoi; per-seed pass rates B 50.0%, 52.5%; A 25.0%, 27.5%")
    rule = md[md.index("## The decision rule, clause by clause"):md.index("\n## ", md.index("## The decision rule"))]
    assert "`ruled_out` = the interval's and the run bound's high ends below the sesoi" in rule
    assert "- B-A: supported: B > A (sign test p < alpha, interval and run bound above 0, beyond the seed spread" in rule
    v = _verdict(out)
    table = md[md.index("### Design summary"):].split("\n\n")[1].splitlines()
    assert table[0] == "| figure | key in verdict.json | designed | observed |"
    rows = {line.split(" | ")[1].strip("`"): line for line in table[2:]}
    assert sorted(rows) == sorted(v["design_summary"])
    kb = v["design_summary"]["keep_both_at_sesoi"], v["design_summary_observed"]["keep_both_at_sesoi"]
    assert rows["keep_both_at_sesoi"].endswith(f"| {kb[0]:.3f} | {kb[1]:.3f} |")


def test_the_training_loss_figure_has_a_panel_per_objective(tmp_path, monkeypatch):
    """The supervised arms (A, P) and the self-play arms (B, C, N, D) on separate panels, each with its
    own y axis."""
    tree = build_tree(tmp_path, controls=True)
    drawn, save = {}, report.figures._save
    monkeypatch.setattr(report.figures, "_save", lambda fig, path: (drawn.__setitem__(path.name, fig), save(fig, path)))
    readout(tree.protocol_dir, tree.results_dir)
    axes = drawn["train_loss.png"].axes
    assert len(axes) == 2
    legends = [[t.get_text().split(" ")[0] for t in ax.get_legend().get_texts()] for ax in axes]
    assert legends == [["A", "P"], ["B", "C", "D", "N"]]
    assert axes[0].get_title().startswith("supervised arms") and axes[1].get_title().startswith("self-play arms")
    assert axes[0].get_shared_y_axes().get_siblings(axes[0]) == [axes[0]]  # its own y axis


def test_the_per_item_view_shows_the_tests_and_the_base_scored_once(tmp_path):
    tree = build_tree(tmp_path)
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)
    html = (out / "items.html").read_text()
    probes = load_tasks(tree.frozen / "sets" / "probe.jsonl", tree.protocol.family)
    for t in probes[:5]:
        calls = "\n".join(f"f({x!r}) -> {y!r}" for x, y in zip(t.inputs, t.expected))
        assert f"<td><pre>{markupsafe.escape(calls)}</pre></td>" in html
    base_cells = re.findall(r'<td class="(pass|fail)">(pass|fail)', html)
    assert [c[1] for c in base_cells] == ["pass"] * BASE_PASSES + ["fail"] * (N_PROBES - BASE_PASSES)
    assert "runs passed" not in html and "scored once, at freeze" in html
    # at most 1600 px: the page's width caps the table, whose cells wrap their long lines
    assert "max-width:1600px" in html and "table-layout:fixed;width:100%" in html
    assert "overflow-wrap:anywhere" in html and "max-width:34em" not in html


def test_runs_are_ordered_by_seed_as_a_number_in_the_gate_figure_and_tables(read_out):
    """Seeds 1, 2, 10, 11, 12: the gate figure's rows, the gate tables and the Provenance table list them in
    that order, not as text (1, 10, 11, 12, 2)."""
    from harness.readout.report import gate_labels, render_report
    _, out = read_out
    v = _verdict(out)
    for part in ("series", "retained"):
        for key in [k for k in v[part] if k.endswith("/seed2")]:
            for seed in (12, 10, 11):  # added out of order: only the sort can put them in place
                copy = json.loads(json.dumps(v[part][key]))
                if "seed" in copy:
                    copy["seed"] = seed
                v[part][key.replace("/seed2", f"/seed{seed}")] = copy
    runs = v["inputs"]["runs"]
    for key in [k for k in runs if k.endswith("/seed2")]:
        for seed in (12, 10, 11):
            runs[key.replace("/seed2", f"/seed{seed}")] = runs[key]
    labels = gate_labels(v)
    assert labels == [f"C seed {s}" for s in (1, 2, 10, 11, 12)]
    text = render_report(v, [])
    gate = text[text.index("## The commit gate"):text.index("\n## ", text.index("## The commit gate") + 1)]
    tables = [block for block in gate.split("\n\n") if block.startswith("| run |")]
    assert len(tables) == 2  # the rounds' decisions, then the retained rounds
    for table in tables:
        order = [int(m) for m in re.findall(r"^\| C/seed(\d+) \|", table, flags=re.M)]
        assert order == sorted(order) and set(order) == {1, 2, 10, 11, 12}
    prov = text[text.index("## Provenance"):]
    order = [(arm, int(s)) for arm, s in re.findall(r"^\| `([A-Z])/seed(\d+)` \|", prov, flags=re.M)]
    assert order == sorted(order) and ("C", 12) in order
