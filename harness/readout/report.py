"""The readout's report and figures, drawn from verdict.json alone.

report.md and report.html are rendered from ONE Jinja2 template (`TEMPLATE`) over one document
model: `report_sections(verdict, figures)` returns the sections in report order, each
`{"id", "title", "blocks"}`, a block being one of

    {"kind": "p", "text"}            a paragraph (inline `code` and **bold** allowed)
    {"kind": "ul", "items"}          a bullet list
    {"kind": "table", "header", "rows"}
    {"kind": "h3", "text"}           a sub-heading
    {"kind": "warn", "text"}         a warning line
    {"kind": "figure", "file", "caption"}
    {"kind": "link", "href", "text"}

(a new section is a function returning such a dict, added to `report_sections`). report.md is a
pure function of the verdict dict, so an audit that recomputes the verdict reproduces it byte for
byte. report.html is the same template with the figures inline (base64 PNG): it opens offline,
and like the PNGs (no timestamp or software tag, but bytes depend on the matplotlib build and
fonts) it is informational.
"""
from __future__ import annotations

import base64
import re
from pathlib import Path

import jinja2
import markupsafe
import numpy as np

from harness.readout import words
from harness.readout.controls import CHECK_OUTCOMES, CRITERIA_WORDS, OVERRIDE_KEYS
from harness.readout.verdict import Contrast, Design, Series, SpreadRule, Verdict, VerdictReasons, as_verdict
from harness.readout.words import pts as _pts
from harness.spec import provenance
from harness.stats.design.records import DesignAnalysis
from harness.stats.design.summary import LEVEL_WARNING, label_reliability

FIGURE_DPI = 150
PNG_METADATA = {"Software": None}  # no matplotlib version tag in the file
ARM_COLOURS = {"A": "tab:gray", "B": "tab:blue", "C": "tab:orange", "P": "tab:green", "N": "tab:purple",
               "D": "tab:brown"}
BASE_COLOUR = "black"
OUTCOME_ORDER = ("keep_both", "drop_heircommit", "loop_earns_nothing", "not_resolved")
MONITOR_LABELS = {
    "monitor_within_entropy": "within-input entropy (eval, bits)",
    "monitor_cross_mi": "cross-input MI (eval, bits)",
    "within_input_entropy": "within-input entropy (solver, bits)",
    "cross_input_mi": "cross-input MI (solver, bits)",
    "completion_entropy": "completion entropy (solver, bits)",
    "zero_spread_fraction": "zero-spread group fraction",
    "cross_round_duplicate_rate": "cross-round duplicate rate",
}
PREREGISTRATION_LINK = "../frozen/PREREGISTRATION.md"  # from the readout dir to freeze's pre-registration
ITEMS_LINK = "items.html"  # the per-item view beside the report

TEMPLATE = """\
{%- if fmt == "md" -%}
# {{ title }}
{% if header %}

{{ header }}
{% endif %}
{% for s in sections %}

## {{ s.title }}
{% for b in s.blocks %}

{% if b.kind == "p" %}{{ b.text }}
{% elif b.kind == "h3" %}### {{ b.text }}
{% elif b.kind == "warn" %}> **Warning:** {{ b.text }}
{% elif b.kind == "link" %}[{{ b.text }}]({{ b.href }})
{% elif b.kind == "ul" %}{% for item in b["items"] %}- {{ item }}
{% endfor %}{% elif b.kind == "table" %}| {{ b.header | join(" | ") }} |
|{% for _ in b.header %}---|{% endfor %}

{% for row in b.rows %}| {{ row | join(" | ") }} |
{% endfor %}{% elif b.kind == "figure" %}![{{ b.stem }}]({{ b.file }})

*Figure: {{ b.caption }}*
{% endif %}{% endfor %}{% endfor %}
{%- else -%}
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title | inline }}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;line-height:1.45;color:#222}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
th{background:#f2f2f2}code{background:#f4f4f4;padding:0 .2em}.warn{background:#fff4e0;border-left:4px solid #e69500;
padding:.3em .6em}figure{margin:1em 0}figcaption{font-size:.9em;color:#444}img{max-width:100%}
#verdict p:first-of-type{font-size:1.15em;background:#eef4ff;border-left:4px solid #3060c0;padding:.5em .8em}
nav a{margin-right:.8em;font-size:.9em}.header{font-size:.85em;color:#444}
</style></head><body>
<h1>{{ title | inline }}</h1>
{% if header %}<p class="header">{{ header | inline }}</p>{% endif %}
<nav>{% for s in sections %}<a href="#{{ s.id }}">{{ s.title | inline }}</a>{% endfor %}</nav>
{% for s in sections %}
<section id="{{ s.id }}"><h2>{{ s.title | inline }}</h2>
{% for b in s.blocks %}
{% if b.kind == "p" %}<p>{{ b.text | inline }}</p>
{% elif b.kind == "h3" %}<h3>{{ b.text | inline }}</h3>
{% elif b.kind == "warn" %}<p class="warn"><strong>Warning:</strong> {{ b.text | inline }}</p>
{% elif b.kind == "link" %}<p><a href="{{ b.href }}">{{ b.text | inline }}</a></p>
{% elif b.kind == "ul" %}<ul>{% for item in b["items"] %}<li>{{ item | inline }}</li>{% endfor %}</ul>
{% elif b.kind == "table" %}<table><tr>{% for h in b.header %}<th>{{ h | inline }}</th>{% endfor %}</tr>
{% for row in b.rows %}<tr>{% for c in row %}<td>{{ c | inline }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% elif b.kind == "figure" %}<figure><img alt="{{ b.stem }}" src="{{ images[b.file] }}">
<figcaption>Figure: {{ b.caption | inline }}</figcaption></figure>
{% endif %}{% endfor %}</section>
{% endfor %}
</body></html>
{% endif %}
"""


def _inline_html(text) -> markupsafe.Markup:
    """HTML of one line of the report's inline markup: escaped, then `code` and **bold**."""
    out = str(markupsafe.escape(str(text)))
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return markupsafe.Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", out))


def _environment(fmt: str) -> jinja2.Environment:
    env = jinja2.Environment(autoescape=fmt == "html", trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["inline"] = _inline_html if fmt == "html" else str
    return env


def render(verdict: Verdict | dict, figures: list[str], fmt: str, images: dict | None = None) -> str:
    """The report in `fmt` ("md" or "html") from TEMPLATE. `figures` are figure file names beside
    the report; `images` (html only) maps each to its PNG bytes, inlined as data URIs."""
    if fmt not in ("md", "html"):
        raise ValueError(f"render: fmt must be 'md' or 'html', got {fmt!r}")
    verdict = as_verdict(verdict)
    return render_sections(report_sections(verdict, figures), fmt, f"Readout: protocol `{verdict.protocol}`", images,
                           provenance_line(verdict))


def render_sections(sections: list[dict], fmt: str = "md", title: str = "", images: dict | None = None,
                    header: str = "") -> str:
    """Sections (report_sections' kind) through TEMPLATE, in `fmt` ("md" or "html"); `header`, when
    given, is a line under the title."""
    uris = {f: "data:image/png;base64," + base64.b64encode(data).decode("ascii") for f, data in (images or {}).items()}
    text = _environment(fmt).from_string(TEMPLATE).render(fmt=fmt, title=title, sections=sections, images=uris,
                                                          header=header)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def render_report(verdict: Verdict | dict, figures: list[str]) -> str:
    """report.md text. `figures` are the figure file names beside the report."""
    return render(verdict, figures, "md")


def render_html(verdict: Verdict | dict, figures: list[str], images: dict[str, bytes]) -> str:
    """report.html text: report.md's template with every figure inline (`images`: file name -> PNG bytes)."""
    missing = [f for f in figures if f not in images]
    if missing:
        raise ValueError(f"render_html: no PNG bytes for figure(s) {missing}")
    return render(verdict, figures, "html", images)


ITEMS_TEMPLATE = """\
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Probes, item by item: protocol {{ protocol }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1em auto;padding:0 1em;max-width:1600px;color:#222}
table{border-collapse:collapse;font-size:.85em;table-layout:fixed;width:100%}
td,th{border:1px solid #ccc;padding:.2em .4em;vertical-align:top;text-align:left;overflow-wrap:anywhere}th{background:#f2f2f2}
pre{margin:0;white-space:pre-wrap;overflow-wrap:anywhere;font-size:.95em}.pass{background:#e6f6e6}.fail{background:#fbe9e9}
col.probe{width:7em}col.base{width:5.5em}
</style></head><body>
<h1>Probes, item by item: protocol <code>{{ protocol }}</code></h1>
<p>{{ verdict_sentence }}</p>
<p>Each probe's prompt and its tests (each call with the expected output, as the frozen probe set holds them), the
base's outcome (the base is scored once, at freeze, and every run starts from that one evaluation), then each arm's
final-round greedy completion per seed with the sandbox's verdict and its reason (green: passed). "Arms disagree" marks
the probes whose pass rate over seeds is not the same in every arm: {{ n_disagree }} of {{ items | length }} probes.</p>
<p><label><input type="checkbox" id="only" onchange="filter()"> only the probes where arms disagree</label></p>
<table id="items"><colgroup><col class="probe"><col class="prompt"><col class="tests"><col class="base">
{% for a in arms %}<col class="arm">{% endfor %}</colgroup>
<tr><th>probe</th><th>prompt</th><th>tests: call -&gt; expected</th><th>base</th>{% for a in arms %}<th>{{ a }}</th>{% endfor %}</tr>
{% for it in items %}<tr data-disagree="{{ 1 if it.disagree else 0 }}"><td>{{ it.index }}<br><code>{{ it.stratum }}</code>
{% if it.disagree %}<br><strong>arms disagree</strong>{% endif %}</td><td><pre>{{ it.prompt }}</pre></td>
<td><pre>{{ it.tests | join("\n") }}</pre></td>
<td class="{{ 'pass' if it.base.passed else 'fail' }}">{{ 'pass' if it.base.passed else 'fail' }}
{% if it.base.reason and not it.base.passed %} ({{ it.base.reason }}){% endif %}</td>
{% for a in arms %}<td>{% for r in it.arms[a] %}<div class="{{ 'pass' if r.passed else 'fail' }}">seed {{ r.seed }}:
{{ 'pass' if r.passed else 'fail' }} ({{ r.reason }})<pre>{{ r.completion }}</pre></div>{% endfor %}</td>{% endfor %}</tr>
{% endfor %}</table>
<script>
function filter(){var only=document.getElementById("only").checked;
document.querySelectorAll("#items tr[data-disagree]").forEach(function(r){
r.style.display=(only&&r.dataset.disagree==="0")?"none":"";});}
</script>
</body></html>
"""


def render_items(protocol: str, verdict_sentence: str, items: list[dict]) -> str:
    """items.html: every probe with its tests and expected outputs, the base's one outcome and each arm's
    final completion per seed (harness.readout.analyzer.item_view's list), filterable to the probes where
    arms disagree (a few lines of inline JS). The page is at most 1600 px wide: a fixed-layout table at the
    page's width, long lines wrapped inside their cells."""
    arms = sorted({a for it in items for a in it["arms"]})
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.from_string(ITEMS_TEMPLATE).render(protocol=protocol, verdict_sentence=verdict_sentence, items=items,
                                                  arms=arms, n_disagree=sum(it["disagree"] for it in items))


# ---------------------------------------------------------------- blocks

def _p(text: str) -> dict:
    return {"kind": "p", "text": text}


def _ul(items: list[str]) -> dict:
    return {"kind": "ul", "items": list(items)}


def _tbl(header: list[str], rows: list[list]) -> dict:
    return {"kind": "table", "header": [str(h) for h in header], "rows": [[str(c) for c in r] for r in rows]}


def _h3(text: str) -> dict:
    return {"kind": "h3", "text": text}


def _warn(text: str) -> dict:
    return {"kind": "warn", "text": text}


def _section(sid: str, title: str, blocks: list[dict]) -> dict:
    return {"id": sid, "title": title, "blocks": blocks}


def _fig_blocks(figures: list[str], verdict: Verdict, *names: str) -> list[dict]:
    """The figure blocks for those of `names` that were drawn, with their captions."""
    return [{"kind": "figure", "file": f, "stem": Path(f).stem, "caption": figure_caption(f, verdict)}
            for f in names if f in figures]


# ---------------------------------------------------------------- number formatting

def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}g}"


