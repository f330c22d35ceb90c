"""The levels and power of the verdict about the recipe (harness.stats.recipe), simulated: per plan of
looks over bases, base-effect law and base SD, P(supported | 0), P(reversed | 0) and P(ruled_out | sesoi)
(the levels), P(ruled_out | 0) and P(supported | sesoi) (the power), and the bases the plan reads on
average. "skewed" and "outlier" run with the long tail (the shifted base) above and below: a one-sided
test's level depends on which side the tail is.

    .venv/bin/python -m tools.recipe_levels [--out FILE.json] [--sims 2000] [--items 1024] [--seeds 1]
        [--plans 6,9,12/9] [--sds 0.04,0.07] [--laws normal,skewed,outlier] [--alpha 0.05] [--sesoi 0.05]
        [--seed 20261215]

Prints a Markdown table; --out also writes the rows as JSON (atomically). A planning aid, never part of
a readout.
"""
from __future__ import annotations

import argparse
import json
import sys

from harness.core.records import atomic_write_text
from harness.stats.recipe import BASE_LAWS, RecipeDesign, recipe_oc
from harness.stats.design.records import round_tree

TAILS = {"normal": ((1, "normal"),), "skewed": ((1, "skewed, tail up"), (-1, "skewed, tail down")),
         "outlier": ((1, "outlier above"), (-1, "outlier below"))}


def _list(text: str, cast, what: str) -> list:
    try:
        vals = [cast(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--{what}: expected a comma-separated list, got {text!r}") from None
    if not vals:
        raise SystemExit(f"--{what}: expected a comma-separated list, got {text!r}")
    return vals


def _plans(text: str) -> list[tuple]:
    """'6,9,12/9' -> [(6, 9, 12), (9,)]."""
    return [tuple(_list(p, int, "plans")) for p in text.split("/") if p.strip()]


def row(looks: tuple, law: str, tail: int, base_sd: float, a) -> dict:
    """One table row: the plan at recipe effect 0 and at the sesoi (common random numbers: one seed)."""
    common = dict(looks=looks, base_law=law, tail=tail, base_sd=base_sd, alpha=a.alpha, sesoi=a.sesoi,
                  n_items=a.items, seeds_per_base=a.seeds, n_sims=a.sims, seed=a.seed)
    at_0, at_sesoi = recipe_oc(RecipeDesign(**common)), recipe_oc(RecipeDesign(**common, effect=a.sesoi))
    return {"looks": list(looks), "law": law, "tail": tail, "base_sd": base_sd,
            "supported_at_0": at_0.share["supported"], "reversed_at_0": at_0.share["reversed"],
            "ruled_out_at_sesoi": at_sesoi.share["ruled_out"], "ruled_out_at_0": at_0.share["ruled_out"],
            "supported_at_sesoi": at_sesoi.share["supported"], "bases_at_0": at_0.expected_bases,
            "bases_at_sesoi": at_sesoi.expected_bases, "mc_se_at_alpha": (a.alpha * (1 - a.alpha) / a.sims) ** 0.5,
            "nominal": list(at_0.plan.nominal), "clipped": max(at_0.clipped, at_sesoi.clipped)}


def table(rows: list[dict]) -> list[str]:
    """The rows as a Markdown table (fractions to 3 decimals)."""
    names = {(law, t): name for law, pairs in TAILS.items() for t, name in pairs}
    out = ["| looks | bases' law | base SD | P(supported \\| 0) | P(reversed \\| 0) | P(ruled_out \\| sesoi) | "
           "P(ruled_out \\| 0) | P(supported \\| sesoi) | E[bases] at 0 / sesoi |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {', '.join(map(str, r['looks']))} | {names[r['law'], r['tail']]} | {r['base_sd']:g} | "
                   f"{r['supported_at_0']:.3f} | {r['reversed_at_0']:.3f} | {r['ruled_out_at_sesoi']:.3f} | "
                   f"{r['ruled_out_at_0']:.3f} | {r['supported_at_sesoi']:.3f} | "
                   f"{r['bases_at_0']:.1f} / {r['bases_at_sesoi']:.1f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools.recipe_levels", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write the rows here as JSON")
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--items", type=int, default=1024)
    ap.add_argument("--seeds", type=int, default=1, help="seeds per arm per base")
    ap.add_argument("--plans", default="6,9,12/9", help="looks over bases; plans separated by '/'")
    ap.add_argument("--sds", default="0.04,0.07", help="SDs over bases of a base's effect (fractions)")
    ap.add_argument("--laws", default=",".join(BASE_LAWS))
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--sesoi", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=20261215)
    a = ap.parse_args(argv)
    laws = _list(a.laws, str, "laws")
    for law in laws:
        if law not in BASE_LAWS:
            raise SystemExit(f"--laws: expected some of {list(BASE_LAWS)}, got {law!r}")
    try:
        rows = [row(looks, law, tail, sd, a) for looks in _plans(a.plans) for law in laws
                for sd in _list(a.sds, float, "sds") for tail, _ in TAILS[law]]
    except ValueError as err:
        raise SystemExit(f"tools.recipe_levels: {err}") from None
    print(f"the verdict about the recipe, simulated: {a.sims} experiments a cell, {a.items} probes, {a.seeds} "
          f"seed(s) per arm per base, alpha {a.alpha:g}, sesoi {a.sesoi:g}, seed {a.seed}")
    for line in table(rows):
        print(line)
    if a.out:
        settings = {k: getattr(a, k) for k in ("sims", "items", "seeds", "plans", "sds", "alpha", "sesoi", "seed")}
        doc = {"settings": settings, "rows": [round_tree(r) for r in rows]}
        atomic_write_text(a.out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
