"""`make pilot`: measure a protocol before it is frozen, on a calibration split nothing decides on.

The pilot builds the base exactly as freeze does (`freeze.ensure_base`: the same bytes, written to
results/<protocol>/frozen/base.pt with a recipe stamp, so that freeze reuses it), then measures on
the calibration split (drawn from the probe distribution, disjoint from the probe and confirm sets;
the probe set is never looked at):

    base       greedy pass rate, overall, per stratum (depth/template/phrasing) and per program class
    k/G        each calibration task's passes k out of G rollouts at the registered G and temperature,
               and the share of them the registered band admits
    the arms  every registered arm x the first two registered seeds, by `harness.running.runner.execute`
               on a scratch tree whose "probe" set is the calibration split: on the same footing as
               the real runs, every arm (the decision rule's A, B, C and every control: P, N, D) runs
               every registered round with the same evaluation (the registered subset of the probes
               after each round but the last, all of them after the last), so its seeds have diverged
               as far as the readout's will (a self-play arm's seed spread grows after round 0). Per
               arm: its pass vector after the last round (`arms.<arm>.round`, and `measured_rounds`),
               the seed-to-seed spread and the item-level discordance; every round's per-seed pass
               rate (`round_pass_rates`: the design pools the run spread over them); the self-play
               proposals' k/G and band admission (round 0)
    reuse      expected epochs over each admitted rollout per round:
                   learner_steps_per_round * batch_size / (tasks_per_round * admission_rate * G)
               with the admission rate of the self-play arms' round-0 proposals

It writes results/<protocol>/frozen/pilot.json (canonical JSON, atomically), where freeze and the
design analysis (harness.readout.design.find_pilot) read it. freeze reruns a pilot whose inputs differ from
the protocol's, records the file's sha256 in the lock ("frozen/pilot.json"), passes its variance
components to the design analysis, and refuses
a protocol whose expected reuse exceeds gates.yaml band.max_reuse_epochs or whose base pass rate on
the calibration split lies outside model.yaml base_pass_range (`check`). Keys of pilot.json:

    format, protocol
    inputs        {protocol: {file: sha256 of its content less the registration's keys (Protocol.measured_sha256)}
                   of the files the measurements depend on, sets: {split: sha256},
                   base_sha256, source: sha256 of the harness and arms source}
    registered    {G, temperature, band, tasks_per_round, learner_steps_per_round, batch_size,
                   max_reuse_epochs, base_pass_range, seeds, rounds}
    calibration   {n_items, strata: one "depth/template/phrasing" label per item, in split order}
    base          {pass_rate, passed: "0101..." greedy outcome per item, per_stratum: {label: {n, passed, rate}},
                   per_class: {program class: {n, passed, rate}},
                   item_pass_probability: k_i / G per item at the registered temperature}
    k_over_G      {calibration: {k: count}, proposals: {k: count}, n_proposals}  (k as a string, 0..G)
    band          {admission_rate_calibration, admission_rate_proposals, admitted_groups_per_round}
    reuse         {rows_per_round, admitted_rollouts_per_round, expected_epochs (null when nothing is
                   admitted), max_epochs}
    measured_rounds {arm: the round (0-based) whose outcomes the arm's figures and the moments are from}
    round_pass_rates {arm: [{round, n_items (the probes scored that round), scored ("subset" or "all"),
                   pass_rates: {seed: pass rate}}] for every round}: harness.stats.power pools the run
                   spread over them (a floor under the pessimistic design's seed SDs)
    arms          {arm: {round, seeds: {seed: {pass_rate, passed}}, pass_rate_mean, seed_spread (max - min over seeds),
                   seed_sd, within_item_agreement (share of items on which every seed agrees),
                   discordant_items (items on which they do not), vs_base_discordance (mean over seeds of
                   the share of items whose outcome differs from the base's), vs_base (mean over seeds
                   of pass rate - base pass rate)}}
    variance      the variance components in one place: {n_items, base_pass_rate, item_p_base
                  (= base.item_pass_probability), seed_spread: {arm: x}, seed_sd: {arm: x},
                  within_item_agreement: {arm: x}, between_seed_discordance: {arm: 1 - within_item_agreement}}
    variance_components  the moments harness.stats.power fits its model to (power.MOMENT_KEYS):
                  {n_items, pass_rates: {arm: pass rate over items x seeds, at measured_rounds}, seed_sd: {arm: SD of
                   the per-seed pass rates}, seed_agreement: {arm: P(two seeds agree on an item)},
                   arm_agreement: P(two different arms agree on an item), over the pairs of the decision
                   rule's arms (A, B, C; not the controls) and seed pairs};
                  pass rates are clipped to [1/(2n), 1 - 1/(2n)] (the design model is on the logit scale)
    checks        {reuse_ok, base_in_range}
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import tempfile
from collections import Counter
from itertools import combinations
from pathlib import Path

from harness.core import kernels, parallel, paths, records, timing
from harness.core.seeds import derive_seed
from harness.core.settings import RunSettings
from harness.core.typed import RoundRecord, Typed
from harness.freeze.base import ensure_base
from harness.freeze.sets import materialise_sets
from harness.learning import frontier, numerics
from harness.learning.checkpoint import load_base
from harness.learning.sizes import SIZES
from harness.running import runner
from harness.running.evaluation import base_eval_record, greedy_pass, sample_verified
from harness.sandbox import pool
from harness.spec.frozen import code_version
from harness.spec.protocol import Protocol, ProtocolError, load_protocol
from harness.stats import power
from harness.stats.units import pts
from harness.tasks.contract import Task
from harness.tasks.splits import load_tasks, tasks_jsonl

FORMAT = 4  # 4: every arm runs every round, and every round's pass rates are kept; older pilots are rerun


# ---------------------------------------------------------------- pilot.json's sections as typed records
# (harness.core.typed: `to_dict` the one writer, `from_dict` the one reader; canonical JSON sorts the keys)


@dataclasses.dataclass(frozen=True)
class Count(Typed):
    """The base's greedy passes on a group of calibration items (a stratum, a program class)."""
    n: int          # items
    passed: int     # items passed
    rate: float     # passed / n (fraction)