def _ok(flag: bool) -> str:
    return "PASS" if flag else "FAIL"


# ---------------------------------------------------------------- the report

def report_sections(verdict: Verdict | dict, figures: list[str]) -> list[dict]:
    """Every section of the report, in order (see the module docstring for the block kinds)."""
    verdict = as_verdict(verdict)
    out = [_verdict(verdict), _arms(verdict), _controls(verdict), _contrasts(verdict, figures),
           _against_base(verdict), _primary(verdict), _strata(verdict), _curves(verdict, figures),
           _rule_clauses(verdict), _design(verdict.design, [("designed", verdict.design_summary),
                                                            ("observed", verdict.design_summary_observed)]),
           _secondary(verdict), _monitors(verdict, figures),
           _heircommit(verdict, figures), verdict_reasons_section(verdict.verdict_reasons, verdict),
           _budget(verdict), _leakage(verdict), _deviations(verdict), _limitations(verdict), _provenance(verdict)]
    return [s for s in out if s is not None]


def verdict_reasons_section(vr: VerdictReasons | dict | None, verdict: Verdict | None = None) -> dict | None:
    """Per arm, the rate of each verifier reason that occurs (probe verdicts, then solver rollouts),
    the infrastructure rate and retries, and the registered balance check. None for a verdict
    without the "verdict_reasons" section; without the `verdict` it belongs to, the paragraph points to
    decision.yaml's infrastructure_override instead of saying what it does."""
    if not vr:
        return None
    vr = VerdictReasons.from_dict(vr, "verdict_reasons")
    infra = ", ".join(f"`{x}`" for x in vr.infrastructure_reasons)
    blocks = [_p(f"Every verdict's reason, as a share of the arm's verdicts. Infrastructure failures ({infra}) are "
                 "retried once; the reason kept is the second run's. If the balance check fails on either table, "
                 + (f"{_consequence(verdict, 'infrastructure balance')}." if verdict is not None else
                    "decision.yaml's infrastructure_override says what it does to the verdict."))]
    for name, title in (("probes", "Probes (the base and every round, all seeds)"),
                        ("rollouts", "Solver rollouts (ledger)")):
        table = vr.probes if name == "probes" else vr.rollouts
        if not table:
            continue
        seen = [x for x in next(iter(table.values())).rates
                if any((row.rates[x] or 0) > 0 for row in table.values())]
        rows = [[arm, str(row.n)] + [_pct(row.rates[x]) for x in seen]
                + [_pct(row.infrastructure), str(row.retried), str(row.unrecorded)]
                for arm, row in sorted(table.items())]
        b = vr.balance[name]
        gap = "n/a (fewer than two arms with reasons)" if b.gap is None else \
            f"{_pts(b.gap)} between {b.arms[0]} and {b.arms[1]}"
        blocks += [_h3(title),
                   _tbl(["arm", "n"] + [f"`{x}`" for x in seen] + ["infrastructure", "retried", "no reason recorded"], rows),
                   _ul([f"{_ok(not b.flagged)}: infrastructure-rate balance, largest gap {gap}, "
                        f"registered maximum {_pts(b.max_rate_gap)}"])]
    return _section("verifier_reasons", "Verifier reasons per arm", blocks)


def _verdict(verdict: Verdict) -> dict:
    """The one verdict: the verdict paragraph of `headline` (the sentence, what the rule alone would
    have said when a control overrode it, the label(s) that decided it and how far to trust them,
    the other labels, what the design could resolve, every warning that bears on the verdict), then
    the links to the pre-registration and the per-item view."""
    h = headline(verdict)
    lead = f"Verdict: {verdict.verdict.outcome}"  # the sentence starts with it: bold, and not said twice
    blocks = [_p(h["sentence"].replace(lead, f"**{lead}**", 1))]
    if h["rule_alone"]:
        blocks.append(_p(h["rule_alone"]))
    if h["deciding"]:
        blocks.append(_p("**What decided it, and how far to trust it.** " + " ".join(h["deciding"])))
    if h["trust"]:
        blocks.append(_p(f"**{h['trust_heading']}.** " + " ".join(h["trust"])))
    if h["design"]:
        blocks.append(_p(f"**Design:** {h['design']}"))
    blocks += [_warn(w) for w in h["warnings"]]
    blocks.append({"kind": "link", "href": PREREGISTRATION_LINK,
                   "text": "The pre-registration this experiment was frozen with (frozen/PREREGISTRATION.md)"})
    blocks.append({"kind": "link", "href": ITEMS_LINK,
                   "text": "Every probe, item by item: prompt, expected output and each arm's final completion per "
                           "seed (items.html)"})
    return _section("verdict", "Verdict", blocks)


# ---------------------------------------------------------------- the verdict paragraph

_WRONG = {"supported": "is truly 0", "ruled_out": "truly equals the sesoi", "reversed": "is truly 0"}
_RIGHT = {"supported": "truly equals the sesoi", "ruled_out": "is truly 0"}
_REQUIRES = {  # what each label asks of the numbers (harness.stats.contrasts: the labels)
    "supported": "the one-sided sign test p < alpha, the interval's and the run bound's low ends above 0, and the "
                 "gap beyond the seed spread",
    "ruled_out": "the interval's and the run bound's high ends below the sesoi ({sesoi})",
    "reversed": "the mirror tests: the sign test p < alpha the other way, the interval's and the run bound's high "
                "ends below 0, and the gap beyond the seed spread the other way",
    "not_supported": "none of supported, ruled_out or reversed to hold",
}


def headline(verdict: Verdict | dict) -> dict:
    """The verdict paragraph, shared by the report's Verdict section and the command's last lines:
        sentence    the verdict sentence (the check that decided it, with its numbers)
        rule_alone  what the decision rule alone would have said when a check overrode it, else None
        deciding    one line per label that decided the verdict (B-A; C-B too once B-A is supported; the
                    failed check's rows when a check decided, `_check_trust`): its gap, interval and run
                    bound in points, what the label requires of them, and how often the rule gives it when
                    it is wrong (its level) and when it is right (its power) at the observed components
        trust       the same line for each other decision contrast (every one when a check decided),
                    under `trust_heading` (the report) or each after `trust_prefix` (the command's lines)
        design      one line: P(keep_both | both contrasts at the sesoi), designed and observed, or None
        warnings    every warning that bears on the verdict, each once (`verdict_warnings`)
    Every figure is read from verdict.json: the paragraph is a pure function of it."""
    verdict = as_verdict(verdict)
    v = verdict.verdict
    lines, level_warnings = _label_lines(verdict)
    keys = deciding_contrasts(verdict)
    by_check = v.by_check
    deciding = (_check_trust(verdict) if by_check else [lines[k] for k in keys]) + control_scale_lines(verdict)
    trust = [line for k, line in lines.items() if k not in keys]
    if by_check:
        heading, prefix = (f"The decision rule's labels (not read: the {v.decided_by} check decided), and how far "
                           "to trust them"), "Rule's label (not read)"
    else:
        heading, prefix = f"The other label{'s' if len(trust) > 1 else ''}, and how far to trust " \
                          f"{'them' if len(trust) > 1 else 'it'}", "Other label"
    return {"sentence": v.sentence, "rule_alone": v.rule_alone, "deciding": deciding, "trust": trust,
            "trust_heading": heading, "trust_prefix": prefix, "design": _resolves_line(verdict),
            "warnings": verdict_warnings(verdict, level_warnings)}


