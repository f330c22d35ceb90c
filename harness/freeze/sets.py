"""Freeze's first step: the protocol's task splits, built from the task seed and written under
frozen/sets/ (expected outputs included, so auditors see exactly what was probed)."""
from __future__ import annotations

from pathlib import Path

from harness.core import records
from harness.core.paths import SPLITS, set_paths
from harness.spec import lock
from harness.spec.protocol import Protocol, ProtocolError
from harness.tasks.family import (
    HELD_OUT_SPLITS,
    build_splits,
    capacity_lines,
    class_capacity,
    class_table,
    guard_capacity,
    mix_table,
    split_capacity,
    tasks_jsonl,
)


def materialise(protocol: Protocol) -> dict[str, list]:
    """The protocol's task splits (SPLITS), exactly as freeze writes them: every split from the probe
    distribution, the held-out ones dealt from one pool (the confirm stream in C's per-round batches),
    the training splits stratified to the probe mix and guarded (harness.tasks.family.build_splits).
    Raises ProtocolError naming tasks.yaml when the leak guard would exhaust a stratum."""
    try:
        return build_splits(protocol.seeds.task_seed, protocol.split_sizes(), protocol.difficulty(), protocol.guard,
                            protocol.tasks.leak_guard.max_held_out_fraction, confirm_batch=protocol.tasks.confirm.per_round)
    except ValueError as e:
        raise ProtocolError(f"{protocol.dir / 'tasks.yaml'}: {e}") from None


def report_splits(protocol: Protocol, splits: dict[str, list], out=print) -> None:
    """Print the split-mix tables (by stratum, then by program class), each (template, depth)'s capacity
    (the guard's key space, what the registered fraction lets the held-out splits take, what they need),
    the constant-free programs held out against their cap, and the leak guard's registered choice and
    tightest stratum."""
    for line in mix_table(splits) + class_table(splits):
        out(f"[freeze] {line}")
    frac = protocol.tasks.leak_guard.max_held_out_fraction
    out(f"[freeze] task space per (template, depth): held-out keys it holds, the {frac:.0%} the leak guard lets the "
        f"held-out splits take, their expected need:")
    for line in capacity_lines(split_capacity(protocol.split_sizes(), protocol.difficulty(), protocol.guard, frac)):
        out(f"[freeze]   {line}")
    held = [t for s in HELD_OUT_SPLITS for t in splits[s]]
    free = [r for r in class_capacity(held, protocol.difficulty(), protocol.guard, frac) if r["class"] == "constant_free"]
    out(f"[freeze] constant-free programs held out (of those there are; the cap is {frac:.0%}, the training splits "
        f"hold the rest): " + ", ".join(f"{r['template']} depth {r['depth']} {r['held_out']}/{r['space']}" for r in free))
    worst = guard_capacity(held, protocol.difficulty(), protocol.guard)[0]
    out(f"[freeze] leak guard: no probe, confirm or calibration program is in a training split; same steps with "
        f"other constants: {protocol.tasks.leak_guard.same_ops_other_constants}; tightest stratum "
        f"{worst['template']} depth {worst['depth']}: {worst['held_out']} of {worst['space']} held out")


def materialise_sets(protocol: Protocol, results_dir: Path, out=print) -> dict[str, list]:
    """Build every registered split and write it under frozen/sets/. Sets already there must be
    byte-identical to what the protocol builds now (LockError otherwise). Returns split -> tasks."""
    out(f"[freeze] {protocol.name}: building splits {protocol.split_sizes()} from task seed {protocol.seeds.task_seed}")
    splits = materialise(protocol)
    report_splits(protocol, splits, out)
    paths = set_paths(results_dir, protocol.name)
    for s in SPLITS:
        data = tasks_jsonl(splits[s]).encode()
        if paths[s].exists() and paths[s].read_bytes() != data:
            raise lock.LockError(f"{paths[s]}: the materialised {s} set differs from what the protocol builds now; "
                                 f"a changed protocol is a new protocol")
        records.atomic_write_bytes(paths[s], data)
    return splits
