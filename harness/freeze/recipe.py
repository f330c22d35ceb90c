"""Freeze for a verdict about the recipe (decision.yaml `recipe`, seeds.yaml `bases`).

The registration is frozen once, before any base exists: the protocol's files, the materialised splits
(every base shares them, and the probes), the numerics fingerprint, and frozen/recipe.json: the
registered bases (init and data-order seeds), the group-sequential plan (its O'Brien-Fleming boundaries)
and the plan's operating characteristics simulated at the registered base spread. Its lock hashes all of
it and the source.

Each registered base is then a frozen tree of its own (harness.core.paths.base_tree), locked before any
run reads it: the shared splits, the base built from its two seeds, its one evaluation on the probes,
and a lock that names the registration's lock. A base is built when its look needs it: the plan's first
look at freeze, a later look's when `make experiment` reaches it. Which bases exist is fixed by the
registered seeds and their order; none is chosen by a result.
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import torch

from harness.core import kernels, paths, records, timing
from harness.core.errors import HarnessError
from harness.core.settings import Speed
from harness.freeze.base import ensure_base, write_base_eval
from harness.freeze.sets import materialise_sets
from harness.learning import numerics
from harness.learning.sizes import SIZES
from harness.sandbox import pool
from harness.spec import lock
from harness.spec.frozen import load_sets, lock_entries, verify_frozen
from harness.spec.protocol import Protocol, load_protocol
from harness.spec.recipe import SHARED, base_tree, registration_entries, verify_registration
from harness.stats import recipe as rs

# The simulated cells at freeze: (contrast's true effect in sesoi units, law of the base effects). The level
# of `supported` at 0, of `ruled_out` at the sesoi, each under normal, skewed and one-outlier bases, and the
# power of `ruled_out` at 0 and of `supported` at twice the sesoi under normal bases.
OC_CELLS = ((0.0, "normal"), (0.0, "skewed"), (0.0, "outlier"), (1.0, "normal"), (2.0, "normal"))


class RecipeError(HarnessError):
    """A recipe protocol's frozen trees that do not fit its registration."""


def recipe_design(protocol: Protocol, contrast: str, effect: float, law: str) -> rs.RecipeDesign:
    """The simulated design of one contrast at `effect` (fraction) with base effects of law `law`: the
    registered plan, rule and probes, one base SD per contrast (decision.yaml design.base_spread; the
    controls' contrasts take the largest), the registered seeds per base and design replicates."""
    dec = protocol.decision
    spread = dec.design["base_spread"]["sd"]
    base_sd = float(spread.get(contrast, max(spread.values())))
    return rs.RecipeDesign(looks=dec.recipe.looks, alpha=dec.alpha, sesoi=dec.sesoi, effect=effect, base_sd=base_sd,
                           base_law=law, n_items=protocol.tasks.probe.size, seeds_per_base=len(protocol.run_seeds),
                           n_sims=int(dec.design["replicates"]), seed=int(dec.design["rng_seed"]))


def plan_record(protocol: Protocol) -> dict:
    """recipe.json: the registered bases, the plan (boundaries), the rule's levels, and the plan's
    operating characteristics per decision contrast and OC_CELLS cell."""
    dec, bases = protocol.decision, protocol.seeds.bases
    plan = rs.obf_plan(dec.recipe.looks, dec.alpha)
    oc = {}
    for hi, lo in dec.contrasts:
        c = f"{hi}-{lo}"
        oc[c] = [{"effect_sesoi": k, "law": law, **_oc_summary(rs.recipe_oc(recipe_design(protocol, c, k * dec.sesoi, law)))}
                 for k, law in OC_CELLS]
    return {"bases": [bases.draw(k).to_dict() for k in range(1, bases.count + 1)], "plan": plan.to_dict(),
            "rule": {"alpha": dec.alpha, "sesoi": dec.sesoi, "control_alpha": dec.recipe.control_alpha,
                     "outlier_alpha": dec.recipe.outlier_alpha, "seeds_per_base": len(protocol.run_seeds),
                     "n_items": protocol.tasks.probe.size},
            "operating_characteristics": oc}