@dataclasses.dataclass(frozen=True)
class SeedOutcome(Typed):
    """One pilot seed of an arm after its last round."""
    pass_rate: float  # fraction of the calibration items passed
    passed: str       # '0'/'1' per item


@dataclasses.dataclass(frozen=True)
class ArmSummary(Typed):
    """One arm's outcomes over the pilot seeds after the last round it ran (`arm_summary`). The
    spread and agreement figures are None with one seed."""
    round: int                             # the round (0-based) the figures are from
    seeds: dict[str, SeedOutcome]          # seed (as a string) -> its outcome
    pass_rate_mean: float                  # mean over seeds of the pass rate (fraction)
    seed_spread: float | None              # max - min pass rate over seeds (fraction)
    seed_sd: float | None                  # SD of the per-seed pass rates (fraction)
    within_item_agreement: float | None    # share of items on which every seed agrees
    discordant_items: int | None           # items on which they do not
    vs_base_discordance: float             # mean over seeds of the share of items whose outcome differs from the base's
    vs_base: float                         # mean over seeds of pass rate - base pass rate (fraction)


@dataclasses.dataclass(frozen=True)
class RoundRates(Typed):
    """One round of an arm in the pilot: the per-seed pass rates on the probes it scored."""
    round: int
    n_items: int                  # calibration items scored that round
    scored: str                   # "subset" or "all"
    pass_rates: dict[str, float]  # seed (as a string) -> pass rate (fraction)


