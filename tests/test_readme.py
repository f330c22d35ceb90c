"""README.md as a newcomer reads it: every output named, the layout as it is, and the figures it quotes
from a readout checkable against a named results folder (tools.readme_figures)."""
import json
import re

import pytest

from harness import PROJECT_ROOT
from harness.readout.analyzer import readout
from tests.fixtures_runs import build_tree
from tools import readme_figures

README = (PROJECT_ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def read_out(tmp_path_factory):
    t = build_tree(tmp_path_factory.mktemp("readme"))
    return t, readout(t.protocol_dir, t.results_dir)


def _table(verdict: dict, observed_keep_both: str | None = None) -> str:
    """A README-like table quoting the verdict's own figures (one cell changed when asked)."""
    d, o = verdict["design_summary"], verdict["design_summary_observed"]
    kb = observed_keep_both or f"{o['keep_both_at_sesoi']:.3f}"
    return ("Some text.\n\n| | designed (pilot) | observed (one run) |\n|---|---|---|\n"
            f"| P(keep_both) at the sesoi (`keep_both_at_sesoi`) | {d['keep_both_at_sesoi']:.3f} | {kb} |\n"
            f"| gate, worse / better (`gate_commit_at_minus_sesoi` / `gate_commit_at_plus_sesoi`) | "
            f"{d['gate_commit_at_minus_sesoi']:.2f} / {d['gate_commit_at_plus_sesoi']:.2f} | "
            f"{o['gate_commit_at_minus_sesoi']:.3f} / {o['gate_commit_at_plus_sesoi']:.3f} |\n"
            "| a row naming no key | 0.5 | 0.5 |\n\nMore text.\n")


def test_the_readmes_quoted_figures_are_extracted_with_their_keys():
    quoted = readme_figures.quoted_figures(README)
    got = {(q["key"], q["summary"]): q["quoted"] for q in quoted}
    keys = ["positive_control_power", "keep_both_at_sesoi", "keep_both_false_positive", "gate_commit_at_minus_sesoi",
            "gate_commit_at_plus_sesoi"]
    assert sorted(got) == sorted((k, s) for k in keys for s in ("design_summary", "design_summary_observed"))
    assert got[("keep_both_at_sesoi", "design_summary")] == "0.911"  # as written, the text the check compares
    assert all(re.fullmatch(r"\d\.\d{3}", v) for v in got.values())


def test_quoted_figures_match_the_results_folder_they_name_or_the_difference_is_named(read_out, tmp_path, capsys):
    tree, out = read_out
    verdict = json.loads((out / "verdict.json").read_text())
    text = _table(verdict)
    quoted = readme_figures.quoted_figures(text)
    assert len(quoted) == 6 and readme_figures.differences(quoted, verdict) == []
    readme = tmp_path / "README.md"
    readme.write_text(text)
    results = tree.results_dir / tree.name
    assert readme_figures.main(["--results", str(results), "--readme", str(readme)]) == 0
    assert capsys.readouterr().out == (f"every one of the 6 figures {readme} quotes matches "
                                       f"{results / 'readout' / 'verdict.json'}\n")

    wrong = f"{verdict['design_summary_observed']['keep_both_at_sesoi'] + 0.25:.3f}"
    readme.write_text(_table(verdict, wrong))
    assert readme_figures.main(["--results", str(results), "--readme", str(readme)]) == 1
    assert capsys.readouterr().out == (f"keep_both_at_sesoi (observed): README {wrong} (line 5), verdict.json "
                                       f"{verdict['design_summary_observed']['keep_both_at_sesoi']:.3f}\n")


@pytest.mark.parametrize("case", ["no_verdict", "bad_cell", "no_figures"])
def test_bad_input_is_one_line_and_status_2(read_out, tmp_path, capsys, case):
    tree, out = read_out
    readme = tmp_path / "README.md"
    readme.write_text(_table(json.loads((out / "verdict.json").read_text())))
    results = tree.results_dir / tree.name
    if case == "no_verdict":
        results = tmp_path / "nowhere"
    elif case == "bad_cell":  # the gate row's designed cell loses its second figure
        readme.write_text(re.sub(r"\| (\d\.\d\d) / \d\.\d\d \|", r"| \1 |", readme.read_text(), count=1))
    else:
        readme.write_text("no table here\n")
    assert readme_figures.main(["--results", str(results), "--readme", str(readme)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert {"no_verdict": "no verdict.json", "bad_cell": "line 6: column", "no_figures": "quotes no figure"}[case] in err


def test_every_output_is_named_with_a_line_of_its_own():
    table = README[README.index("### The outputs, by name"):].split("\n\n")[1]
    rows = [re.split(r"(?<!\\)\|", r)[1:3] for r in table.splitlines() if r.startswith("| `")]
    names = ["report.html", "report.md", "items.html", "verdict.json", "PREREGISTRATION.md", "FROZEN.lock",
             "DEVIATIONS.jsonl", ".audit.tar.gz", "make deviation", "make replicate", "make ui"]
    for name in names:
        assert len([r for r in rows if name in r[0]]) == 1, name
    assert all(len(what.strip()) > 20 for _, what in rows)  # each says what it is


def test_the_layout_is_the_trees():
    layout = README[README.index("## Layout"):]
    block = layout[layout.index("```"):layout.index("```", layout.index("```") + 3)]
    for pkg in sorted(p for p in (PROJECT_ROOT / "harness").iterdir() if (p / "__init__.py").exists()):
        line = block[block.index(f"  {pkg.name}/"):]
        entry = line[:re.search(r"\n  \S|\n\S", line).start()]
        for module in sorted(pkg.glob("*.py")):
            if module.name != "__init__.py":
                assert module.name in entry, f"{pkg.name}/{module.name} is not in the README's layout"
    for protocol in sorted(p.name for p in (PROJECT_ROOT / "protocols").iterdir() if p.is_dir()):
        assert f"{protocol}/" in block, protocol
    for arm in sorted((PROJECT_ROOT / "arms").glob("[a-z]_*.py")):
        assert arm.stem in block, arm.stem
    for tool in sorted((PROJECT_ROOT / "tools").glob("*.py")):
        if tool.stem != "__init__":
            assert tool.stem in block, tool.stem
    assert "by at least" not in README  # support never requires the sesoi