def _oc_summary(oc: rs.RecipeOC) -> dict:
    d = oc.to_dict()
    return {"share": d["share"], "expected_bases": d["expected_bases"], "max_bases": d["max_bases"],
            "mc_se": d["mc_se"], "base_sd": d["design"]["base_sd"]}


def plan_lines(plan: dict) -> list[str]:
    """What freeze prints of the registration: the looks and boundaries, then each contrast's simulated
    labels under the plan."""
    p = plan["plan"]
    lines = [f"sequential plan over bases: looks after {p['looks']} bases, O'Brien-Fleming z boundaries "
             f"{[round(z, 3) for z in p['z_bounds']]} (overall one-sided alpha {p['alpha']})"]
    for c, cells in plan["operating_characteristics"].items():
        for cell in cells:
            s = cell["share"]
            lines.append(f"  {c} at {cell['effect_sesoi']:g} x sesoi, {cell['law']} bases (SD {cell['base_sd']:.3f}): "
                         f"supported {s['supported']:.3f}, ruled_out {s['ruled_out']:.3f}, reversed {s['reversed']:.3f}; "
                         f"{cell['expected_bases']:.1f} bases expected, {cell['max_bases']} at most "
                         f"(MC s.e. {cell['mc_se']:.3f})")
    return lines


def power_shortfalls(plan: dict, power: float) -> list[str]:
    """The plan's simulated power below `power` under normal base effects at each contrast's registered base
    spread: P(ruled_out | no effect) and P(supported | the sesoi), one sentence each."""
    out = []
    for c, cells in plan["operating_characteristics"].items():
        for cell in cells:
            if cell["law"] != "normal" or cell["effect_sesoi"] not in (0.0, 1.0):
                continue
            label = "ruled_out" if cell["effect_sesoi"] == 0.0 else "supported"
            value = cell["share"][label]
            if value < power:
                out.append(f"{c}: P({label} | {'no effect' if label == 'ruled_out' else 'the sesoi'}) {value:.3f} under this "
                           f"plan at the registered base spread (SD {cell['base_sd']:.3f}), below the power {power}")
    return out


def freeze_recipe(name: str, results_dir: Path, device: str = "cpu", out=print, speed: Speed | None = None,
                  jobs: int = 1) -> dict:
    """Freeze recipe protocol `name`: the registration (once; a frozen one is verified), then the bases
    of the plan's first look. Returns the registration's lock."""
    protocol = load_protocol(name)
    name = protocol.name
    if not protocol.is_recipe:
        raise RecipeError(f"{protocol.dir / 'decision.yaml'}: key 'recipe' is null: not a protocol about the recipe")
    kernels.pin(protocol.model.kernels(), f"freeze {name}")
    results_dir = Path(results_dir).resolve()
    lock_path = paths.lock_path(results_dir, name)
    if lock_path.exists():
        locked = verify_registration(protocol, results_dir)
        out(f"[freeze] {name}: registration frozen, lock verified ({lock_path}, lock hash {locked['lock_hash'][:16]})")
    else:
        locked = _freeze_registration(protocol, results_dir, device, out)
    ensure_bases(protocol, results_dir, range(1, protocol.decision.recipe.looks[0] + 1), device, out, speed, jobs)
    return locked