@dataclasses.dataclass(frozen=True)
class PilotRegistered(Typed):
    """What the protocol registers that the pilot's figures are judged against."""
    G: int
    temperature: float
    band: dict
    tasks_per_round: int
    learner_steps_per_round: int
    batch_size: int
    max_reuse_epochs: float
    base_pass_range: list  # [lo, hi] pass-rate fractions
    seeds: list
    rounds: int


@dataclasses.dataclass(frozen=True)
class PilotBase(Typed):
    """The base on the calibration split."""
    pass_rate: float                   # greedy pass rate (fraction)
    passed: str                        # '0'/'1' greedy outcome per item
    per_stratum: dict[str, Count]
    item_pass_probability: list        # k_i / G per item at the registered temperature
    per_class: dict[str, Count] | None = None  # absent in an older pilot


@dataclasses.dataclass(frozen=True)
class KOverG(Typed):
    """Histograms of k out of G ({k as a string: count}, k = 0..G)."""
    calibration: dict
    proposals: dict
    n_proposals: int


@dataclasses.dataclass(frozen=True)
class BandAdmission(Typed):
    admission_rate_calibration: float  # share of the calibration tasks' k the band admits
    admission_rate_proposals: float    # share of the round-0 self-play proposals' k the band admits
    admitted_groups_per_round: float   # tasks_per_round x admission_rate_proposals


@dataclasses.dataclass(frozen=True)
class Reuse(Typed):
    rows_per_round: int                       # learner_steps_per_round x batch_size
    admitted_rollouts_per_round: float        # tasks_per_round x admission rate x G
    expected_epochs: float | None             # rows / admitted rollouts; None when nothing is admitted
    max_epochs: float                         # gates.yaml band.max_reuse_epochs


@dataclasses.dataclass(frozen=True)
class PilotChecks(Typed):
    reuse_ok: bool
    base_in_range: bool


@dataclasses.dataclass(frozen=True)
class Pilot(Typed):
    """pilot.json (the module docstring says what each section holds). `inputs`, `variance` and
    `variance_components` are read by their own readers (freeze, harness.stats.power) and kept as objects."""
    format: int
    protocol: str
    inputs: dict
    registered: PilotRegistered
    calibration: dict
    base: PilotBase
    k_over_G: KOverG
    band: BandAdmission
    reuse: Reuse
    arms: dict[str, ArmSummary]
    variance: dict
    variance_components: dict
    checks: PilotChecks
    measured_rounds: dict | None = None
    round_pass_rates: dict[str, list[RoundRates]] | None = None


def label(stratum) -> str:
    return "/".join(map(str, stratum))


def inputs(protocol: Protocol, splits: dict[str, list[Task]], base_sha: str) -> dict:
    """What a pilot's numbers depend on; a pilot.json with other inputs is stale. The protocol's files
    by their content less the keys that only state what the registration was sized on
    (Protocol.measured_sha256): writing the figures a pilot measured into the protocol keeps the pilot."""
    files = {f: protocol.measured_sha256(f) for f in sorted(protocol.raw)}
    return {"protocol": files, "sets": {name: records.sha256_bytes(tasks_jsonl(ts).encode()) for name, ts in sorted(splits.items())},
            "base_sha256": base_sha, "source": code_version()}


def run_pilot(name: str, results_dir: Path, device: str = "cpu", out=print, progress: bool = True,
              jobs: int = 1) -> dict:
    """Materialise the sets and build (or reuse) the base exactly as freeze does, measure (the arms'
    rounds `jobs` at a time), and write results/<protocol>/pilot.json. Returns its content."""
    protocol = load_protocol(name)
    kernels.pin(protocol.model.kernels(), f"pilot {protocol.name}")
    results_dir = Path(results_dir).resolve()
    if device == "cpu":  # as freeze does: the host's numerics first, which a later freeze checks against
        numerics.freeze_fingerprint(results_dir, protocol.name, SIZES[protocol.model.size], protocol.model.size,
                                    [protocol.model.run_threads, protocol.model.base.torch_threads], out)
    splits = materialise_sets(protocol, results_dir, out)
    base_path = ensure_base(protocol, results_dir, splits["warmup"], device, out, progress)
    return measure_and_write(protocol, results_dir, splits, base_path, device, out, jobs)