def _label_lines(verdict: Verdict) -> tuple[dict[str, str], list[str]]:
    """({contrast: its line (`_contrast_trust`)}, the warnings of labels whose observed level exceeds alpha)."""
    lines, warnings = {}, []
    for key, c in verdict.analysis.contrasts.items():
        lines[key], w = _contrast_trust(verdict, key, c)
        warnings += w
    return lines, warnings


def control_scale_lines(verdict: Verdict | dict) -> list[str]:
    """What a `ruled_out` means when the known-good arm is weak here: one sentence per positive control
    whose observed gain over the base on the probes (its registered check's row against the base) is
    below the sesoi; [] when every one reaches it (or none is registered against the base)."""
    verdict = as_verdict(verdict)
    contrasts = verdict.analysis.contrasts
    if not contrasts:
        return []
    sesoi = next(iter(contrasts.values())).sesoi
    out = []
    for r in verdict.controls.positive:
        if r.versus == "base" and r.gap < sesoi:
            out.append(f"The positive control {r.arm} gained {_pts(r.gap)} over the base on the probes, below the "
                       f"sesoi ({_pts(sesoi)}): the known-good training moves the probe pass rate less than the effect the "
                       f"rule asks about, so a `ruled_out` here rules out an effect larger than the known-good arm "
                       f"produces here, not one the instrument has shown it could see.")
    return out


def deciding_contrasts(verdict: Verdict | dict) -> list[str]:
    """The decision contrasts whose labels decided the verdict: B-A alone unless it is supported, then
    C-B too (the intersection-union rule, harness.stats.contrasts.outcome_of); none when a control did."""
    verdict = as_verdict(verdict)
    if verdict.verdict.decided_by != "decision rule":
        return []
    contrasts = verdict.analysis.contrasts
    return ["B-A"] if contrasts["B-A"].label != "supported" else [k for k in ("B-A", "C-B") if k in contrasts]


def _observed(verdict: Verdict) -> DesignAnalysis | None:
    """The design analysis at the observed components (None without one)."""
    return verdict.design.observed if verdict.design else None


def _contrast_trust(verdict: Verdict, key: str, c: Contrast) -> tuple[str, list[str]]:
    """(one contrast's line, the warning when its label's observed level exceeds alpha)."""
    sesoi = _pts(verdict.sesoi)
    label = c.label
    text = (f"{key} `{label}` (it requires {_REQUIRES[label].format(sesoi=sesoi)}): gap {_pts(c.gap)}, interval "
            f"[{_pts(c.ci_low)}, {_pts(c.ci_high)}], run bound " + _run_bound(c))
    obs = _observed(verdict)
    rel = label_reliability(obs, key, label)
    if rel is not None:
        text += (f"; at the observed variance components the rule says `{label}` with P {rel.level:.3f} when the "
                 f"gap {_WRONG[label]} (nominal alpha {rel.alpha})")
        if rel.power is not None:
            text += f" and with P {rel.power:.3f} when it {_RIGHT[label]}"
    elif label == "not_supported":
        found = label_reliability(obs, key, "supported")
        if found is not None and found.power is not None:
            text += (f"; at the observed variance components the rule says `supported` with P {found.power:.3f} "
                     f"when the gap truly equals the sesoi, so a gap that large goes unseen with P "
                     f"{1 - found.power:.3f}")
    return text + ".", _level_warnings(obs, key, label)


def _level_warnings(obs: DesignAnalysis | dict | None, key: str, got: str) -> list[str]:
    """A warning for every label of contrast `key` (the one it got first) whose level at the observed
    variance components exceeds alpha by more than 3 MC s.e. (`label_reliability`): a label the
    rule cannot give at its level here is worth knowing about whichever label this run found."""
    out = []
    for label in sorted(("supported", "ruled_out", "reversed"), key=lambda x: x != got):
        rel = label_reliability(obs, key, label)
        if rel is not None and rel.above_alpha:
            out.append(f"{key}'s label `{label}` holds its level poorly here"
                       + ("" if label == got else f" (not the label it got, `{got}`)")
                       + f": at the observed variance components it arises with P {rel.level:.3f} (MC s.e. "
                       f"{rel.level_se:.3f}) when the gap {_WRONG[label]}, above alpha {rel.alpha}")
    return out


def _run_bound(c: Contrast) -> str:
    """'[+1.2 pts, +3.4 pts]', or why there is none (the seeds showed no run spread)."""
    if c.run_bound_low is None or c.run_bound_high is None:
        return "unbounded (the seeds show no run spread: no evidence either way)"
    return f"[{_pts(c.run_bound_low)}, {_pts(c.run_bound_high)}]"


def _check_trust(verdict: Verdict) -> list[str]:
    """The lines of the failed check that decided the verdict (harness.readout.controls.final_verdict's
    `decided_by`): one per failed control row, with how often the registered check gives that result at
    the observed components (a positive control: passes at its registered effect and at none; a
    negative control: fires when the arm truly equals the one it must not beat); for another check,
    its reason."""
    v = verdict.verdict
    role = {"positive control": "positive", "negative control": "negative"}.get(v.decided_by)
    if role is None:
        return [f"{v.decided_by} check: {v.reason}."]
    obs = verdict.design.observed if verdict.design else None
    sims = {c.arm: c for c in obs.controls or [] if c.role == role} if obs and not obs.failed else {}
    out = []
    for r in (verdict.controls.positive if role == "positive" else verdict.controls.negative):
        if r.ok:
            continue
        rule = (f"a gap of at least the margin {_pts(r.margin)} and the one-sided sign test p < alpha "
                f"{r.alpha:g}" + ("" if role == "positive" else ", with the run bound's low end above 0"))
        text = (f"{role} control {r.arm} against {r.versus} ("
                + (f"it requires {rule}" if role == "positive" else f"it fails on {rule}")
                + f"): gap {_pts(r.gap)}, sign test p {_num(r.sign_p_greater, 3)}")
        sim = sims.get(r.arm)
        if sim is not None and role == "positive":
            text += (f"; at the observed variance components its registered check passes with P "
                     f"{sim.p_pass_at_effect:.3f} when {r.arm} is truly {_pts(sim.effect)} above A, and with P "
                     f"{sim.p_pass_at_0:.3f} when it is not above A at all")
        elif sim is not None:
            text += (f"; at the observed variance components its registered check fires with P "
                     f"{sim.p_fires_when_equal:.3f} when {r.arm} truly equals {sim.versus[0]} (nominal alpha "
                     f"{r.alpha:g})")
        out.append(text + ".")
    return out


def verdict_warnings(verdict: Verdict | dict, level_warnings: list[str] | None = None) -> list[str]:
    """Every warning that bears on the verdict, each once, in this order: a registration below its power
    (the stated override); a failed budget equality, wall clock or leakage check and the controls'
    warnings (`_warnings`); every label of every contrast whose observed level exceeds alpha
    (`level_warnings`, `_level_warnings`); the design analysis' warnings, as registered and at the
    observed components (those of the registered design that restate the override's shortfalls, and
    the observed design's label-level lines that `_level_warnings` restates, are left out)."""
    verdict = as_verdict(verdict)
    out = []
    shortfalls = verdict.registration.shortfalls if verdict.registration else None
    if shortfalls:
        out.append(f"registered below its power criterion by a stated override ({'; '.join(shortfalls)}); "
                   f"the reason given before any run: {verdict.registration.override}")
    out += _warnings(verdict) + list(level_warnings or [])
    d = verdict.design
    for name, where in (("designed", "the design as registered"), ("observed", "the design at the observed components")):
        for w in (getattr(d, name).warnings or []) if d else []:
            if name == "designed" and shortfalls and w.startswith(_SHORTFALL_WARNINGS):
                continue
            if name == "observed" and w.startswith(_RESTATED_LEVELS):  # the labels' own lines say it
                continue
            out.append(f"{where}: {w}")
    return list(dict.fromkeys(out))


# harness.stats.design.summary.design_warnings' lines that registration_shortfalls also lists
_SHORTFALL_WARNINGS = ("underpowered:", "at the pessimistic components", "the positive control (")
# harness.stats.design.summary.level_warnings' contrast lines, restated for the observed design by `_level_warnings`
_RESTATED_LEVELS = tuple(f"{LEVEL_WARNING}{key} `" for key in ("B-A", "C-B"))