def _freeze_registration(protocol: Protocol, results_dir: Path, device: str, out) -> dict:
    from harness.freeze.freeze import numerics_identity_lines  # one check, shared with the one-base freeze
    name = protocol.name
    if device == "cpu":
        fp = numerics.freeze_fingerprint(results_dir, name, SIZES[protocol.model.size], protocol.model.size,
                                         [protocol.model.run_threads, protocol.model.base.torch_threads], out)
        for line in numerics_identity_lines(protocol, fp):
            out(line)
    with timing.timed(out, "[freeze] stage 1/2 sets: materialising the splits every base shares"):
        materialise_sets(protocol, results_dir, out)
    with timing.timed(out, "[freeze] stage 2/2 plan: the sequential plan over bases, simulated"):
        plan = plan_record(protocol)
    for line in plan_lines(plan):
        out(f"[freeze] {line}")
    short = power_shortfalls(plan, protocol.decision.power)
    if short:
        out("!" * 78 + "\n" + "\n".join(f"!! WARNING: {w}" for w in short) + "\n" + "!" * 78)
    records.atomic_write_text(paths.recipe_plan_path(results_dir, name), records.canonical_json(plan) + "\n")
    prereg = paths.frozen_dir(results_dir, name) / paths.PREREG_NAME
    records.atomic_write_text(prereg, preregistration(protocol, plan))
    records.open_to_readers(prereg, results_dir)
    meta = {"protocol": name, "python": sys.version.split()[0], "torch": torch.__version__,
            "environment": lock.environment(device), "recipe": {"bases": protocol.seeds.bases.count,
                                                                "looks": list(protocol.decision.recipe.looks)}}
    locked = lock.write_lock(paths.lock_path(results_dir, name), registration_entries(protocol, results_dir), meta)
    out(f"[freeze] registration lock written: {paths.lock_path(results_dir, name)} (lock hash {locked['lock_hash'][:16]})")
    return locked