def measure_and_write(protocol: Protocol, results_dir: Path, splits: dict[str, list[Task]], base_path: Path, device,
                      out=print, jobs: int = 1, base_first: bool = False) -> dict:
    """The pilot on sets and a base already materialised (by run_pilot, or by the freeze that runs it).
    `base_first` (freeze): refuse a base outside its registered range before the arms' rounds."""
    pool.hide(results_dir)  # the materialised sets and their answers are there now
    data = measure(protocol, splits, base_path.read_bytes(), load_base(results_dir, protocol, device), device, out,
                   jobs=jobs, base_first=base_first)
    path = paths.pilot_path(results_dir, protocol.name)
    records.atomic_write_text(path, records.canonical_json(data) + "\n")
    for line in summary(data):
        out(f"[pilot] {line}")
    out(f"[pilot] written: {path}")
    return data


def measure(protocol: Protocol, splits: dict[str, list[Task]], base_bytes: bytes, model, device, out=print,
            jobs: int = 1, base_first: bool = False) -> dict:
    """Every measurement of the module docstring, as pilot.json's content. `base_first`: raise
    `check`'s ProtocolError for a base outside model.yaml's range as soon as it is measured, before
    the arms' rounds (most of the pilot's time) that freeze would then throw away."""
    b, band = protocol.budget, protocol.gates.band
    G, calib = b.G, splits["calibration"]
    with timing.timed(out, f"[pilot] base on the calibration split ({len(calib)} tasks): greedy, then {G} rollouts "
                           f"each at T={b.temperature}"), timing.heartbeat(out, "[pilot] base on the calibration split"):
        passed, _ = greedy_pass(model, calib, b.max_bytes, device)
        _, verdicts = sample_verified(model, calib, max_bytes=b.max_bytes, temperature=b.temperature, repeats=G,
                                      seed=derive_seed("pilot", protocol.seeds.task_seed, "k_over_G"), device=device)
    k_calib = [sum(verdicts[i * G + j].passed for j in range(G)) for i in range(len(calib))]
    strata = [label(t.stratum) for t in calib]
    per_stratum = _counts(strata, passed, sorted(set(strata)))
    per_class = _counts([protocol.family.program_class(t) for t in calib], passed, protocol.family.classes)
    base_rate = sum(passed) / len(passed)
    if base_first:
        check_base(protocol, base_rate)

    seeds, last = protocol.run_seeds[:protocol.seeds.pilot_seeds], last_rounds(protocol)
    with timing.timed(out, f"[pilot] every arm x seeds {seeds} on a scratch tree, {jobs} at a time: "
                           f"{', '.join(protocol.arm_names)} through round {max(last.values())}"):
        arm_rounds, proposals, per_round = arm_runs(protocol, splits, base_bytes, seeds, last, device, jobs, model, out)
    admits = lambda k: frontier.admits(band.frontier, k, G, **band.params())  # noqa: E731
    adm_calib = sum(map(admits, k_calib)) / len(k_calib)
    adm_prop = sum(map(admits, proposals)) / len(proposals) if proposals else 0.0
    rows = b.learner_steps_per_round * b.batch_size
    admitted_rollouts = b.tasks_per_round * adm_prop * G
    epochs = rows / admitted_rollouts if admitted_rollouts > 0 else None
    arms = {arm: arm_summary(runs, passed, last[arm]) for arm, runs in arm_rounds.items()}
    lo, hi = protocol.model.base_pass_range
    return Pilot(
        format=FORMAT, protocol=protocol.name,
        inputs=inputs(protocol, splits, records.sha256_bytes(base_bytes)),
        registered=PilotRegistered(G=G, temperature=b.temperature, band=dataclasses.asdict(band),
                                   tasks_per_round=b.tasks_per_round, learner_steps_per_round=b.learner_steps_per_round,
                                   batch_size=b.batch_size, max_reuse_epochs=band.max_reuse_epochs,
                                   base_pass_range=[lo, hi], seeds=seeds, rounds=b.rounds),
        calibration={"n_items": len(calib), "strata": [label(t.stratum) for t in calib]},
        base=PilotBase(pass_rate=base_rate, passed="".join(map(str, passed)), per_stratum=per_stratum,
                       per_class=per_class, item_pass_probability=[k / G for k in k_calib]),
        k_over_G=KOverG(calibration=_hist(k_calib, G), proposals=_hist(proposals, G), n_proposals=len(proposals)),
        band=BandAdmission(admission_rate_calibration=adm_calib, admission_rate_proposals=adm_prop,
                           admitted_groups_per_round=b.tasks_per_round * adm_prop),
        reuse=Reuse(rows_per_round=rows, admitted_rollouts_per_round=admitted_rollouts, expected_epochs=epochs,
                    max_epochs=band.max_reuse_epochs),
        measured_rounds={arm: last[arm] for arm in arms},
        round_pass_rates=per_round,
        arms=arms,
        variance=variance(arms, base_rate, [k / G for k in k_calib]),
        variance_components=moments(arm_rounds, len(calib)),
        checks=PilotChecks(reuse_ok=epochs is not None and epochs <= band.max_reuse_epochs,
                           base_in_range=lo <= base_rate <= hi),
    ).to_dict()


