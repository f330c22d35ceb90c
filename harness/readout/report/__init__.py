"""The readout's report and figures, drawn from verdict.json alone.

report.md and report.html are rendered from ONE Jinja2 template (`templates.TEMPLATE`) over one
document model: `report_sections(verdict, figures)` returns the sections in report order, each
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

The modules, in the order a reader meets them:
    templates   the templates and `render*` (report.md, report.html, items.html)
    blocks      the block dicts and the number formatting every section uses
    paragraph   the Verdict section: the verdict paragraph (`headline`), how far to trust each label,
                every warning that bears on it; the verifier reasons' section
    sections    `report_sections` and the evidence sections (arms, controls, contrasts, ...)
    provenance  the header line and the Provenance section
    design      the Design analysis section (its sentences are harness.readout.words')
    figures     the figures and their captions (`write_figures`)
"""
from harness.readout.report.figures import ARM_COLOURS, FIGURES, figure_caption, gate_labels, gate_runs, \
    loss_groups, write_figures
from harness.readout.report.paragraph import ITEMS_LINK, PREREGISTRATION_LINK, control_scale_lines, \
    deciding_contrasts, headline, trust_lines, verdict_reasons_section, verdict_warnings
from harness.readout.report.provenance import provenance_line
from harness.readout.report.sections import contrast_bullet, report_sections
from harness.readout.report.templates import render, render_html, render_items, render_report, render_sections

__all__ = ["ARM_COLOURS", "FIGURES", "ITEMS_LINK", "PREREGISTRATION_LINK", "contrast_bullet", "control_scale_lines",
           "deciding_contrasts", "figure_caption", "gate_labels", "gate_runs", "headline", "loss_groups",
           "provenance_line", "render", "render_html", "render_items", "render_report", "render_sections",
           "report_sections", "trust_lines", "verdict_reasons_section", "verdict_warnings", "write_figures"]