def trust_lines(verdict: Verdict | dict) -> tuple[list[str], list[str]]:
    """(one line per decision contrast, the deciding ones first: its label, gap, interval and run bound in
    points, and how often the rule gives that label when it is wrong and when it is right at the variance
    components this experiment showed; the warnings for labels whose observed level exceeds alpha)."""
    verdict = as_verdict(verdict)
    lines, warnings = _label_lines(verdict)
    keys = deciding_contrasts(verdict)
    return [lines[k] for k in keys] + [line for k, line in lines.items() if k not in keys], warnings


def _resolves_line(verdict: Verdict) -> str | None:
    """Which design ran and what it could resolve (P(keep_both | sesoi) designed and observed), one line."""
    if not verdict.design:
        return None
    des = verdict.design.designed
    s, sesoi = des.size, des.sesoi
    if des.rule_failed:
        return f"{s.n_items} probes x {s.n_seeds} seeds per arm: {des.rule.error}."
    parts = [f"{s.n_items} probes x {s.n_seeds} seeds per arm. P(keep_both) when both contrasts "
             f"truly equal the sesoi ({_pts(sesoi)}): {des.keep_both_at_sesoi:.2f} as designed "
             f"({des.components.source} variance components)"]
    obs = verdict.design.observed
    if not obs.rule_failed:
        parts.append(f"{obs.keep_both_at_sesoi:.2f} at the variance components observed here")
    text = ", ".join(parts) + f"; registered power {des.power}."
    if des.keep_both_at_sesoi < des.power:
        text += " This design cannot resolve its own sesoi: read `not_resolved` as \"too small to tell\", not as no effect."
    return text


def _warnings(verdict: Verdict) -> list[str]:
    w = []
    budget, leak = verdict.checks.budget, verdict.checks.leakage
    if not budget.ok:
        w.append("a registered budget equality failed (see Compute ledger); the arms did not run on equal terms.")
    if budget.wall_clock_exceeded:
        w.append(f"wall clock exceeded the registered {budget.wall_clock_limit_s} s in "
                 f"{', '.join(budget.wall_clock_exceeded)} (recorded only; no run was cut).")
    if not leak.ok:
        w.append("the leakage check failed (see Leakage): probe tasks reached training; the probe comparison is "
                 "compromised.")
    return w + list(verdict.verdict.warnings)


def _arms(verdict: Verdict) -> dict:
    """What each registered arm is (its kind's description) and its role in the readout."""
    reg = verdict.inputs.registered
    defs = reg.definitions or {}
    rows = [[f"**{arm}**", f"`{defs.get(arm, {}).get('kind', '')}`", reg.roles.get(arm, ""),
             defs.get(arm, {}).get("what", "")] for arm in reg.arms]

    rows.insert(0, ["**base**", "-", "round -1", "the frozen base checkpoint every arm starts from (its probe "
                                                 "outcomes are each run's base evaluation)"])
    return _section("arms", "The arms", [
        _p("The decision rule reads B-A (does gated self-play beat SFT?) and C-B (does the HeirCommit gate add to it?). "
           "The controls test the instrument: the positive control must beat the base and A, the negative control "
           "must not beat B; the decomposition arm splits C - B."),
        _tbl(["arm", "kind", "role", "what it is"], rows)])


def _commit(git_commit, git_clean) -> str:
    """"`f9b20ef5e547`" with "(uncommitted changes)" when the checkout was not clean."""
    words = f"`{provenance.short(git_commit)}`" if git_commit else "not recorded"
    return words + (" (uncommitted changes)" if git_clean is False else "")


def provenance_line(verdict: Verdict | dict) -> str:
    """The report's header: the git commit and environment digest the protocol was frozen with, and
    whether every run was made with the same (else how many were not, named in the Provenance section)."""
    verdict = as_verdict(verdict)
    prov = verdict.provenance
    if not prov:
        return f"**Provenance:** not recorded in this verdict (format {verdict.format})."
    freeze, runs = prov.freeze, prov.runs
    if freeze is None:
        head = "**Provenance:** the lock records no environment"
    else:
        sha = freeze.environment_sha256
        head = (f"**Provenance:** frozen at git commit {_commit(freeze.git_commit, freeze.git_clean)} in "
                f"environment `{provenance.short(sha)}` ({provenance.summary(prov.environments[sha])})")
    same = freeze is not None and all(r is not None and r.git_commit == freeze.git_commit
                                      and r.environment_sha256 == freeze.environment_sha256 for r in runs.values())
    if same:
        return f"{head}; every run ({len(runs)}) on the same commit and environment."
    missing = sum(r is None for r in runs.values())
    other = [k for k, r in runs.items() if r is not None and freeze is not None
             and (r.git_commit, r.environment_sha256) != (freeze.git_commit, freeze.environment_sha256)]
    parts = [f"{len(other)} of {len(runs)} runs on another commit or environment (see Provenance)"] if other else []
    parts += [f"{missing} of {len(runs)} runs record none"] if missing else []
    return f"{head}; {'; '.join(parts)}."


def _provenance_blocks(verdict: Verdict) -> tuple[list[str], list[dict]]:
    """The Provenance section's lines on commits and environments, and a block per environment that
    differs from the freeze's (what differs, and which runs)."""
    prov = verdict.provenance
    if not prov:
        return [f"git commits and environments: not recorded in this verdict (format {verdict.format})"], []
    freeze, items, blocks = prov.freeze, [], []
    if freeze is not None:
        sha = freeze.environment_sha256
        items += [f"git commit at freeze: {_commit(freeze.git_commit, freeze.git_clean)} "
                  f"(`{freeze.git_commit}`)",
                  f"environment at freeze: sha256 `{sha}`: {provenance.summary(prov.environments[sha])}"]
    for sha, lines in prov.differences.items():
        runs = sorted(k for k, r in prov.runs.items() if r and r.environment_sha256 == sha)
        blocks += [_p(f"Environment `{provenance.short(sha)}` ({provenance.summary(prov.environments[sha])}), "
                      f"runs {', '.join(runs)}: {len(lines)} difference(s) from the freeze's:"), _ul(lines)]
    return items, blocks


def _provenance(verdict: Verdict) -> dict:
    inp, spec = verdict.inputs, verdict.analysis.spec
    boot, rec, reg = spec.bootstrap, inp.lock_recorded, inp.registered
    items = [f"lock hash: `{inp.lock_hash}`",
             f"lock file sha256: `{inp.lock_file_sha256}`",
             f"code version (harness, arms and families source): `{inp.code_version}`",
             *([f"task family: {_family_words(inp.task_family)}; as locked, sha256 "
                f"`{inp.task_family['lock_sha256']}`"] if inp.task_family else []),
             f"probe set sha256: `{inp.probe_set_sha256}` ({inp.n_probes} probes)",
             f"seed set sha256: `{inp.seed_set_sha256}`",
             f"base checkpoint sha256: `{inp.base_sha256}`",
             f"versions as recorded in the lock: python {rec['python']}, torch {rec['torch']} (frozen {rec['created']})",
             f"registered: arms {', '.join(reg.arms)}; seeds {', '.join(map(str, reg.seeds))}; {reg.rounds} rounds",
             f"bootstrap: two-stage (each arm's seeds, then items shared by both arms), {boot.method}, "
             f"{boot.n_resamples} resamples, two-sided level {boot.confidence_level} (each end a one-sided "
             f"bound at alpha), rng seed {boot.rng_seed}",
             f"decision rule: alpha {spec.alpha} for every one-sided test, sesoi {_pts(spec.sesoi)}, power "
             f"{spec.power}; beyond the seed spread: {_spread_words(spec.spread_rule)}"]
    made, differ = _provenance_blocks(verdict)
    runs_prov = verdict.provenance.runs if verdict.provenance else {}

    def made_by(key: str) -> list[str]:
        r = runs_prov.get(key)
        return [_commit(r.git_commit, r.git_clean), f"`{provenance.short(r.environment_sha256)}`"] if r \
            else ["not recorded", "not recorded"]
    rows = [[f"`{k}`", f"`{r.manifest_sha256[:16]}`", f"`{r.chain_heads.get('records.jsonl', '')[:16]}`",
             f"`{r.chain_heads.get('ledger.jsonl', '-')[:16]}`", r.final_round, *made_by(k)]
            for k, r in sorted(inp.runs.items())]
    return _section("provenance", "Provenance", [
        _ul(made + items), *differ, _p("Runs read (final round's probe outcomes):"),
        _tbl(["run", "manifest sha256", "records head", "ledger head", "final round", "git commit", "environment"],
             rows)])


def _family_words(fam: dict) -> str:
    """`code` version 1 (min_depth 2, ...): the task family as the verdict names it."""
    settings = ", ".join(f"{k} {v}" for k, v in fam["settings"].items())
    return f"`{fam['name']}` version {fam['version']} ({settings})"


def _spread_words(rule: SpreadRule | dict) -> str:
    """The seed rule in words (the analysis' spec, or the design analysis' alternative rule, a dict)."""
    rule = SpreadRule.from_dict(rule, "spread_rule")
    if rule.test == "welch":
        return "one-sided Welch t-test on the per-seed pass rates of both arms"
    return f"gap > {rule.multiplier} x the larger seed range of the two arms"


