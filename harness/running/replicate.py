"""`make replicate ARM=.. SEED=.. [ROUND=k]`: re-run one sealed run from the frozen inputs into a
scratch folder and compare it with the sealed files. The auditor's second tool beside `make audit`:
the audit says the verdict follows from the records; replicate says the records follow from the
protocol (same seed, same code, the registered kernel path: the same bytes on any x86-64 CPU).

From ROUND=k on, the sealed run's files up to round k-1 are copied into the scratch folder and the
run resumes there, as after a crash; nothing under the sealed run is ever opened for writing. The
comparison walks the rounds in order and names the first difference: a record field (its dotted
path, both values), a ledger or experience line, or a checkpoint tensor (its name, where it
differs first, both values).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from harness.core import paths, records
from harness.core.errors import HarnessError
from harness.core.kernels import KernelRecipe
from harness.core.settings import RunSettings
from harness.learning import numerics
from harness.running import runner
from harness.sandbox import pool
from harness.spec.frozen import load_sets, verify_frozen
from harness.spec.protocol import load_protocol

CHAINED = ("records.jsonl", "ledger.jsonl", "experience.jsonl")


class ReplicateError(HarnessError):
    """The run cannot be replicated: not sealed, not registered, or ROUND out of range."""


@dataclass(frozen=True)
class Difference:
    round: int | None      # the round it belongs to (None: the start record)
    where: str             # "records.jsonl line 3 field eval.probe_pass_rate", "checkpoints/round1.pt tensor ..."
    sealed: object
    replicated: object

    def line(self) -> str:
        at = "the start record" if self.round is None else f"round {self.round}"
        return f"first difference, {at}: {self.where}: sealed {_short(self.sealed)} != replicated {_short(self.replicated)}"


def replicate(protocol_name: str, arm: str, seed: int, results_dir: Path, from_round: int = 0,
              cpu_capability: str | None = None, out=print) -> list[Difference]:
    """Re-run arm x seed (from `from_round` on) and compare. Returns [] when identical, else the
    first difference of each compared file, earliest round first. `cpu_capability` replaces the
    registered kernel path for this replication only (to measure what another path changes)."""
    protocol = load_protocol(protocol_name)
    if arm not in protocol.arms or seed not in protocol.run_seeds:
        raise ReplicateError(f"{arm} seed {seed}: not a registered run of {protocol.name} (arms {protocol.arm_names}, "
                             f"seeds {protocol.run_seeds})")
    lock = verify_frozen(protocol, results_dir)
    sealed = paths.run_dir(results_dir, protocol.name, arm, seed)
    if not records.is_sealed(sealed):
        raise ReplicateError(f"{sealed} is not sealed: replicate compares a finished run; finish it first "
                             f"(`{paths.command_hint('run', protocol.name, results_dir, arm=arm, seed=seed)}`)")
    rounds = protocol.budget.rounds
    if not 0 <= from_round < rounds:
        raise ReplicateError(f"ROUND={from_round}: {protocol.name} registers rounds 0..{rounds - 1}")
    try:
        records.verify_sealed(sealed)
    except records.TamperError as err:
        out(f"[replicate] warning: the sealed run does not verify ({err}); comparing its files as they are")
    scratch = paths.replicate_dir(results_dir, protocol.name, arm, seed)
    _remove(scratch)
    _copy_rounds_before(sealed, scratch, from_round)
    recipe = protocol.model.kernels()
    if cpu_capability is not None:
        recipe = KernelRecipe(cpu_capability, recipe.threads)
    settings = RunSettings(results_dir=results_dir, tracking=False, progress="off")
    pool.hide(results_dir)
    out(f"[replicate] {protocol.name} {arm} seed {seed}: re-running rounds {from_round}..{rounds - 1} into {scratch}")
    runner.execute(protocol, arm, seed, load_sets(results_dir, protocol), paths.set_paths(results_dir, protocol.name)["base"],
                   runner.frozen_base_eval(results_dir, protocol, lock), scratch, settings, lock=lock,
                   kernel_recipe=recipe, seal=False)
    out(numerics_line(sealed, scratch))
    found = compare_runs(sealed, scratch)
    if not found:
        _remove(scratch)
    return found


def numerics_line(sealed: Path, replicated: Path) -> str:
    """Which numerics fingerprint (harness.learning.numerics) the sealed run and this replication ran on."""
    def digest(rdir: Path):
        first = (rdir / "records.jsonl").read_text().split("\n", 1)[0]
        return (json.loads(first).get("kernels") or {}).get("numerics") or "not recorded"
    a, b = digest(sealed), digest(replicated)
    return f"[replicate] numerics fingerprint here {b} on {numerics.host_cpu()}; the sealed run's {a}" + \
        ("" if a == b else ": another host's numerics, so its bytes are expected to differ")


def compare_runs(sealed: Path, replicated: Path) -> list[Difference]:
    """The first difference of each chained file and of the checkpoints, earliest round first."""
    bounds = _round_bounds(sealed)
    found = [d for name in CHAINED if (d := _first_line_difference(sealed, replicated, name, bounds))]
    for ckpt in sorted((sealed / "checkpoints").glob("round*.pt"), key=lambda p: int(p.stem[5:])):
        d = _first_tensor_difference(ckpt, replicated / "checkpoints" / ckpt.name)
        if d:
            found.append(d)
            break
    return sorted(found, key=lambda d: -1 if d.round is None else d.round)


def _copy_rounds_before(sealed: Path, scratch: Path, k: int) -> None:
    """The sealed files as they stood after round k-1 (nothing for k = 0), as the runner resumes them."""
    records.private_dirs(scratch / "checkpoints")
    if k == 0:
        return
    for name in (*CHAINED, "timing.log"):
        if (sealed / name).exists():
            shutil.copyfile(sealed / name, scratch / name)
    lines = (sealed / "records.jsonl").read_bytes().splitlines(keepends=True)
    keep = 1 + k  # the start record and rounds 0..k-1; the runner truncates the other files to them
    if len(lines) < keep or json.loads(lines[keep - 1]).get("round") != k - 1:
        raise ReplicateError(f"{sealed / 'records.jsonl'}: line {keep} is not round {k - 1}'s record")
    (scratch / "records.jsonl").write_bytes(b"".join(lines[:keep]))
    shutil.copyfile(sealed / "checkpoints" / f"round{k - 1}.pt", scratch / "checkpoints" / f"round{k - 1}.pt")
    for p in scratch.rglob("*"):
        if p.is_file():
            p.chmod(0o600)


def _round_bounds(sealed: Path) -> dict[str, list[int]]:
    """file -> the number of its lines at the end of each round (records.jsonl: start + rounds)."""
    recs = [json.loads(line) for line in open(sealed / "records.jsonl", "rb")]
    rounds = [r for r in recs if r.get("kind") == "round"]
    return {"records.jsonl": [2 + i for i in range(len(rounds))],
            "ledger.jsonl": [r.get("ledger_lines", 0) for r in rounds],
            "experience.jsonl": [r.get("experience_lines", 0) for r in rounds]}


def _round_of(line: int, ends: list[int]) -> int | None:
    """The round a 1-based line belongs to, from each round's end; None before round 0 (the start record)."""
    for r, end in enumerate(ends):
        if line <= end:
            return r
    return len(ends)


