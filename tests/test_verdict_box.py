"""The verdict box's warnings: one short line per distinct warning (lines that say the same thing are
one), each warning in full once in the Warnings section; and the README's outcome table states the
conditions the checks apply."""
import re

import yaml

from harness import PROJECT_ROOT
from harness.readout.controls import CHECK_OUTCOMES
from harness.readout.report.paragraph import distinct_warnings
from harness.stats.design.summary import LEVEL_WARNING

OVERRIDE = ("registered below its power criterion by a stated override (designed P(keep_both | sesoi) 0.630); the "
            "reason given before any run: too few probes")
UNDER_DESIGNED = ("the design as registered: underpowered: P(keep_both) at the sesoi (5.0 pts on both contrasts) is "
                  "0.630 (MC s.e. 0.015), below the registered power 0.8; this design cannot resolve its sesoi")
UNDER_OBSERVED = UNDER_DESIGNED.replace("as registered", "at the observed components").replace("0.630", "0.550")
PESSIMISTIC = ("the design at the observed components: at the pessimistic components (seed SDs at their 80% upper "
               "confidence limit over 12 seeds) P(keep_both) at the sesoi is 0.410, below the registered power 0.8")
LEVEL_OBSERVED = ("B-A's label `ruled_out` holds its level poorly here (not the label it got, `supported`): at the "
                  "observed variance components it arises with P 0.090 (MC s.e. 0.009) when the gap truly equals the "
                  "sesoi, above alpha 0.05")
LEVEL_DESIGNED = (f"the design as registered: {LEVEL_WARNING}B-A `ruled_out` arises with P 0.080 (MC s.e. 0.009) when "
                  "the gap truly equals the sesoi, above alpha 0.05")
LEVEL_OTHER = LEVEL_DESIGNED.replace("B-A `ruled_out`", "C-B `ruled_out`")
NO_PILOT = ("the design as registered: no pilot: the variance components are the registered ASSUMPTIONS "
            "(decision.yaml design.assumed), not measurements; run `make pilot` and freeze with its pilot.json")
WALL = "wall clock exceeded the registered 100 s in A seed1, B seed2 (recorded only; no run was cut)."


def test_warnings_that_say_the_same_thing_are_one_line():
    got = distinct_warnings([OVERRIDE, NO_PILOT, UNDER_DESIGNED, LEVEL_OBSERVED, PESSIMISTIC, UNDER_OBSERVED,
                             LEVEL_DESIGNED, LEVEL_OTHER, WALL, WALL])
    assert [short for short, _ in got] == [
        "the design is below its registered power, registered so by a stated override",
        "no pilot: the variance components are assumed, not measured",
        "B-A's label `ruled_out` holds its level poorly",
        "C-B's label `ruled_out` holds its level poorly",
        "wall clock exceeded"]
    lines = dict(got)
    assert lines["the design is below its registered power, registered so by a stated override"] == [
        OVERRIDE, UNDER_DESIGNED, PESSIMISTIC, UNDER_OBSERVED]
    assert lines["B-A's label `ruled_out` holds its level poorly"] == [LEVEL_OBSERVED, LEVEL_DESIGNED]
    assert lines["wall clock exceeded"] == [WALL]  # the same line twice is kept once


def test_without_an_override_the_power_line_says_so_and_an_unknown_warning_is_its_own_line():
    got = distinct_warnings([UNDER_OBSERVED, "the sandbox fell back to rlimits: no cgroup here; memory is per process",
                             "the design at the observed components: something new: with its numbers"])
    assert [short for short, _ in got] == ["the design is below its registered power",
                                           "the sandbox fell back to rlimits", "something new"]


def _readme_outcomes() -> dict[str, str]:
    text = (PROJECT_ROOT / "README.md").read_text()
    return dict(re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", text, flags=re.M))


def test_the_readmes_outcome_table_states_the_checks_conditions():
    """Each check's row names what the code asks (harness.readout.controls): the positive control must beat
    every arm of its check by the margin and the sign test; the figures quoted are the main protocol's."""
    rows = _readme_outcomes()
    assert set(CHECK_OUTCOMES[c][0] for c in CHECK_OUTCOMES) <= set(rows)
    main = PROJECT_ROOT / "protocols" / "main"
    check = yaml.safe_load((main / "arms.yaml").read_text())["P"]["check"]
    gap = yaml.safe_load((main / "gates.yaml").read_text())["infrastructure"]["max_rate_gap"]
    insensitive = rows["instrument_insensitive"]
    assert "failed to beat the base" not in insensitive
    assert f"the base and {check['must_beat'][1]}" in insensitive and check["must_beat"][0] == "base"
    assert f"by its margin ({round(100 * check['margin'])} points there)" in insensitive
    assert "passed its sign test but fell short of the margin fails too" in insensitive
    negative = rows["negative_control_failed"]
    n_margin = yaml.safe_load((main / "arms.yaml").read_text())["N"]["check"]["margin"]
    assert f"by its margin ({n_margin:g} in the main protocol)" in negative and "run bound" in negative
    assert "negative_control_override" in negative
    imbalanced = rows["infrastructure_imbalanced"]
    assert f"`max_rate_gap` ({round(100 * gap)} point in the main protocol)" in imbalanced
    assert "infrastructure_override" in imbalanced