def _primary(verdict: Verdict) -> dict:
    a = verdict.analysis
    seeds = [str(s) for s in a.seeds]
    base = _base_rates(verdict)
    rows = [["base (round -1)"] + [_pct(base.get(s)) for s in seeds]]
    rows += [[arm] + [_pct(a.per_seed[arm][s]) for s in seeds] for arm in sorted(a.per_seed)]
    level = a.spec.bootstrap.confidence_level
    rows2 = [[arm, f"{m.passed}/{m.n}", _pct(m.mean), f"[{_pct(m.ci_low)}, {_pct(m.ci_high)}]"]
             for arm, m in sorted(a.arms.items())]
    fam = verdict.inputs.task_family  # verdicts from before task families name none
    return _section("primary", f"Primary metric: probe pass rate (correct@{verdict.inputs.max_bytes}B)", [
        *([_p(f"The probes are tasks of the family {_family_words(fam)}.")] if fam else []),
        _p("Pass rate per arm x seed (final round):"), _tbl(["arm"] + [f"seed {s}" for s in seeds], rows),
        _p(f"Per arm over items x seeds, {level:.0%} two-stage bootstrap interval (seeds, then items; seeds "
           f"averaged per item):"),
        _tbl(["arm", "passed", "mean", "bootstrap interval"], rows2)])


def _stratum_fields(verdict: Verdict) -> list[str]:
    """The parts of a stratum, as the task family names them (the code family's before families were named)."""
    return (verdict.inputs.task_family or {}).get("stratum_fields", ["depth", "template", "phrasing class"])


def _strata(verdict: Verdict) -> dict | None:
    """Per-stratum final pass rate per arm (items x seeds) beside the base's."""
    st = verdict.strata
    if not st:
        return None
    arms = sorted(st.arms)
    rows = [[f"`{name}`", st.n_items[name], _pct(st.base[name])] + [_pct(st.arms[a][name]) for a in arms]
            for name in st.names]
    cl = st.classes  # verdicts from before the program classes have none
    if cl:
        rows += [[f"class `{c}`", cl["n_items"][c], _pct(cl["base"][c])]
                 + [f"{_pct(cl['arms'][a][c])} ({_pts(cl['gain'][a][c])})" for a in arms] for c in cl["names"]]
    return _section("strata", "Per stratum: final probe pass rate per arm", [
        _p(f"A probe's stratum is {' / '.join(_stratum_fields(verdict))} (its task family's). Each cell is the arm's final-round "
           "pass rate over the stratum's probes x seeds; the base column is round -1. Descriptive only: the decision "
           "rule reads the whole probe set."
           + (f" The last rows group the probes by program class (how many programs share their structure: "
              f"{', '.join(cl['names'])}), with each arm's gain over the base in points." if cl else "")),
        _tbl(["stratum", "probes", "base"] + arms, rows)])


def _seed_rule(c: Contrast) -> str:
    if c.spread_test == "welch":
        return f"Welch p {_num(c.welch_p)} (t {c.welch_t if isinstance(c.welch_t, str) else _num(c.welch_t)})"
    return f"threshold {_pts(c.spread_threshold)}"


def _base_rates(verdict: Verdict) -> dict:
    """seed -> the base's probe pass rate (the same frozen base in every run; the first arm's record)."""
    out: dict = {}
    for _, srs in sorted(verdict.series.items()):
        out.setdefault(str(srs.seed), srs.base["probe_pass_rate"])
    return out


def _controls(verdict: Verdict) -> dict:
    """The control checks, before the decision: they say whether the contrasts can be read."""
    c = verdict.controls
    items = []
    if c.positive_ok is None:
        items.append("no positive control is registered: nothing shows the instrument can see an improvement")
    for role, rows, want in (("positive", c.positive, "must beat"), ("negative", c.negative, "must not beat")):
        for r in rows:
            items.append(f"{_ok(r.ok)}: {role} control {r.arm} {want} {r.versus} by {_pts(r.margin)} "
                         f"(gap {_pts(r.gap)}, items {r.hi_only} for / {r.lo_only} against of {r.n_items}, "
                         f"one-sided sign p {_num(r.sign_p_greater)} vs alpha {r.alpha})")
    return _section("controls", "Control checks (before the decision)", [
        _ul(items),
        _p("A control beats another arm when the mean gap over items x seeds is at least the registered margin "
           "and the one-sided exact sign test on the items' net differences gives p < alpha (for the negative control, "
           "also the run bound's low end above 0: its false alarms must stay at alpha with run spread). If the "
           "positive control "
           "fails, the pre-registered outcome is `instrument_insensitive`. If the negative control beats an arm it "
           f"must not beat, {_consequence(verdict, 'negative control')}.")])


def _consequence(verdict: Verdict, check: str) -> str:
    """What a failure of `check` ("negative control", "infrastructure balance") does to the verdict, as
    decision.yaml registers it (the verdict's `overrides`)."""
    key = OVERRIDE_KEYS[check]
    reason = (verdict.verdict.overrides or {}).get(key)
    if reason is None:
        return (f"the pre-registered outcome is `{CHECK_OUTCOMES[check][0]}` (the rule's own outcome is reported as "
                f"what it alone would have said)")
    return (f"the rule's verdict stands and the failure is a warning beside it, as registered (decision.yaml {key}: "
            f"{reason})")


def _against_base(verdict: Verdict) -> dict:
    """Every arm's final pass rate against the base, paired by probe item."""
    rows = [[arm, _pct(b.mean_lo), _pct(b.mean_hi), _pts(b.gap), f"{b.hi_only} / {b.lo_only}",
             _num(b.sign_p_greater), _num(b.sign_p_less), b.reading]
            for arm, b in sorted(verdict.against_base.items())]
    return _section("against-base", "Every arm against the base (round -1)", [
        _tbl(["arm", "base", "final", "gap", "items above / below", "sign p (above)", "sign p (below)", "reading"], rows),
        _p("An arm that ends below the base is damage, whatever the contrasts say.")])


def _contrasts(verdict: Verdict, figures: list[str]) -> dict:
    contrasts = verdict.analysis.contrasts
    rows = [[key, _pts(c.gap), f"[{_pts(c.ci_low)}, {_pts(c.ci_high)}]",
             f"{c.n_items_hi} / {c.n_items_lo} / {c.n_items_tied}", _num(c.sign_p), _seed_rule(c),
             f"`{c.label}`"] for key, c in sorted(contrasts.items())]
    items = [contrast_bullet(key, c) for key, c in sorted(contrasts.items())]
    return _section("contrasts", "Contrasts (paired by probe item)", [
        _p("Sign test: exact one-sided binomial on the signs of each item's net difference across seeds. "
           "Interval: two-stage bootstrap. Seed rule: see Provenance. Every number is invariant to how seeds "
           "are labelled."),
        _tbl(["contrast", "gap", "interval", "items hi / lo / tied", "sign test p (one-sided)", "seed rule", "label"],
             rows), _ul(items)] + _fig_blocks(figures, verdict, "contrasts.png"))


def contrast_bullet(key: str, c: Contrast | dict) -> str:
    """One contrast's criteria in words, those that held and those that did not, then each arm's per-seed
    pass rates (lowest first: seeds carry no label), e.g. "B-A: held: ...; not held: ...; per-seed pass
    rates B 50.0%, 52.5%; A 25.0%, 27.5%"."""
    c = Contrast.from_dict(c, f"contrast {key}")
    held = [CRITERIA_WORDS.get(k, k.replace("_", " ")) for k, ok in sorted(c.criteria.items()) if ok]
    failed = [CRITERIA_WORDS.get(k, k.replace("_", " ")) for k, ok in sorted(c.criteria.items()) if not ok]
    return (f"{key}: held: {', '.join(held) or 'none'}; not held: {', '.join(failed) or 'none'}; per-seed pass rates "
            f"{c.hi} {', '.join(_pct(r) for r in c.seed_rates_hi)}; {c.lo} "
            f"{', '.join(_pct(r) for r in c.seed_rates_lo)}")


def _rule_clauses(verdict: Verdict) -> dict:
    """The decision rule's clauses and what each contrast shows (its outcome is stated once, in the Verdict)."""
    v = verdict.analysis.verdict
    return _section("rule", "The decision rule, clause by clause", [
        _p("Clauses of the pre-registered rule:"),
        _ul([f"{name}: {'held' if held else 'did not hold'}" for name, held in v.clauses_held.items()]),
        _p("What each contrast shows (labels: `supported` = shown above 0 by all four one-sided tests, "
           "`not_supported`, `ruled_out` = the interval's and the run bound's high ends below the sesoi, `reversed` = "
           "shown below 0 by the mirror tests):"),
        _ul([f"{key}: {c.says}" for key, c in sorted(v.contrasts.items())])])



def _design(design: Design | dict | None, summaries: list[tuple[str, dict | None]] = ()) -> dict | None:
    """The operating characteristic, designed (freeze's components) and observed (this experiment's);
    `summaries` [(column name, the verdict's flat design summary)] add the summary table when both are there."""
    if not design:
        return None
    d = Design.from_dict(design, "design")
    des = d.designed
    s = des.size
    blocks = [_p(f"Design run: {s.n_items} probes x {s.n_seeds} seeds x arms {', '.join(s.arms)}. The "
                 f"readout's own decision rule applied to {des.replicates} simulated experiments per cell (bootstrap "
                 f"{des.bootstrap_resamples} resamples inside the simulation, registered "
                 f"{des.registered_resamples}); ± is the Monte-Carlo standard error.")]
    for name, result in (("designed", des), ("observed", d.observed)):
        if result.failed:
            blocks.append(_p(f"Observed variance components unavailable: {result.error}"))
            continue
        blocks += _design_blocks(name, result)
    if summaries and all(isinstance(v, dict) for _, v in summaries):
        blocks += design_summary_blocks(list(summaries))

    return _section("design", "Design analysis: what this experiment could resolve", blocks)