def _first_line_difference(sealed: Path, replicated: Path, name: str, bounds: dict) -> Difference | None:
    a = (sealed / name).read_bytes().splitlines() if (sealed / name).exists() else []
    b = (replicated / name).read_bytes().splitlines() if (replicated / name).exists() else []
    for i in range(max(len(a), len(b))):
        x, y = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
        if x == y:
            continue
        rnd = None if (name == "records.jsonl" and i == 0) else _round_of(i + 1, bounds[name])
        if x is None or y is None:
            return Difference(rnd, f"{name} line {i + 1}", "(no line)" if x is None else x.decode(errors="replace"),
                              "(no line)" if y is None else y.decode(errors="replace"))
        try:
            field, u, v = _first_field(json.loads(x), json.loads(y))
        except json.JSONDecodeError:
            return Difference(rnd, f"{name} line {i + 1} (not JSON)", x.decode(errors="replace"), y.decode(errors="replace"))
        return Difference(rnd, f"{name} line {i + 1} field {field}", u, v)
    return None


def _first_field(a, b, path: str = "") -> tuple[str, object, object]:
    """The dotted path of the first differing leaf of two JSON values (dicts in the sealed order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k in ("prev", "hash"):  # the chain follows from the fields; report the field itself
                continue
            if a.get(k, _MISSING) != b.get(k, _MISSING):
                return _first_field(a.get(k, _MISSING), b.get(k, _MISSING), f"{path}.{k}" if path else k)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_field(x, y, f"{path}[{i}]")
    elif isinstance(a, str) and isinstance(b, str) and len(a) == len(b) and len(a) > 64:
        i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)  # e.g. a probe outcome string
        return f"{path}[{i}]", a[i], b[i]
    if a == b:  # only the chain's own fields differ
        return "hash", a, b
    return path or "(the line)", a, b


def _first_tensor_difference(sealed: Path, replicated: Path) -> Difference | None:
    from harness.learning.checkpoint import read_checkpoint
    rnd = int(sealed.stem.removeprefix("round"))
    if not replicated.exists():
        return Difference(rnd, f"checkpoints/{sealed.name}", "present", "(missing)")
    if records.sha256_file(sealed) == records.sha256_file(replicated):
        return None
    (ta, ma), (tb, mb) = read_checkpoint(sealed), read_checkpoint(replicated)
    for name in list(ta) + [n for n in tb if n not in ta]:
        x, y = ta.get(name), tb.get(name)
        if x is None or y is None or x.shape != y.shape or x.dtype != y.dtype:
            return Difference(rnd, f"checkpoints/{sealed.name} tensor {name}", _desc(x), _desc(y))
        neq = (x != y).flatten().nonzero()
        if len(neq):
            i = int(neq[0])
            return Difference(rnd, f"checkpoints/{sealed.name} tensor {name} element {i} (of {x.numel()}, "
                                   f"{len(neq)} differ)", float(x.flatten()[i]), float(y.flatten()[i]))
    if ma != mb:
        field, u, v = _first_field(ma, mb)
        return Difference(rnd, f"checkpoints/{sealed.name} meta field {field}", u, v)
    return Difference(rnd, f"checkpoints/{sealed.name}", "the same tensors and meta", "other bytes")


def _desc(t) -> str:
    return "(missing)" if t is None else f"{tuple(t.shape)} {t.dtype}"


def _short(v, width: int = 120) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= width else s[:width - 3] + "..."


def _remove(path: Path) -> None:
    """rm -r of a scratch folder (its files may be read-only)."""
    if not path.exists():
        return
    for p in [path, *path.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            os.chmod(p, stat.S_IRWXU)
    shutil.rmtree(path)


_MISSING = "(absent)"
