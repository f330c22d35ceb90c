"""This host's numerics fingerprint for a protocol (harness.learning.numerics), and how it compares with
the one the protocol was sized on (its sized_on_numerics.json) and with every host in
docs/reproducibility.md's list:

    python -m tools.fingerprint [--protocol main] [--mkl-cbwr COMPATIBLE]

Prints the fingerprint as JSON (what freeze would write as frozen/numerics.json), then one line per
comparison: identical, or the first component that differs. `--mkl-cbwr` tries another MKL branch than
the harness registers, to measure what it changes (never what a run uses). Beside the library, never
hashed by the lock.
"""
from __future__ import annotations

import argparse
import json
import re
import sys

from harness import PROJECT_ROOT
from harness.core import kernels

HOSTS = PROJECT_ROOT / "docs" / "reproducibility.md"
_ROW = re.compile(r"^\|\s*([a-z0-9_x]+)\s*\|\s*([0-9a-f]{16}|—)\s*\|")


def host_tables(text: str) -> list[tuple[str, dict[str, str]]]:
    """(heading, component -> sha256 prefix) of every fingerprint table under a '### ' heading."""
    tables, head = [], None
    for line in text.splitlines():
        if line.startswith("### "):
            head = line[4:].strip()
            tables.append((head, {}))
        m = _ROW.match(line)
        if m and tables and m.group(2) != "—":
            tables[-1][1][m.group(1)] = m.group(2)
    return [(h, rows) for h, rows in tables if rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocol", default="main")
    ap.add_argument("--mkl-cbwr", default=None, help="another MKL branch than the registered one (to measure it)")
    a = ap.parse_args(argv)
    from harness.spec.protocol import load_protocol
    protocol = load_protocol(a.protocol)
    recipe = protocol.model.kernels()
    if a.mkl_cbwr:
        kernels._MKL_CBWR[recipe.cpu_capability] = a.mkl_cbwr
    kernels.pin(recipe, "fingerprint")
    from harness.learning import numerics
    from harness.learning.sizes import SIZES
    fp = numerics.measure(SIZES[protocol.model.size], protocol.model.size,
                          [protocol.model.run_threads, protocol.model.base.torch_threads])
    print(json.dumps({**fp.to_dict(), "mkl_cbwr": a.mkl_cbwr or recipe.env()["MKL_CBWR"]}, indent=1))
    mine = fp.by_threads[str(protocol.model.run_threads)]
    sized = protocol.dir / "sized_on_numerics.json"
    others = host_tables(HOSTS.read_text()) if HOSTS.exists() else []
    if sized.exists():
        others.insert(0, (f"{protocol.name}'s sized_on_numerics.json",
                          json.loads(sized.read_text())["by_threads"][str(protocol.model.run_threads)]))
    for name, rows in others:
        common = [k for k in mine if k in rows]
        diff = [k for k in common if rows[k] != mine[k]]
        print(f"{name}: " + ("identical" if common and not diff else
                             f"differs first at {diff[0]} ({len(diff)} of {len(common)} components)" if diff else
                             "no component in common"))
    print(f"digest {numerics.describe(fp)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
