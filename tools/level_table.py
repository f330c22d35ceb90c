"""The level of every label under run spread: P(supported | true effect 0) and P(ruled_out | true
effect = sesoi) per decision contrast, by seeds x run spread (registered, doubled), at a protocol's
registered components (its pilot's when present, else decision.yaml's assumptions).

    .venv/bin/python -m tools.level_table [protocol] [replicates] [n_items] [seeds,comma,separated]

The pilot is the protocol's own (protocols/<name>/pilot.json) or the one freeze measured under
results/ (RESULTS= in the environment names another results folder).
"""
from __future__ import annotations

import os
import sys

from harness.core import paths
from harness.readout.design import find_pilot
from harness.spec.protocol import load_protocol
from harness.stats import power
from harness.stats.decision import decision_spec


def main(argv: list[str]) -> None:
    name = argv[0] if argv else "smoke"
    R = int(argv[1]) if len(argv) > 1 else 4000
    protocol = load_protocol(name)
    n_items = int(argv[2]) if len(argv) > 2 else protocol.tasks.probe.size
    seeds = [int(x) for x in argv[3].split(",")] if len(argv) > 3 else [2, 3, 4, 8, 16]
    spec = decision_spec(protocol)
    des = {**power.validate_design(protocol.decision.design), "replicates": R}
    pilot = find_pilot(protocol, paths.results_dir(os.environ.get("RESULTS") or None))
    vc = (power.VarianceComponents.from_pilot(pilot) if pilot is not None else
          power.VarianceComponents.from_moments(des["assumed"], "assumed"))
    print(f"{name}: {n_items} items, components from {vc.source}, run sd "
          + ", ".join(f"{a} {v:.3f}" for a, v in vc.run_sd.items()) + f" (logit); {R} experiments per row; "
          f"alpha {spec['alpha']}, sesoi {spec['sesoi']}")
    print("| seeds | run spread | contrast | P(supported | 0) | P(ruled_out | sesoi) |")
    print("|---|---|---|---|---|")
    for k in seeds:
        for spread in (1.0, 2.0):
            for row in power.label_levels(spec, des, vc, n_items, k, spread):
                print(f"| {k} | x{spread:g} | {row['contrast']} | {row['supported_at_0']:.4f} ± {row['supported_at_0_se']:.4f} "
                      f"| {row['ruled_out_at_sesoi']:.4f} ± {row['ruled_out_at_sesoi_se']:.4f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