def _design_blocks(name: str, x: DesignAnalysis) -> list[dict]:
    """One design analysis (designed or observed): its components, the rule's cells, and the items."""
    c = x.components
    what = {"assumed": "the registered ASSUMPTIONS (no pilot)", "pilot": "the pilot",
            "observed": "this experiment's outcomes"}[c.source]
    read = words.rounds_read_words(c).strip(" ()")
    blocks = [_h3(f"{name.capitalize()} (variance components from {what}{'; ' + read if read else ''})"),
              _p(f"Item sd {c.item_sd:.3f}, arm x item sd {c.arm_item_sd:.3f}, run sd "
                 + ", ".join(f"{a} {v:.3f}" for a, v in c.run_sd.items()) + f" (logit); control pass rate "
                 f"{_pct(c.control_rate)}.")]
    rule = x.rule
    if rule.error is not None:
        return blocks + [_ul([rule.error])]
    rows = [[_pts(cell.effect_BA), _pts(cell.effect_CB)]
            + [f"{cell.verdict[o]:.3f} ± {cell.verdict_se[o]:.3f}" for o in OUTCOME_ORDER]
            for cell in rule.cells]
    blocks.append(_tbl(["true B-A", "true C-B"] + list(OUTCOME_ORDER), rows))
    fp, at = rule.keep_both_false_positive, rule.keep_both_at_sesoi
    items = [f"keep_both false-positive rate (the largest over the null set, at {[_pts(e) for e in fp.at]}): "
             f"{fp.p:.3f} ± {fp.se:.3f} (alpha {x.alpha})",
             f"P(keep_both) at the sesoi on both contrasts: {at.p:.3f} ± {at.se:.3f} "
             f"(registered power {x.power})"]
    alt = rule.alternative
    if alt:
        items.append(f"the other spread rule ({_spread_words(alt.spread_rule)}) on the same simulated "
                     f"experiments: P(keep_both) at the sesoi {alt.keep_both_at_sesoi:.3f}, false-positive rate "
                     f"{alt.keep_both_false_positive:.3f}")
    if x.positive_control is not None:
        items.append("one contrast against A, P(supported) by true effect: " + ", ".join(
            f"{_pts(p.effect)}: {p.labels['supported']:.3f}" for p in x.positive_control.curve))
    for c in x.controls or []:
        if c.positive:
            items.append(f"positive control {c.arm}, its registered check itself (beats {' and '.join(c.versus)} "
                         f"by {_pts(c.margin)}, sign test): P(pass) {c.p_pass_at_effect:.3f} ± "
                         f"{c.p_pass_at_effect_se:.3f} at {_pts(c.effect)} over A; {c.p_pass_at_0:.3f} at no effect")
        else:
            items.append(f"negative control {c.arm}, its registered check itself (must not beat "
                         f"{' and '.join(c.versus)} by {_pts(c.margin)}): P(fires) {c.p_fires_when_equal:.3f} ± "
                         f"{c.p_fires_when_equal_se:.3f} when it truly equals {c.versus[0]}")
    if x.gate is not None:
        g = x.gate
        gate = (f"C's confirm gate ({g.rule}, margin {g.margin}, {g.n_confirm} probes per round), "
                "P(commit) by true successor - root difference: "
                + ", ".join(f"{_pts(p.diff)}: {p.p_commit:.2f}" for p in g.curve))
        if g.rule == "not_worse" and g.margin == 0:
            gate += " (not_worse with margin 0 commits on ties: alpha plays no part in it)"
        items.append(gate)
    items += [line.split(": ", 1)[1] for line in words.design_lines(x)
              if line.startswith(("design: run spread pooled", "design: pessimistic", "design: note:"))]
    items += [f"**Warning:** {w}" for w in x.warnings]
    return blocks + [_ul(items)]


SUMMARY_WORDS = {  # verdict.json's design_summary keys (harness.stats.design.summary.design_summary), in words
    "positive_control_power": "P(the positive control's registered check passes) at its registered effect",
    "keep_both_at_sesoi": "P(keep_both) when both contrasts truly equal the sesoi",
    "keep_both_false_positive": "P(keep_both) at the worst true effects with no gain (false positive)",
    "ruled_out_at_sesoi": "P(ruled_out) when a contrast truly equals the sesoi (its level)",
    "gate_commit_at_minus_sesoi": "P(C's gate commits) when the successor is truly a sesoi worse",
    "gate_commit_at_plus_sesoi": "P(C's gate commits) when the successor is truly a sesoi better",
}


def design_summary_blocks(summaries: list[tuple[str, dict]]) -> list[dict]:
    """The flat design summaries [(column name, design_summary dict), ...] as one table, a row per figure
    (in words, with its verdict.json key) and a column per summary: narrow enough for the page."""
    keys = list(summaries[0][1])
    rows = [[SUMMARY_WORDS.get(k, k), f"`{k}`", *("n/a" if v[k] is None else f"{v[k]:.3f}" for _, v in summaries)]
            for k in keys]
    return [_h3("Design summary"), _tbl(["figure", "key in verdict.json", *(name for name, _ in summaries)], rows)]


def _secondary(verdict: Verdict) -> dict:
    bpb = verdict.secondary.heldout_bpb
    seeds = sorted({s for arm in bpb.values() for s in arm.final_per_seed}, key=int)
    rows = [[arm, _num(m.base)] + [_num(m.final_per_seed.get(s)) for s in seeds] + [_num(m.final_mean)]
            for arm, m in sorted(bpb.items())]
    return _section("secondary", "Secondary metric: held-out bits per byte (lower is better)", [
        _p(BPB_TEXT), _tbl(["arm", "base"] + [f"seed {s}" for s in seeds] + ["final mean"], rows)])


BPB_TEXT = ("Bits per byte of each probe task's reference program given its prompt (harness.running.evaluation.heldout_pairs: "
            "the probe set's programs, which no arm trains on), lower is better; measured at the base and after every "
            "round.")


def _curves(verdict: Verdict, figures: list[str]) -> dict | None:
    """The learning curves: probe pass rate, held-out bits per byte and training loss per round."""
    blocks = _fig_blocks(figures, verdict, "probe_pass_rate.png", "heldout_bpb.png", "train_loss.png")
    return _section("curves", "Learning curves", blocks) if blocks else None


def _monitors(verdict: Verdict, figures: list[str]) -> dict:
    mon = verdict.monitors_final
    keys = [k for k in MONITOR_LABELS if any(m.get(k) is not None for m in mon.values())]
    rows = [[MONITOR_LABELS[k]] + [_num(mon[arm].get(k)) for arm in sorted(mon)] for k in keys]
    return _section("monitors", "Monitors (final round, mean over seeds)",
                    [_tbl(["monitor"] + sorted(mon), rows)] + _fig_blocks(figures, verdict, "monitors.png"))


def _heircommit(verdict: Verdict, figures: list[str]) -> dict | None:
    runs = {s_key: s for s_key, s in sorted(verdict.series.items()) if any(r.has("heircommit") for r in s.rounds)}
    if not runs:
        return None
    rows = []
    for key, s in runs.items():
        for r in s.rounds:
            h = r.heircommit
            if h is None:
                continue
            screen = f"{h['screen'][0]} vs {h['screen'][1]} of {h['screen'][2]}" if h["screen"] else "none"
            recovery = (f"{h['recovery_steps']} steps" if h["recovery_ran"]
                        else f"no ({h['continued_steps']} steps continued the update)" if h["continued_steps"] else "no")
            rows.append([key, r.round, h["decision"], screen, recovery,
                         f"{h['confirm'][0]} vs {h['confirm'][1]} of {h['confirm'][2]}", h["rule"],
                         _num(h["sign_test_p"]), _pts(h["mde"]) if h["rule"] == "superior" else "-"])
    rows2 = [[k, f"{t.retained}/{t.rounds}", ", ".join(map(str, t.committed)) or "none",
              "yes (retained every round)" if t.final_is_base else "no",
              f"{t.final_equal_to_base}/{t.n_probes}"] for k, t in sorted(verdict.retained.items())]
    return _section("gate", "The commit gate (C; D without recovery): commit / retain per round", [
        _tbl(["run", "round", "decision", "screen succ vs root", "recovery", "confirm succ vs root", "rule",
              "sign p", "MDE (superior rule only)"], rows),
        _p("Retained rounds and the final model:"),
        _tbl(["run", "retained", "committed rounds", "final model is the base", "final outcomes equal to the base's"],
             rows2)] + _fig_blocks(figures, verdict, "heircommit.png", "commit_curve.png"))


def _ledger_cell(values: list[int]) -> str:
    return str(values[0]) if len(set(values)) == 1 else " / ".join(map(str, values))


