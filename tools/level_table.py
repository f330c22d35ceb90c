"""The level of everything the readout declares, by seeds x run spread x run-effect shape:
P(supported | 0), P(reversed | 0) and P(ruled_out | sesoi) per decision contrast, keep_both's
false-positive rate (the worst found over the null set), and each registered control check (the
positive control passing when it truly equals A, and, for reference, when it is truly A + its
margin; the negative control firing when it truly equals B). Components: the protocol's registered
ones (its pilot's when present, else decision.yaml's assumptions), or `--moments FILE` (a JSON
mapping of the moments, e.g. a readout's observed ones), with `--seed-sd` replacing arms' seed SDs.

    .venv/bin/python -m tools.level_table [protocol] [replicates] [n_items] [seeds,comma,separated]
        [--spreads 1,2] [--shapes normal,collapse] [--moments FILE] [--seed-sd A=0.005,B=0.027]

The pilot is the protocol's own (protocols/<name>/pilot.json) or the one freeze measured under
results/ (RESULTS= in the environment names another results folder).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from harness.core import paths
from harness.readout.design import control_checks_of, find_pilot
from harness.spec.protocol import load_protocol
from harness.stats import power
from harness.stats.design import model, simulate
from harness.stats.design.records import ARMS, Moments
from harness.stats.decision import decision_spec


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _seed_sds(text: str) -> dict[str, float]:
    out = {}
    for part in filter(None, text.split(",")):
        arm, _, value = part.partition("=")
        if arm not in ARMS or not value:
            raise SystemExit(f"--seed-sd: expected ARM=SD with ARM one of {list(ARMS)}, got {part!r}")
        out[arm] = float(value)
    return out


def components(args, protocol, des: dict) -> model.VarianceComponents:
    """The components the table is simulated at (see the module docstring)."""
    if args.moments:
        raw = json.loads(open(args.moments).read())
        moments, source = raw.get("variance_components", raw), "moments file"
    else:
        pilot = find_pilot(protocol, paths.results_dir(os.environ.get("RESULTS") or None))
        if pilot is not None and not args.seed_sd:
            return model.VarianceComponents.from_pilot(pilot)
        moments, source = (pilot["variance_components"] if pilot else des["assumed"]), ("pilot" if pilot else "assumed")
    if args.seed_sd:
        m = Moments.from_dict(moments, source)
        moments = dataclasses.replace(m, seed_sd={**m.seed_sd, **_seed_sds(args.seed_sd)})
        source += ", seed SDs replaced"
    return model.VarianceComponents.from_moments(moments, source)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="tools.level_table", description=__doc__.split("\n\n")[0])
    ap.add_argument("protocol", nargs="?", default="smoke")
    ap.add_argument("replicates", nargs="?", type=int, default=4000)
    ap.add_argument("n_items", nargs="?", type=int, default=None)
    ap.add_argument("seeds", nargs="?", default="2,4,8")
    ap.add_argument("--spreads", default="1,2", help="multipliers of every arm's run SD")
    ap.add_argument("--shapes", default="normal,collapse", help=f"run-effect shapes, of {list(simulate.RUN_SHAPES)}")
    ap.add_argument("--moments", default=None, help="JSON file of the moments (harness.stats.design.records.MOMENT_KEYS)")
    ap.add_argument("--seed-sd", default="", help="ARM=SD,... replacing those arms' seed SDs (fractions)")
    args = ap.parse_args(argv)
    protocol = load_protocol(args.protocol)
    n_items = args.n_items or protocol.tasks.probe.size
    spec = decision_spec(protocol)
    des = {**power.validate_design(protocol.decision.design), "replicates": args.replicates}
    vc = components(args, protocol, des)
    checks = control_checks_of(protocol)
    print(f"{args.protocol}: {n_items} items, components from {vc.source}, run sd "
          + ", ".join(f"{a} {v:.3f}" for a, v in vc.run_sd.items()) + f" (logit); {args.replicates} experiments per "
          f"row; alpha {spec['alpha']}, sesoi {spec['sesoi']}; collapse: one seed per arm carries "
          f"{simulate.COLLAPSE_SHARE:.0%} of its run variance")
    print("| seeds | run spread | run effects | claim | true | P(claim) |")
    print("|---|---|---|---|---|---|")
    for k in (int(x) for x in args.seeds.split(",")):
        for spread in _floats(args.spreads):
            for shape in args.shapes.split(","):
                shaped = dataclasses.replace(vc, run_shape=shape)
                for row in power.every_level(spec, des, shaped, n_items, k, checks, spread):
                    flag = " **above**" if row.p > spec["alpha"] + 3 * row.se else ""
                    print(f"| {k} | x{spread:g} | {shape} | {row.name} | {row.truth} | "
                          f"{row.p:.4f} ± {row.se:.4f}{flag} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
