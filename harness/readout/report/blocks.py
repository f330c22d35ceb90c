"""The report's blocks (a paragraph, a bullet list, a table, a sub-heading, a warning, a section: the
dicts the template renders, see the package's docstring) and its number formatting (a rate in %, a
number to a few significant digits, PASS/FAIL). Points are formatted by harness.stats.units.pts."""
from __future__ import annotations


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


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}g}"


def run_order(item) -> tuple:
    """Sort key of a run's key ("A/seed10") or of a (key, value) pair: its arm, then its seed as a number
    (seed 2 before seed 10)."""
    key = item[0] if isinstance(item, tuple) else item
    arm, _, seed = str(key).partition("/seed")
    return (arm, int(seed)) if seed.isdigit() else (arm, -1, seed)


def _ok(flag: bool) -> str:
    return "PASS" if flag else "FAIL"