def _counts(groups: list[str], passed: list[int], names) -> dict[str, Count]:
    """The base's passes per group of items (groups[i] names item i's group), for each of `names`
    that holds an item, in that order."""
    n, won = Counter(groups), Counter(g for g, p in zip(groups, passed) if p)
    return {g: Count(n=n[g], passed=won[g], rate=won[g] / n[g]) for g in names if n[g]}


def variance(arms: dict[str, ArmSummary], base_rate: float, item_p_base: list[float]) -> dict:
    """pilot.json's "variance": the variance components in one place (see the module docstring)."""
    return {"n_items": len(item_p_base), "base_pass_rate": base_rate, "item_p_base": item_p_base,
            "seed_spread": {a: v.seed_spread for a, v in arms.items()},
            "seed_sd": {a: v.seed_sd for a, v in arms.items()},
            "within_item_agreement": {a: v.within_item_agreement for a, v in arms.items()},
            "between_seed_discordance": {a: (None if v.within_item_agreement is None else 1 - v.within_item_agreement)
                                         for a, v in arms.items()}}



def _hist(ks: list[int], G: int) -> dict[str, int]:
    c = Counter(ks)
    return {str(k): c[k] for k in range(G + 1)}


def last_rounds(protocol: Protocol) -> dict[str, int]:
    """{arm: the last round (0-based) the pilot runs it to}: every registered round, for every arm."""
    return dict.fromkeys(protocol.arm_names, protocol.budget.rounds - 1)


