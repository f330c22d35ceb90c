"""What size would decide: a protocol's design analysis at other probe counts and seed counts.

freeze prints the design analysis at the registered size only. Before registering a size, this
runs the same analysis (harness.readout.design.protocol_design: the rule, the control checks, C's
gate) at every (probes, seeds) of a grid, with the variance components of a pilot.json (or the
protocol's registered assumptions), and prints the six design_summary figures per cell and the two
that freeze also holds against the registered power at the pessimistic components (a pilot's only):

    python -m tools.design_grid --protocol smoke --pilot results/smoke/frozen/pilot.json \
        --items 128,512,1024 --seeds 2,4,8 [--replicates 500] [--json out.json]

The components are fitted once (at the pilot's own item count); only the simulated size changes.
Nothing is written unless --json is given. Never part of a readout: a planning aid.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from harness.readout.design import protocol_design
from harness.spec.protocol import load_protocol
from harness.stats.design.model import VarianceComponents
from harness.stats.design.records import DesignAnalysis
from harness.stats.design.summary import SUMMARY_KEYS, design_summary

SHORT = {"positive_control_power": "pc_power", "keep_both_at_sesoi": "keep_both@sesoi",
         "keep_both_false_positive": "keep_both_fp", "ruled_out_at_sesoi": "ruled_out@sesoi",
         "gate_commit_at_minus_sesoi": "commit@-sesoi", "gate_commit_at_plus_sesoi": "commit@+sesoi"}


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--{what}: expected comma-separated positive integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise SystemExit(f"--{what}: expected comma-separated positive integers, got {text!r}")
    return vals


def grid(protocol, components: VarianceComponents | None, items: list[int], seeds: list[int],
         replicates: int | None = None) -> list[dict]:
    """One row per (n_items, n_seeds): {n_items, n_seeds, **design_summary}. `replicates` overrides
    decision.yaml design.replicates (fewer: faster, noisier)."""
    rows = []
    for n in items:
        for k in seeds:
            p = _resized(protocol, n, k, replicates)
            d = protocol_design(p, components)
            rows.append({"n_items": n, "n_seeds": k, **design_summary(d), **pessimistic_figures(d)})
    return rows


def pessimistic_figures(d: DesignAnalysis) -> dict:
    """What freeze holds against the registered power beside the designed figures: P(keep_both | sesoi)
    and the positive control's power at the pessimistic components (None where the components allow none:
    registered assumptions, or fewer than 2 pilot seeds)."""
    pess = d.pessimistic
    return {"pess_keep_both": None if pess is None else pess.keep_both_at_sesoi.p,
            "pess_pc_power": None if pess is None else pess.positive_control_power}


def _resized(protocol, n_items: int, n_seeds: int, replicates: int | None):
    """The protocol with another probe count, seed list and (optionally) replicate count; nothing
    else changes (the copy is never written or frozen)."""
    tasks = dataclasses.replace(protocol.tasks, probe=dataclasses.replace(protocol.tasks.probe, size=n_items))
    seeds = dataclasses.replace(protocol.seeds, run_seeds=tuple(range(1, n_seeds + 1)))
    decision = protocol.decision
    if replicates is not None:
        decision = dataclasses.replace(decision, design={**decision.design, "replicates": replicates})
    return dataclasses.replace(protocol, tasks=tasks, seeds=seeds, decision=decision)


COLUMNS = (*SUMMARY_KEYS, "pess_keep_both", "pess_pc_power")
RECIPE = "label_level_about_the_recipe"  # where decision.yaml registers a base spread (design.base_spread)
SHORT |= {"pess_keep_both": "pess keep_both", "pess_pc_power": "pess pc_power", RECIPE: "recipe level"}


def lines(rows: list[dict]) -> list[str]:
    columns = COLUMNS + ((RECIPE,) if rows and RECIPE in rows[0] else ())
    head = f"{'probes':>7} {'seeds':>5} " + " ".join(f"{SHORT[k]:>15}" for k in columns)
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    return [head] + [f"{r['n_items']:>7} {r['n_seeds']:>5} " + " ".join(f"{fmt(r[k]):>15}" for k in columns)
                     for r in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocol", required=True)
    ap.add_argument("--pilot", help="a pilot.json whose variance_components to use (default: the registered assumptions)")
    ap.add_argument("--items", default="128,512,1024")
    ap.add_argument("--seeds", default="2,4,8")
    ap.add_argument("--replicates", type=int, default=None)
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args(argv)
    protocol = load_protocol(a.protocol)
    components = None
    if a.pilot:
        path = Path(a.pilot)
        if not path.is_file():
            raise SystemExit(f"--pilot {path}: no such file (make pilot writes results/<protocol>/frozen/pilot.json)")
        try:
            components = VarianceComponents.from_pilot(json.loads(path.read_text()))
        except ValueError as err:
            raise SystemExit(f"--pilot {path}: {err}") from None
    rows = grid(protocol, components, _ints(a.items, "items"), _ints(a.seeds, "seeds"), a.replicates)
    src = f"pilot {a.pilot}" if a.pilot else "the registered assumptions (decision.yaml design.assumed)"
    print(f"design analysis of {protocol.name} at other sizes; components: {src}")
    for line in lines(rows):
        print(line)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
