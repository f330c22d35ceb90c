"""Do two results trees hold the same runs? For checking that a refactor changed no number.

    python -m tools.compare_runs BEFORE AFTER [--protocol smoke] [--runs A/1 B/1]

For each run (default: every <arm>/seed<k> found in both trees), every record of records.jsonl and
ledger.jsonl is compared field by field, except what names the code rather than the numbers: the
chain fields ("prev", "hash": they cover the lock hash) and "lock_hash", "code_version". Printed:
one line per round with the fields a reader checks first (probe outcomes, bits per byte, training
loss, checkpoint hash) and whether they match, then every differing field by its path. Exit status
0 when everything compared is identical, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

IGNORED = {"prev", "hash", "lock_hash", "code_version",   # name the code and the chain, not the numbers
           "wall_clock_s"}                                # machine load, not a result
LOGS = ("records.jsonl", "ledger.jsonl")


def read_log(path: Path) -> list[dict]:
    """The records of a chained log, without the ignored fields (a missing log reads as empty)."""
    if not path.exists():
        return []
    return [{k: v for k, v in json.loads(line).items() if k not in IGNORED} for line in path.read_text().splitlines()]


def differences(a, b, path: str = "") -> list[str]:
    """Dotted paths where `a` and `b` differ (recursing into dicts and lists), with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k in IGNORED:
                continue
            sub = f"{path}.{k}" if path else str(k)
            out += [f"{sub}: only in {'after' if k in b else 'before'}"] if (k in a) != (k in b) else differences(a[k], b[k], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:80]} != {json.dumps(b)[:80]}"]


def round_line(before: dict, after: dict) -> str:
    """One round's headline fields, side by side: '=' when equal."""
    def get(rec, *keys):
        for k in keys:
            rec = rec.get(k) if isinstance(rec, dict) else None
        return rec
    cells = []
    for label, keys in (("probe", ("eval", "probe_passed")), ("pass", ("eval", "probe_pass_rate")),
                        ("bpb", ("eval", "heldout_bpb")), ("loss", ("train", "mean_loss")), ("ckpt", ("checkpoint",))):
        x, y = get(before, *keys), get(after, *keys)
        shown = (x[:12] + "...") if isinstance(x, str) and len(x) > 12 else (f"{x:.6g}" if isinstance(x, float) else x)
        cells.append(f"{label} {shown} {'=' if x == y else '!= ' + str(y)[:15]}")
    return f"round {before.get('round')}: " + ", ".join(cells)


def compare_run(before: Path, after: Path) -> tuple[bool, list[str]]:
    """(identical, printed lines) for one run directory on each side."""
    lines, same = [], True
    for log in LOGS:
        a, b = read_log(before / log), read_log(after / log)
        if len(a) != len(b):
            lines.append(f"  {log}: {len(a)} records before, {len(b)} after")
            same = False
        diffs = [f"  {log}:{i + 1}: {d}" for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y)]
        same &= not diffs
        if log == "records.jsonl":
            lines += [f"  {round_line(x, y)}" for x, y in zip(a, b) if x.get("kind") == "round"]
        lines += diffs
        lines.append(f"  {log}: {min(len(a), len(b))} records compared, {'identical' if not diffs else f'{len(diffs)} field(s) differ'}")
    return same, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.compare_runs", description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--protocol", default="smoke")
    ap.add_argument("--runs", nargs="*", default=None, help="ARM/SEED, e.g. A/1 B/1 (default: every run in both)")
    args = ap.parse_args(argv)
    roots = [args.before / args.protocol, args.after / args.protocol]
    for root in roots:
        if not root.is_dir():
            print(f"error: {root} does not exist (expected <results>/<protocol>/)", file=sys.stderr)
            return 2
    if args.runs is None:
        found = [{f"{p.parent.name}/{p.name.removeprefix('seed')}" for p in r.glob("*/seed*") if p.is_dir()} for r in roots]
        runs = sorted(found[0] & found[1])
    else:
        runs = args.runs
    if not runs:
        print("error: no run is in both trees", file=sys.stderr)
        return 2
    all_same = True
    for run in runs:
        arm, _, seed = run.partition("/")
        a, b = (r / arm / f"seed{seed}" for r in roots)
        missing = [str(d) for d in (a, b) if not (d / "records.jsonl").exists()]
        if missing:
            print(f"{run}: no records.jsonl in {', '.join(missing)}")
            all_same = False
            continue
        same, lines = compare_run(a, b)
        all_same &= same
        print(f"{run}: {'IDENTICAL' if same else 'DIFFERENT'} (ignoring {', '.join(sorted(IGNORED))})")
        print("\n".join(lines))
    print("all compared runs identical" if all_same else "some runs differ")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