def arm_runs(protocol: Protocol, splits: dict[str, list[Task]], base_bytes: bytes, seeds: list[int], last: dict[str, int],
             device, jobs: int = 1, model=None, out=None) -> tuple[dict[str, dict[int, str]], list[int],
                                                                   dict[str, list[RoundRates]]]:
    """Every arm x seed through the runner's round loop (runner.execute: no lock, never sealed or
    tracked) up to round `last[arm]`, on a scratch tree (deleted afterwards) that holds the sets
    with the calibration split in the probe set's place, the base, and `model`'s (the base loaded
    from `base_bytes`) one evaluation on the calibration split, as freeze scores the base once.
    Returns ({arm: {seed: probe_passed after round last[arm]}}, the k of every distinct self-play
    proposal that reached the solver in round 0, pilot.json's round_pass_rates: every round's per-seed
    pass rate on the probes it scored). The runs go `jobs` at a time, longest first
    (spawned processes read the scratch tree), and are read back in arm x seed order. Given `out`,
    a line as each ends (a counter and an ETA) and a heartbeat every 30 s."""
    with tempfile.TemporaryDirectory(prefix=f"pilot-{protocol.name}-") as tmp:
        scratch = Path(tmp)
        sets = {**splits, "probe": splits["calibration"]}  # the runner's per-round evaluation sees calibration only
        for s in paths.SPLITS:
            records.atomic_write_text(scratch / f"{s}.jsonl", tasks_jsonl(sets[s]))
        (scratch / "base.pt").write_bytes(base_bytes)
        scored = base_eval_record(model, sets["probe"], protocol.budget, records.sha256_bytes(base_bytes), device)
        records.atomic_write_text(scratch / "base_eval.json", records.canonical_json(scored) + "\n")
        outcomes: dict[str, dict[int, str]] = {}
        by_round: dict[str, dict[int, RoundRates]] = {}
        ks: dict[tuple, int] = {}
        calls = sorted([(str(protocol.dir), arm, seed, str(scratch), device, last[arm]) for arm in protocol.arm_names
                        for seed in seeds], key=lambda c: -c[5])  # the longest runs first: the jobs end together
        progress = timing.Progress([(c[1], c[5]) for c in calls], jobs)  # an arm's runs to one round take alike

        def done(call, _):
            progress.done(calls.index(call))
            out(f"[pilot] {call[1]} seed {call[2]}: rounds 0-{call[5]} done (runs {progress.text()})")
        with (timing.heartbeat(out, "[pilot] arms' rounds", status=lambda: f"runs done {progress.text()}")
              if out else contextlib.nullcontext()):
            rdirs = parallel.each(_pilot_run, calls, jobs, on_done=done if out else None)
        for (_, arm, seed, _, _, r_last), rdir in zip(calls, rdirs):
            rounds = _rounds(rdir / "records.jsonl")
            if not rounds or rounds[-1].round != r_last:
                raise RuntimeError(f"pilot: {arm} seed {seed} recorded rounds up to "
                                   f"{rounds[-1].round if rounds else 'none'}, not {r_last} ({rdir / 'records.jsonl'})")
            outcomes.setdefault(arm, {})[seed] = rounds[-1].eval.probe_passed
            for rec in rounds:
                bits = rec.eval.probe_passed
                row = by_round.setdefault(arm, {}).setdefault(rec.round, RoundRates(
                    round=rec.round, n_items=len(bits),
                    scored=rec.eval.value("probes_scored") if rec.eval.has("probes_scored") else "all", pass_rates={}))
                row.pass_rates[str(seed)] = bits.count("1") / len(bits)
            if (rdir / "ledger.jsonl").exists():
                for e in records.RecordLog(rdir / "ledger.jsonl").records():
                    if e.get("solver") and "k" in e and e["round"] == 0:
                        ks[(seed, e["task"], e["round"])] = e["k"]  # B and C explore alike: count once
    per_round = {arm: [by_round[arm][r] for r in sorted(by_round[arm])] for arm in protocol.arm_names}
    return {arm: outcomes[arm] for arm in protocol.arm_names}, [ks[key] for key in sorted(ks)], per_round


def _rounds(path: Path) -> list[RoundRecord]:
    """The round records of a pilot run's records.jsonl."""
    raw = records.RecordLog(path).records()
    return [RoundRecord.from_dict(r, f"{path}:{i + 1}") for i, r in enumerate(raw) if r.get("kind") == "round"]


def _pilot_run(protocol_dir: str, arm: str, seed: int, scratch: str, device: str, last: int) -> Path:
    """One pilot run: rounds 0..last of arm x seed on the scratch tree (a module-level function: a job)."""
    protocol, tree = load_protocol(protocol_dir), Path(scratch)
    sets = {s: load_tasks(tree / f"{s}.jsonl", protocol.family) for s in paths.SPLITS}
    settings = RunSettings(device=device, results_dir=tree, tracking=False, progress="off")
    scored = json.loads((tree / "base_eval.json").read_text())
    return runner.execute(protocol, arm, seed, sets, tree / "base.pt", scored, tree / arm / f"seed{seed}", settings,
                          lock=None, last_round=last)  # its last round scored on every probe, as a run's is


