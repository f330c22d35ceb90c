"""The figures README.md quotes from a readout, checked against a results folder's verdict.json.

    python -m tools.readme_figures --results results/main [--readme README.md]

A quoted figure is a cell of a Markdown table whose row names its verdict.json key in backticks,
e.g. "| P(keep_both), both contrasts at the sesoi (`keep_both_at_sesoi`) | 0.905 | 0.659 |". The
table's header says which summary each column quotes: a header cell with "designed" is
`design_summary`, one with "observed" is `design_summary_observed`. A row that names several keys
("`a` / `b`") holds as many figures per cell, split by " / ". A quoted figure matches when the
verdict's value rounded to the quoted number of decimals equals it.

Prints one line per figure that differs ("keep_both_at_sesoi (observed): README 0.659, verdict.json
0.253"), or that every quoted figure matches; exit status 0 when all match, 1 when one differs, 2 for
bad input (one line naming the file). Beside the library, never hashed by the lock.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from harness import PROJECT_ROOT
from harness.stats.design.summary import SUMMARY_KEYS

COLUMNS = {"designed": "design_summary", "observed": "design_summary_observed"}
_KEY = re.compile(r"`([a-z_]+)`")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells (a backslash-escaped pipe stays inside its cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def quoted_figures(text: str) -> list[dict]:
    """Every figure the text quotes: [{"key", "summary" (design_summary or design_summary_observed),
    "quoted" (the text as written, e.g. "0.905"), "line" (1-based)}], in reading order. ValueError
    naming the line when a row's cell does not hold one number per key."""
    out: list[dict] = []
    lines = text.splitlines()
    header: list[str] | None = None
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            header = None
            continue
        if i + 1 < len(lines) and re.fullmatch(r"\s*\|(\s*:?-+:?\s*\|)+\s*", lines[i + 1]):
            header = _cells(line)
            continue
        cells = _cells(line)
        keys = [k for k in _KEY.findall(cells[0]) if k in SUMMARY_KEYS]
        if header is None or not keys:
            continue
        for col, title in enumerate(header):
            summary = next((s for word, s in COLUMNS.items() if word in title.lower()), None)
            if summary is None or col >= len(cells):
                continue
            values = [v.strip() for v in cells[col].split("/")]
            if len(values) != len(keys) or not all(_NUMBER.match(v) for v in values):
                raise ValueError(f"line {i + 1}: column {title!r} holds {cells[col]!r}, expected {len(keys)} "
                                 f"number(s) for {', '.join(keys)} split by ' / '")
            out += [{"key": k, "summary": summary, "quoted": v, "line": i + 1} for k, v in zip(keys, values)]
    return out


def differences(quoted: list[dict], verdict: dict) -> list[str]:
    """One line per quoted figure that the verdict does not give (rounded to the quoted decimals)."""
    out = []
    for q in quoted:
        value = (verdict.get(q["summary"]) or {}).get(q["key"])
        decimals = len(q["quoted"].partition(".")[2])
        where = "designed" if q["summary"] == "design_summary" else "observed"
        if value is None:
            out.append(f"{q['key']} ({where}): README {q['quoted']} (line {q['line']}), verdict.json has none")
        elif round(float(value), decimals) != float(q["quoted"]):
            out.append(f"{q['key']} ({where}): README {q['quoted']} (line {q['line']}), verdict.json "
                       f"{float(value):.{decimals}f}")
    return out


def verdict_of(results: Path) -> Path:
    """The verdict.json of a protocol's results folder (results/<protocol>), its readout folder, or itself."""
    for path in (results / "readout" / "verdict.json", results / "verdict.json", results):
        if path.is_file():
            return path
    raise FileNotFoundError(f"{results}: no verdict.json (expected results/<protocol>/readout/verdict.json: read it out "
                            f"first)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.readme_figures", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", required=True, help="results/<protocol> (or its readout folder, or a verdict.json)")
    ap.add_argument("--readme", default=str(PROJECT_ROOT / "README.md"))
    args = ap.parse_args(argv)
    try:
        path = verdict_of(Path(args.results))
        verdict = json.loads(path.read_text())
        quoted = quoted_figures(Path(args.readme).read_text())
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not quoted:
        print(f"error: {args.readme}: quotes no figure of a readout (no table row names a design_summary key)",
              file=sys.stderr)
        return 2
    found = differences(quoted, verdict)
    for line in found:
        print(line)
    if not found:
        print(f"every one of the {len(quoted)} figures {args.readme} quotes matches {path}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
