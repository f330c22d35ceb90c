"""The report's templates and their rendering: report.md and report.html from ONE Jinja2 template
(`TEMPLATE`) over the sections `report_sections` returns (the block kinds are listed in the package's
docstring), and items.html from `ITEMS_TEMPLATE`."""
from __future__ import annotations

import base64
import re

import jinja2
import markupsafe

from harness.readout.report.provenance import provenance_line
from harness.readout.report.sections import report_sections
from harness.readout.verdict import Verdict, as_verdict


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