def _budget(verdict: Verdict) -> dict:
    """The whole compute ledger, side by side per arm (a cell lists seeds in order where they
    differ), then the registered equalities and the wall clock."""
    b = verdict.checks.budget
    arms = sorted(b.per_arm["learner_steps"])
    rows = [[k + (" (held equal)" if k in b.held_equal else "")] + [_ledger_cell(b.per_arm[k][a]) for a in arms]
            for k in b.fields]
    items = [f"{_ok(c.ok)}: {c.check}" + (f" ({c.detail})" if c.detail else "") for c in b.checks]
    items.append("(a failed equality is flagged, not refused: the runner refuses any round that breaks the "
                 "registration or charges other than what it did, so only records written by other code can fail here)")
    over = b.wall_clock_exceeded
    items.append(f"{'FLAG' if over else 'PASS'}: wall clock within the registered {_num(b.wall_clock_limit_s, 6)} s "
                 f"per run{': exceeded by ' + ', '.join(over) if over else ''} (recorded and reported, never used to cut "
                 f"a run)")
    own, theirs = b.own_training or {}, b.contenders_training
    apart = [_p(f"{a} is a control, not a contender, registered with a training budget of its own (arms.yaml): "
                f"{t['learner_steps_per_round']} learner steps per round at lr {t['lr']:g}, against budget.yaml's "
                f"{theirs['learner_steps_per_round']} at lr {theirs['lr']:g} for "
                f"every other arm; its learner_steps row differs by registration, and its fresh tasks with them.")
             for a, t in own.items()]
    return _section("ledger", "Compute ledger", [
        _p("Totals per run (base evaluation + every round). Held equal by registration: " + ", ".join(b.held_equal)
           + "; every other row is what an arm's design spends."), *apart,
        _tbl(["ledger entry"] + arms, rows), _ul(items),
        _p("Wall clock per run (s): " + ", ".join(f"{k} {_num(w, 6)}" for k, w in sorted(b.wall_clock_s.items())))])


def _leakage(verdict: Verdict) -> dict:
    leak = verdict.checks.leakage
    overlap = leak.seed_set_probe_overlap
    items = [f"{_ok(not leak.probe_hashes_at_solver)}: no probe task or program reached the solver "
             f"({leak.solver_tasks_checked} solver tasks checked across the ledgers; "
             f"{leak.probe_collisions_stopped_before_solver} probe collisions stopped before the solver)",
             f"{_ok(overlap == {'canonical': 0, 'program': 0})}: seed set holds no probe "
             f"program (overlap: {overlap['canonical']} canonical, {overlap['program']} program)",
             f"confirm-set hashes at the solver: {leak.confirm_hashes_at_solver}"]
    guard = leak.leak_guard or {}
    if guard:
        items.append(f"registered leak guard (tasks.yaml): no probe, confirm or calibration program is trained on; "
                     f"the same steps with other constants are "
                     f"{'trained on' if guard.get('same_ops_other_constants') == 'train' else 'held out too'}")
    items += [f"leak: `{x['ledger']}` line {x['line']} task `{x['task'][:16]}` matched by {', '.join(x['matched'])}"
              for x in leak.probe_hashes_at_solver]
    return _section("leakage", "Leakage", [_ul(items)])


def _deviations(verdict: Verdict) -> dict | None:
    """Deviations from the pre-registration logged after freeze (None while the verdict has no such field)."""
    if not verdict.has("deviations"):
        return None
    devs = verdict.deviations.entries
    if not devs:
        return _section("deviations", "Deviations", [_p("none (no deviation was logged after freeze)")])
    rows = [[d["date"], d["what"], d["why"], d["who"], d["outcome_seen"]] for d in devs]
    return _section("deviations", "Deviations", [
        _p("Logged after freeze with `python -m harness deviation`; none of them changed frozen content (that is "
           "refused)."), _tbl(["date", "what", "why", "who", "outcome seen"], rows)])


def _limitations(verdict: Verdict) -> dict:
    """What the verdict does not speak for, with the measured figure that says how much
    (docs/statistics.md, "The base is one draw")."""
    base = next(iter(verdict.against_base.values()), None)
    rate = "" if base is None else f", passing {_pct(base.mean_lo)} of the probes"
    sha = (verdict.inputs.base_sha256 or "unrecorded")[:12]
    return _section("limitations", "Limitations", [_ul([
        f"**The base is one draw.** Every arm started from the one base this protocol's recipe built (sha256 "
        f"{sha}{rate}): the verdict is about the loop started from that base, not about the recipe. Another "
        "draw of the same recipe can move the contrasts by more than the sesoi: on the main protocol's recipe, "
        "base seeds 7 and 8 built bases passing 10.9% and 35.7% of the probes, B-A read -0.9 pts (`ruled_out`) "
        "and -10.8 pts (`reversed`), and the verdicts differed (docs/statistics.md, \"The base is one draw\"). "
        "The intervals resample this base's seeds and probes only; bases as a registered factor are not built."])])


def figure_caption(name: str, verdict: Verdict | dict) -> str:
    """The caption of figure `name` (units as in the text: pass rates in %, gaps in points)."""
    verdict = as_verdict(verdict)
    level = verdict.analysis.spec.bootstrap.confidence_level
    sesoi = _pts(verdict.sesoi)

    return {
        "probe_pass_rate.png": "probe pass rate (%) per round per arm, mean over seeds, band the seeds' min..max; "
                               "round -1 and the dashed black line are the base. The base and the last round score "
                               "every probe; the rounds between score the registered subset "
                               "(budget.intermediate_eval_probes), the same probes for every arm and seed.",
        "heldout_bpb.png": "held-out bits per byte per round per arm (lower is better), mean over seeds, band the "
                           "seeds' min..max; round -1 is the base.",
        "train_loss.png": "mean training loss of each round's learner steps per arm, mean over seeds, band min..max; "
                          "one panel per objective, each on its own y axis: the supervised arms' masked cross-entropy "
                          "(nats per byte) and the self-play arms' advantage-weighted surrogate (advantages centred within each "
                          "group, so it stays near 0), not comparable with each other.",
        "contrasts.png": f"each contrast's gap in points with its {level:.0%} two-stage bootstrap interval; dashed "
                         f"line the sesoi ({sesoi}), solid line 0.",
        "heircommit.png": "the commit gate's decision per round per run (C and D, each run labelled by its own arm "
                          "and seed): filled green commit, open red retain.",
        "commit_curve.png": "C's confirm gate, P(commit) against the true successor - root difference in points, "
                            "designed and observed (band ± 2 Monte-Carlo standard errors).",
        "monitors.png": "the collapse monitors per round per arm, mean over seeds, band the seeds' min..max; each "
                        "panel's y range is the monitor's own (a monitor stuck at one value is drawn flat).",
    }.get(name, name)


# ---------------------------------------------------------------- figures

def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=FIGURE_DPI)
    FigureCanvasAgg(fig)
    return fig


def _integer_rounds(ax) -> None:
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig, path: Path) -> None:
    fig.savefig(path, format="png", dpi=FIGURE_DPI, metadata=PNG_METADATA)


def _by_arm(series: dict[str, Series]) -> dict[str, list[Series]]:
    out: dict[str, list[Series]] = {}
    for _, s in sorted(series.items()):
        out.setdefault(s.arm, []).append(s)
    return out


def _run_label(s: Series) -> str:
    """A run's label in a figure: its own arm and seed (never another arm's)."""
    return f"{s.arm} seed {s.seed}"


def _curve_figure(verdict: Verdict, path: Path, key: str, ylabel: str, title: str, scale: float = 1.0,
                  with_base: bool = True) -> bool:
    """One metric per round per arm: mean over seeds, band = min..max over seeds; x = -1 is the base
    (drawn once, black, when `with_base`). Values x `scale`. False (nothing drawn) when no run records it."""
    by_arm = _by_arm(verdict.series)
    if not _recorded(by_arm, key):
        return False
    fig = _figure(7.6, 4.2)
    ax = fig.add_subplot()
    _draw_curves(ax, verdict, by_arm, key, scale, with_base)
    ax.set_xlabel("round (-1 = base)" if with_base else "round")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.subplots_adjust(left=0.1, right=0.74, bottom=0.13, top=0.9)
    _save(fig, path)
    return True


def _recorded(by_arm: dict[str, list[Series]], key: str) -> bool:
    return any(r.value(key) is not None for runs in by_arm.values() for s in runs for r in s.rounds)


def _draw_curves(ax, verdict: Verdict, by_arm: dict[str, list[Series]], key: str, scale: float,
                 with_base: bool) -> None:
    """Each arm's mean over seeds with its min..max band on `ax` (and the base at x = -1 and as a dashed line)."""
    for arm, runs in by_arm.items():
        x = [r.round for r in runs[0].rounds]
        y = np.array([[np.nan if r.value(key) is None else scale * r.value(key) for r in s.rounds] for s in runs],
                     float)
        if with_base:
            x = [-1] + x
            y = np.column_stack([[np.nan if s.base.get(key) is None else scale * s.base[key] for s in runs], y])
        colour = ARM_COLOURS.get(arm)
        ax.plot(x, np.nanmean(y, axis=0), marker="o", color=colour, label=f"{arm} (mean of {len(runs)} seeds)")
        ax.fill_between(x, np.nanmin(y, axis=0), np.nanmax(y, axis=0), color=colour, alpha=0.18, linewidth=0)
    if with_base:
        base = [scale * s.base[key] for s in verdict.series.values() if s.base.get(key) is not None]
        if base:
            ax.axhline(float(np.mean(base)), color=BASE_COLOUR, linestyle="--", linewidth=1, label="base (round -1)")
    _integer_rounds(ax)


LOSS_PANELS = (  # train_loss.png: one panel per objective, each on its own y axis
    ("sft", "supervised arms: masked cross-entropy (nats per byte)"),
    ("rollouts", "self-play arms: advantage-weighted surrogate (advantages centred per group: near 0)"),
)


