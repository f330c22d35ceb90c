"""Where the verdict comes from: the report's header line (`provenance_line`: the commit and
environment the protocol was frozen with, and whether every run used the same) and its Provenance
section (the lock, the inputs' hashes, the registration, the rules, every run read)."""
from __future__ import annotations

from harness.readout.report.blocks import _p, _section, _tbl, _ul, run_order
from harness.readout.verdict import Verdict, as_verdict
from harness.readout.words import spread_words
from harness.spec import provenance
from harness.stats.units import pts


def _commit(git_commit, git_clean) -> str:
    """"`f9b20ef5e547`" with "(uncommitted changes)" when the checkout was not clean."""
    words = f"`{provenance.short(git_commit)}`" if git_commit else "not recorded"
    return words + (" (uncommitted changes)" if git_clean is False else "")


def provenance_line(verdict: Verdict | dict) -> str:
    """The report's header: the git commit and environment digest the protocol was frozen with, and
    whether every run was made with the same (else how many were not, named in the Provenance section)."""
    verdict = as_verdict(verdict)
    prov = verdict.provenance
    if not prov:
        return f"**Provenance:** not recorded in this verdict (format {verdict.format})."
    freeze, runs = prov.freeze, prov.runs
    if freeze is None:
        head = "**Provenance:** the lock records no environment"
    else:
        sha = freeze.environment_sha256
        head = (f"**Provenance:** frozen at git commit {_commit(freeze.git_commit, freeze.git_clean)} in "
                f"environment `{provenance.short(sha)}` ({provenance.summary(prov.environments[sha])})")
    same = freeze is not None and all(r is not None and r.git_commit == freeze.git_commit
                                      and r.environment_sha256 == freeze.environment_sha256 for r in runs.values())
    if same:
        return f"{head}; every run ({len(runs)}) on the same commit and environment."
    missing = sum(r is None for r in runs.values())
    other = [k for k, r in runs.items() if r is not None and freeze is not None
             and (r.git_commit, r.environment_sha256) != (freeze.git_commit, freeze.environment_sha256)]
    parts = [f"{len(other)} of {len(runs)} runs on another commit or environment (see Provenance)"] if other else []
    parts += [f"{missing} of {len(runs)} runs record none"] if missing else []
    return f"{head}; {'; '.join(parts)}."


def _provenance_blocks(verdict: Verdict) -> tuple[list[str], list[dict]]:
    """The Provenance section's lines on commits and environments, and a block per environment that
    differs from the freeze's (what differs, and which runs)."""
    prov = verdict.provenance
    if not prov:
        return [f"git commits and environments: not recorded in this verdict (format {verdict.format})"], []
    freeze, items, blocks = prov.freeze, [], []
    if freeze is not None:
        sha = freeze.environment_sha256
        items += [f"git commit at freeze: {_commit(freeze.git_commit, freeze.git_clean)} "
                  f"(`{freeze.git_commit}`)",
                  f"environment at freeze: sha256 `{sha}`: {provenance.summary(prov.environments[sha])}"]
    for sha, lines in prov.differences.items():
        runs = sorted((k for k, r in prov.runs.items() if r and r.environment_sha256 == sha), key=run_order)
        blocks += [_p(f"Environment `{provenance.short(sha)}` ({provenance.summary(prov.environments[sha])}), "
                      f"runs {', '.join(runs)}: {len(lines)} difference(s) from the freeze's:"), _ul(lines)]
    return items, blocks


def provenance_section(verdict: Verdict) -> dict:
    inp, spec = verdict.inputs, verdict.analysis.spec
    boot, rec, reg = spec.bootstrap, inp.lock_recorded, inp.registered
    items = [f"lock hash: `{inp.lock_hash}`",
             f"lock file sha256: `{inp.lock_file_sha256}`",
             f"code version (harness, arms and families source): `{inp.code_version}`",
             *([f"task family: {_family_words(inp.task_family)}; as locked, sha256 "
                f"`{inp.task_family['lock_sha256']}`"] if inp.task_family else []),
             f"probe set sha256: `{inp.probe_set_sha256}` ({inp.n_probes} probes)",
             f"seed set sha256: `{inp.seed_set_sha256}`",
             f"base checkpoint sha256: `{inp.base_sha256}`",
             f"versions as recorded in the lock: python {rec['python']}, torch {rec['torch']} (frozen {rec['created']})",
             f"registered: arms {', '.join(reg.arms)}; seeds {', '.join(map(str, reg.seeds))}; {reg.rounds} rounds",
             f"bootstrap: two-stage (each arm's seeds, then items shared by both arms), {boot.method}, "
             f"{boot.n_resamples} resamples, two-sided level {boot.confidence_level} (each end a one-sided "
             f"bound at alpha), rng seed {boot.rng_seed}",
             f"decision rule: alpha {spec.alpha} for every one-sided test, sesoi {pts(spec.sesoi)}, power "
             f"{spec.power}; beyond the seed spread: {spread_words(spec.spread_rule)}"]
    made, differ = _provenance_blocks(verdict)
    runs_prov = verdict.provenance.runs if verdict.provenance else {}

    def made_by(key: str) -> list[str]:
        r = runs_prov.get(key)
        return [_commit(r.git_commit, r.git_clean), f"`{provenance.short(r.environment_sha256)}`"] if r \
            else ["not recorded", "not recorded"]
    rows = [[f"`{k}`", f"`{r.manifest_sha256[:16]}`", f"`{r.chain_heads.get('records.jsonl', '')[:16]}`",
             f"`{r.chain_heads.get('ledger.jsonl', '-')[:16]}`", r.final_round, *made_by(k)]
            for k, r in sorted(inp.runs.items(), key=run_order)]
    return _section("provenance", "Provenance", [
        _ul(made + items), *differ, _p("Runs read (final round's probe outcomes):"),
        _tbl(["run", "manifest sha256", "records head", "ledger head", "final round", "git commit", "environment"],
             rows)])


def _family_words(fam: dict) -> str:
    """`code` version 1 (min_depth 2, ...): the task family as the verdict names it."""
    settings = ", ".join(f"{k} {v}" for k, v in fam["settings"].items())
    return f"`{fam['name']}` version {fam['version']} ({settings})"