def arm_summary(runs: dict[int, str], base_passed: list[int], last_round: int) -> ArmSummary:
    """One arm's outcomes over seeds after `last_round`, the last round it ran -> spread, agreement and
    discordance (see the module docstring)."""
    vecs = {seed: [int(c) for c in bits] for seed, bits in runs.items()}
    rates = [sum(v) / len(v) for v in vecs.values()]
    n = len(base_passed)
    agree = [len({v[i] for v in vecs.values()}) == 1 for i in range(n)]
    multi = len(vecs) > 1
    return ArmSummary(
        round=last_round,
        seeds={str(s): SeedOutcome(pass_rate=sum(v) / len(v), passed=runs[s]) for s, v in vecs.items()},
        pass_rate_mean=statistics.fmean(rates),
        seed_spread=max(rates) - min(rates) if multi else None,
        seed_sd=statistics.stdev(rates) if multi else None,
        within_item_agreement=sum(agree) / n if multi else None,
        discordant_items=n - sum(agree) if multi else None,
        vs_base_discordance=statistics.fmean(sum(a != b for a, b in zip(v, base_passed)) / n for v in vecs.values()),
        vs_base=statistics.fmean(rates) - sum(base_passed) / n)


def moments(arm_rounds: dict[str, dict[int, str]], n: int) -> dict:
    """power.MOMENT_KEYS from the arms' outcomes after the last round each ran (see the module docstring)."""
    vecs = {a: [[int(c) for c in bits] for _, bits in sorted(runs.items())] for a, runs in arm_rounds.items()}
    clip = lambda p: min(max(p, 0.5 / n), 1 - 0.5 / n)  # noqa: E731

    def agree(u, v):
        return sum(x == y for x, y in zip(u, v)) / n
    rates = {a: clip(statistics.fmean(sum(v) / n for v in vs)) for a, vs in vecs.items()}
    sds = {a: statistics.stdev([sum(v) / n for v in vs]) if len(vs) > 1 else 0.0 for a, vs in vecs.items()}
    seed_agree = {a: statistics.fmean(agree(u, v) for u, v in combinations(vs, 2)) if len(vs) > 1 else 1.0
                  for a, vs in vecs.items()}
    compared = sorted(a for a in vecs if a in power.ARMS) or sorted(vecs)  # the decision rule's arms only
    cross = [agree(u, v) for a, b in combinations(compared, 2) for u in vecs[a] for v in vecs[b]]
    return {"n_items": n, "pass_rates": rates, "seed_sd": sds, "seed_agreement": seed_agree,
            "arm_agreement": statistics.fmean(cross) if cross else 1.0}