def loss_groups(verdict: Verdict | dict) -> dict[str, list[str]]:
    """{"sft": arms trained on reference solutions, "rollouts": arms that learn from their own verified
    rollouts}, by each arm's registered kind (harness.spec.kinds: a kind that samples rollouts); arms
    whose kind is unknown here go with the supervised ones. Only arms with a recorded training loss."""
    from harness.spec.kinds import KINDS
    verdict = as_verdict(verdict)
    defs = verdict.inputs.registered.definitions or {}
    out: dict[str, list[str]] = {"sft": [], "rollouts": []}
    for arm, runs in _by_arm(verdict.series).items():
        if not _recorded({arm: runs}, "train_loss"):
            continue
        kind = KINDS.get(defs.get(arm, {}).get("kind"))
        out["rollouts" if kind is not None and kind.needs.rollouts else "sft"].append(arm)
    return out


def _loss_figure(verdict: Verdict, path: Path) -> bool:
    """Training loss per round per arm, one panel per objective (supervised, self-play) with its own
    y axis: the two losses are on different scales and not comparable. False when no run records one."""
    groups = {g: arms for g, arms in loss_groups(verdict).items() if arms}
    if not groups:
        return False
    by_arm = _by_arm(verdict.series)
    panels = [(g, title) for g, title in LOSS_PANELS if g in groups]
    fig = _figure(7.6, 0.6 + 3.0 * len(panels))
    for i, (g, title) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        _draw_curves(ax, verdict, {a: by_arm[a] for a in groups[g]}, "train_loss", 1.0, with_base=False)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("mean loss")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.axes[-1].set_xlabel("round")
    fig.subplots_adjust(left=0.1, right=0.74, bottom=0.5 / fig.get_figheight(), top=1 - 0.35 / fig.get_figheight(),
                        hspace=0.45)
    _save(fig, path)
    return True


def _contrast_figure(verdict: Verdict, path: Path) -> None:
    """Each contrast's gap (points) with its bootstrap interval, the spread threshold and the sesoi."""
    contrasts = verdict.analysis.contrasts
    keys = sorted(contrasts)
    fig = _figure(7.0, 1.4 + 0.8 * len(keys))
    ax = fig.add_subplot()
    ranged = False
    for i, key in enumerate(keys):
        c = contrasts[key]
        gap, lo, hi = 100 * c.gap, 100 * c.ci_low, 100 * c.ci_high
        ax.errorbar([gap], [i], xerr=[[gap - lo], [hi - gap]], fmt="o", color="black", capsize=4)
        if c.has("spread_threshold"):
            ranged = True
            ax.plot([100 * c.spread_threshold], [i], marker="|", markersize=16, markeredgewidth=2, color="tab:red",
                    zorder=3)
    ax.axvline(0.0, color="gray", linewidth=1)
    ax.axvline(100 * verdict.sesoi, color="gray", linestyle="--", linewidth=1, label=f"sesoi ({_pts(verdict.sesoi)})")
    ax.set_yticks(range(len(keys)), [f"{k} ({contrasts[k].label})" for k in keys])
    ax.set_ylim(-0.7, len(keys) - 0.3)
    level = verdict.analysis.spec.bootstrap.confidence_level
    ax.set_xlabel("pass-rate gap (pts)" + (" (red tick: the range rule's threshold)" if ranged else ""))
    ax.set_title(f"Contrasts with {level:.0%} two-stage bootstrap intervals")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    width = max(len(f"{k} ({contrasts[k].label})") for k in keys)
    fig.subplots_adjust(left=min(0.45, 0.03 + 0.0115 * width), right=0.78, bottom=0.8 / fig.get_figheight(),
                        top=1 - 0.45 / fig.get_figheight())
    _save(fig, path)


def gate_runs(verdict: Verdict | dict) -> list[Series]:
    """The runs with a commit gate (C, D), in key order: what heircommit.png plots, one row each."""
    return [s for _, s in sorted(as_verdict(verdict).series.items()) if any(r.has("heircommit") for r in s.rounds)]


def gate_labels(verdict: Verdict | dict) -> list[str]:
    """heircommit.png's row labels, one per gate run, each its own arm and seed."""
    return [_run_label(s) for s in gate_runs(verdict)]


def _heircommit_figure(verdict: Verdict, path: Path) -> bool:
    """The commit gate's commit (filled) / retain (open) decision per round per run. False if no run has a gate."""
    runs = gate_runs(verdict)
    if not runs:
        return False
    fig = _figure(6.4, 1.3 + 0.45 * len(runs))
    ax = fig.add_subplot()
    for i, s in enumerate(runs):
        for r in s.rounds:
            if not r.has("heircommit"):
                continue
            commit = r.heircommit["decision"] == "commit"
            ax.plot([r.round], [i], marker="o", markersize=10, color="tab:green" if commit else "tab:red",
                    fillstyle="full" if commit else "none")
    ax.set_yticks(range(len(runs)), gate_labels(verdict))
    ax.set_ylim(-0.7, len(runs) - 0.3)
    ax.set_xlim(-0.5, max(len(s.rounds) for s in runs) - 0.5)
    _integer_rounds(ax)
    ax.set_xlabel("round (filled green: commit, open red: retain)")
    ax.set_title("Commit gate decisions per run")
    fig.subplots_adjust(left=0.16, right=0.97, bottom=0.7 / fig.get_figheight(), top=1 - 0.45 / fig.get_figheight())
    _save(fig, path)
    return True


def _commit_curve_figure(verdict: Verdict, path: Path) -> bool:
    """C's confirm gate: P(commit) against the true successor - root difference, designed and observed."""
    d = verdict.design
    results = [(name, getattr(d, name)) for name in ("designed", "observed")] if d else []
    curves = [(name, x.gate, x.components.source) for name, x in results if x.gate is not None]
    if not curves:
        return False
    fig = _figure(6.4, 4.0)
    ax = fig.add_subplot()
    for (name, g, source), style in zip(curves, ("-", "--")):
        x = [100 * p.diff for p in g.curve]
        y = np.array([p.p_commit for p in g.curve])
        se = np.array([p.se for p in g.curve])
        ax.plot(x, y, style, marker="o", label=f"{name} ({source} components)")
        ax.fill_between(x, y - 2 * se, y + 2 * se, alpha=0.2, linewidth=0)
    g = curves[0][1]
    ax.axvline(0.0, color="gray", linewidth=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("true successor - root pass-rate difference (pts)")
    ax.set_ylabel("P(commit)")
    ax.set_title(f"C's confirm gate: {g.rule}, margin {g.margin}, {g.n_confirm} probes per round")
    ax.legend(loc="lower right")
    _save(fig, path)
    return True


def _monitor_figure(verdict: Verdict, path: Path) -> bool:
    """Every monitor per round per arm: mean over seeds, band = min..max over seeds. A monitor that does
    not move gets a fixed +-0.5 y range around its value (no autoscaled V out of rounding noise)."""
    by_arm = _by_arm(verdict.series)
    keys = [k for k in MONITOR_LABELS if _recorded(by_arm, k)]
    if not keys:
        return False
    cols = 2
    rows = max(1, -(-len(keys) // cols))
    fig = _figure(10.0, 2.6 * rows + 0.6)
    for i, key in enumerate(keys):
        ax = fig.add_subplot(rows, cols, i + 1)
        seen = []
        for arm, runs in by_arm.items():
            x = [r.round for r in runs[0].rounds]
            y = np.array([[np.nan if r.value(key) is None else r.value(key) for r in s.rounds] for s in runs], float)
            if np.all(np.isnan(y)):
                continue
            seen.append(y[~np.isnan(y)])
            ax.plot(x, np.nanmean(y, axis=0), marker="o", markersize=3, color=ARM_COLOURS.get(arm), label=arm)
            ax.fill_between(x, np.nanmin(y, axis=0), np.nanmax(y, axis=0), color=ARM_COLOURS.get(arm), alpha=0.15,
                            linewidth=0)
        values = np.concatenate(seen) if seen else np.array([0.0])
        if np.ptp(values) < 1e-6:
            ax.set_ylim(values[0] - 0.5, values[0] + 0.5)
        _integer_rounds(ax)
        ax.set_title(MONITOR_LABELS[key], fontsize=9)
        ax.set_xlabel("round", fontsize=8)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=8)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.5 / fig.get_figheight(), top=1 - 0.6 / fig.get_figheight(),
                        hspace=0.6, wspace=0.2)
    _save(fig, path)
    return True


FIGURES = ("probe_pass_rate.png", "heldout_bpb.png", "train_loss.png", "contrasts.png", "heircommit.png",
           "commit_curve.png", "monitors.png")


def write_figures(verdict: Verdict | dict, out_dir) -> list[str]:
    """Draw the figures into out_dir (beside report.md) with matplotlib's default style;
    returns the file names drawn (a subset of FIGURES, in that order)."""
    import matplotlib.style
    verdict = as_verdict(verdict)
    out = Path(out_dir)

    drawers = {
        "probe_pass_rate.png": lambda p: _curve_figure(verdict, p, "probe_pass_rate", "probe pass rate (%)",
                                                       "Probe pass rate per round (band: seed min..max)", scale=100),
        "heldout_bpb.png": lambda p: _curve_figure(verdict, p, "heldout_bpb", "held-out bits per byte",
                                                   "Held-out bits per byte per round (lower is better)"),
        "train_loss.png": lambda p: _loss_figure(verdict, p),
        "contrasts.png": lambda p: _contrast_figure(verdict, p) or True,
        "heircommit.png": lambda p: _heircommit_figure(verdict, p),
        "commit_curve.png": lambda p: _commit_curve_figure(verdict, p),
        "monitors.png": lambda p: _monitor_figure(verdict, p),
    }
    with matplotlib.style.context("default"):
        return [name for name in FIGURES if drawers[name](out / name)]