def ensure_bases(protocol: Protocol, results_dir: Path, indices, device: str = "cpu", out=print,
                 speed: Speed | None = None, jobs: int = 1) -> None:
    """Every base in `indices` frozen in its own tree (built, scored, locked), `jobs` at a time (each
    build computes with the recipe's base threads); a base frozen already is verified."""
    from harness.core import parallel
    reg = verify_registration(protocol, results_dir)
    todo = [k for k in indices if not paths.lock_path(base_tree(protocol, results_dir, k), protocol.name).exists()]
    for k in indices:
        if k not in todo:
            verify_frozen(protocol, base_tree(protocol, results_dir, k))
    if todo:
        at_once = max(1, min(len(todo), jobs // protocol.model.base.torch_threads))
        out(f"[freeze] bases {', '.join(protocol.seeds.bases.draw(k).label for k in todo)}: building {len(todo)}, "
            f"{at_once} at a time")
        t0 = time.perf_counter()

        done = []

        def built(call, result):
            done.append(result)
            out(f"[freeze] base {result['base']['label']} (init seed {result['base']['init_seed']}, data-order seed "
                f"{result['base']['data_order_seed']}): sha256 {result['base_sha256'][:12]}, probe pass rate "
                f"{result['base_pass_rate']:.3f}, in {timing.duration(result['seconds'])}")
        with timing.heartbeat(out, "[freeze] bases", status=lambda: f"bases built {len(done)}/{len(todo)}"):
            parallel.each(freeze_base, [(str(protocol.dir), k, str(results_dir), device, speed, reg["lock_hash"])
                                        for k in todo], at_once, on_done=built)
        out(f"[freeze] bases: done in {timing.duration(time.perf_counter() - t0)}")


def freeze_base(protocol_dir: str, k: int, results_dir: str, device: str, speed: Speed | None,
                registration_hash: str) -> dict:
    """Freeze registered base k of the recipe protocol at `protocol_dir` into its own tree (a job: a
    module-level function of plain values). The registration's shared files are copied in, the base is
    built from its two seeds and scored once on the probes, and the tree's lock names the registration's
    lock hash. Returns its freeze.json, with the seconds it took."""
    t0 = time.perf_counter()
    protocol = load_protocol(protocol_dir)
    results = Path(results_dir)
    own = protocol.for_base(k)
    tree = base_tree(protocol, results, k)
    name, src = protocol.name, paths.frozen_dir(results, protocol.name)
    dst = paths.frozen_dir(tree, name)
    for s, p in paths.set_paths(results, name).items():
        if s != "base":
            _copy(p, paths.set_paths(tree, name)[s])
    for f in SHARED:
        if (src / f).exists():
            _copy(src / f, dst / f)
    loaded = load_sets(tree, protocol)
    base_path = ensure_base(own, tree, loaded["warmup"], device, out=lambda *_: None, progress=False)
    pool.hide(results)
    scored = write_base_eval(own, tree, loaded["probe"], base_path, device, speed)
    summary = {"base": own.base_draw.to_dict(), "base_sha256": records.sha256_file(base_path),
               "base_pass_rate": scored["eval"]["probe_pass_rate"], "registration_lock_hash": registration_hash}
    records.atomic_write_text(paths.freeze_summary_path(tree, name), records.canonical_json(summary) + "\n")
    meta = {"protocol": name, "python": sys.version.split()[0], "torch": torch.__version__,
            "environment": lock.environment(device), "base": own.base_draw.to_dict(),
            "registration_lock_hash": registration_hash}
    lock.write_lock(paths.lock_path(tree, name), lock_entries(protocol, tree), meta)
    return {**summary, "seconds": time.perf_counter() - t0}


def _copy(src: Path, dst: Path) -> None:
    """A registration file into a base's tree: copied once, and never replaced by other bytes."""
    if dst.exists():
        if records.sha256_file(dst) != records.sha256_file(src):
            raise RecipeError(f"{dst}: differs from the registration's {src}; a base's tree holds the registration's "
                              f"files as frozen")
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def preregistration(protocol: Protocol, plan: dict) -> str:
    """PREREGISTRATION.md of a recipe protocol: the question, the bases, the rule, the plan, the outlier
    rule and the controls, as registered."""
    dec, rule = protocol.decision, protocol.decision.recipe
    bases = "\n".join(f"| {b['label']} | {b['init_seed']} | {b['data_order_seed']} |" for b in plan["bases"])
    p = plan["plan"]
    looks = "\n".join(f"| {j + 1} | {n} | {z:.3f} |" for j, (n, z) in enumerate(zip(p['looks'], p['z_bounds'])))
    controls = "\n".join(f"- {a}: must beat {', '.join(arm.check.must_beat)} by {arm.check.margin:g} (one-sided "
                         f"lower bound at level {rule.control_alpha:g} above the margin)" if arm.check.must_beat else
                         f"- {a}: must not beat {', '.join(arm.check.must_not_beat)} by more than {arm.check.margin:g}"
                         for a, arm in protocol.arms.items() if arm.check is not None)
    oc = "\n".join(f"- {line.strip()}" for line in plan_lines(plan)[1:])
    return f"""# Preregistration: {protocol.name} (a verdict about the recipe)

## Question
Does each registered contrast ({', '.join(f'{h} - {lo}' for h, lo in dec.contrasts)}) hold for the training recipe,
over bases built by it, at this scale? The effect is the mean over bases of each base's gap on the shared
{protocol.tasks.probe.size} probes; bases are a random factor.

## Bases (registered; every one is built, kept and read in this order)
| base | init seed | data-order seed |
|---|---|---|
{bases}

Every registered arm runs at seeds {protocol.run_seeds} on every base read.

## Decision rule
One-sided alpha {dec.alpha}, sesoi {dec.sesoi}. The recipe-level gap's bound adds the bases' part
(t over bases, K - 1 df) and the items' part (t over items, n - 1 df) (harness.stats.recipe).
Labels: reversed (high < 0), ruled_out (high < sesoi), supported (low > 0), else not_supported.

## Sequential plan
| look | bases read | z boundary |
|---|---|---|
{looks}

The plan stops at the first look at which every contrast is decided (supported, ruled_out or reversed),
else at the last. Simulated at freeze ({dec.design['replicates']} experiments a cell):
{oc}

## Outlier base
A base whose leave-one-out studentized gap exceeds the Bonferroni t at {rule.outlier_alpha} over the bases
read is reported with the labels the other bases give; the verdict stands on every base. No base is dropped.

## Controls
{controls}
"""