def summary(data: dict | Pilot) -> list[str]:
    """Printable lines: the figures a researcher calibrates a protocol with (`data`: pilot.json's content)."""
    data = Pilot.from_dict(data, "pilot.json")
    reg, base, band, reuse = data.registered, data.base, data.band, data.reuse
    lines = [f"base pass rate on the calibration split: {base.pass_rate:.3f} ({base.passed.count('1')}/"
             f"{len(base.passed)}); registered range {reg.base_pass_range}",
             "base per stratum: " + ", ".join(f"{k} {v.passed}/{v.n}" for k, v in base.per_stratum.items()),
             "base per program class: " + ", ".join(f"{k} {v.passed}/{v.n}" for k, v in (base.per_class or {}).items()),
             f"k/G at G={reg.G}, T={reg.temperature}: calibration {data.k_over_G.calibration}; "
             f"round-0 proposals {data.k_over_G.proposals}",
             f"band admission: calibration {band.admission_rate_calibration:.3f}, proposals "
             f"{band.admission_rate_proposals:.3f} ({band.admitted_groups_per_round:.1f} groups per round)",
             f"expected reuse: {reuse.rows_per_round} rows per round over {reuse.admitted_rollouts_per_round:.1f} "
             f"admitted rollouts = {_fmt(reuse.expected_epochs)} epochs (registered max {reuse.max_epochs})"]
    for arm, a in data.arms.items():
        lines.append(f"arm {arm}: pass rate after round {a.round} {a.pass_rate_mean:.3f} (vs base {a.vs_base:+.3f}); seed spread "
                     f"{_fmt(a.seed_spread)}; within-item agreement {_fmt(a.within_item_agreement)}; "
                     f"discordant with the base {a.vs_base_discordance:.3f}")
    per_round = data.round_pass_rates or {}
    if per_round:
        lines.append("seed SD of the pass rate by round (a subset's n before the last round): " + "; ".join(
            f"{arm} " + " ".join(f"r{row.round} {_seed_sd(row.pass_rates)} (n {row.n_items})" for row in rows)
            for arm, rows in per_round.items()))
    return lines


def _seed_sd(rates: dict) -> str:
    """The seed SD of one round's pass rates, in points ("n/a" under two seeds)."""
    vals = list(rates.values())
    return "n/a" if len(vals) < 2 else pts(statistics.stdev(vals), signed=False, digits=2)


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def check(protocol: Protocol, data: dict | Pilot) -> None:
    """Refuse (ProtocolError naming the file, the key and the number) a protocol the pilot finds
    miscalibrated: expected reuse above the registered maximum, or a base outside its range."""
    data = Pilot.from_dict(data, "pilot.json")
    epochs, mx = data.reuse.expected_epochs, protocol.gates.band.max_reuse_epochs
    if epochs is None or epochs > mx:
        got = "no admitted rollout at all" if epochs is None else f"{epochs:.2f} epochs"
        raise ProtocolError(f"{protocol.dir / 'gates.yaml'}: key 'band.max_reuse_epochs': the pilot expects each admitted "
                            f"rollout to be trained on {got} per round (band admission {data.band.admission_rate_proposals:.3f}), "
                            f"above the registered maximum {mx}; register more tasks per round, a larger G, a wider band "
                            f"or fewer learner steps")
    check_base(protocol, data.base.pass_rate)


def check_base(protocol: Protocol, rate: float) -> None:
    """ProtocolError when the base's pass rate on the calibration split is outside model.yaml's range."""
    lo, hi = protocol.model.base_pass_range
    if not lo <= rate <= hi:
        raise ProtocolError(f"{protocol.dir / 'model.yaml'}: key 'base_pass_range': the base passes {rate:.3f} of the pilot's "
                            f"calibration split, outside the registered range [{lo}, {hi}]: at the floor or the ceiling every "
                            f"arm ties; change the base recipe")


def ensure_pilot(protocol: Protocol, results_dir: Path, splits: dict[str, list[Task]], base_path: Path, device,
                 out=print, jobs: int = 1) -> dict:
    """freeze's pilot step: reuse results/<protocol>/pilot.json when it measured exactly these inputs,
    run the pilot otherwise; then `check` it. Returns the pilot's content."""
    path = paths.pilot_path(results_dir, protocol.name)
    want = inputs(protocol, splits, records.sha256_file(base_path))
    data = json.loads(path.read_text()) if path.exists() else None
    if data is not None and data.get("inputs") == want and data.get("format") == FORMAT:
        out(f"[freeze] pilot: {path} measured this very protocol and base; kept")
    else:
        out(f"[freeze] pilot: {'no pilot.json' if data is None else 'pilot.json measured other inputs'}; "
            f"running the pilot first (make pilot PROTOCOL={protocol.name})")
        data = measure_and_write(protocol, results_dir, splits, base_path, device, out, jobs, base_first=True)  # freeze built both
    check(protocol, data)
    return data
