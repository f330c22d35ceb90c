"""The report's Design analysis section: what this experiment could resolve, designed (freeze's
variance components) and observed (this experiment's), and the design summary table. Every sentence
is harness.readout.words' (freeze prints the same ones); this module only lays them out."""
from __future__ import annotations

from harness.readout import words
from harness.readout.report.blocks import _h3, _p, _section, _tbl, _ul
from harness.readout.verdict import Design
from harness.stats.design.records import DesignAnalysis


def design_section(design: Design | dict | None, summaries: list[tuple[str, dict | None]] = ()) -> dict | None:
    """The operating characteristic, designed (freeze's components) and observed (this experiment's);
    `summaries` [(column name, the verdict's flat design summary)] add the summary table when both are there."""
    if not design:
        return None
    d = Design.from_dict(design, "design")
    blocks = [_p(words.run_words(d.designed))]
    for name, result in (("designed", d.designed), ("observed", d.observed)):
        blocks += [_p(words.unavailable_words(result.error))] if result.failed else _design_blocks(name, result)
    if summaries and all(isinstance(v, dict) for _, v in summaries):
        blocks += design_summary_blocks(list(summaries))
    return _section("design", "Design analysis: what this experiment could resolve", blocks)


def _design_blocks(name: str, x: DesignAnalysis) -> list[dict]:
    """One design analysis (designed or observed): its components, the rule's cells, and its findings
    (`words.design_items`) with its warnings."""
    c = x.components
    blocks = [_h3(f"{name.capitalize()} ({words.source_words(c)})"), _p(words.components_words(c))]
    if x.rule.error is not None:
        return blocks + [_ul(words.design_items(x))]
    blocks += [_tbl(list(words.CELL_HEADER), words.cell_rows(x)),
               _ul(words.design_items(x) + [f"**Warning:** {w}" for w in x.warnings])]
    if x.bases is not None:
        blocks += [_p(words.recipe_intro_words(x) + ":"), _tbl(words.recipe_header(x), words.recipe_rows(x))]
    return blocks


def design_summary_blocks(summaries: list[tuple[str, dict]]) -> list[dict]:
    """The flat design summaries [(column name, design_summary dict), ...] as one table, a row per figure
    (in words, with its verdict.json key) and a column per summary: narrow enough for the page."""
    keys = list(dict.fromkeys(k for _, v in summaries for k in v))  # a summary may lack a figure another has
    rows = [[words.SUMMARY_WORDS.get(k, k), f"`{k}`", *("n/a" if v.get(k) is None else f"{v[k]:.3f}" for _, v in summaries)]
            for k in keys]
    return [_h3("Design summary"), _tbl(["figure", "key in verdict.json", *(name for name, _ in summaries)], rows)]
