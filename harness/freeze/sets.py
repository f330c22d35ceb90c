"""Freeze's first step: the protocol's task splits, built from the task seed and written under
frozen/sets/ (expected outputs included, so auditors see exactly what was probed)."""
from __future__ import annotations

from pathlib import Path

from harness.core import paths as core_paths
from harness.core import records
from harness.core.paths import SPLITS, set_paths
from harness.freeze import conformance
from harness.spec import lock
from harness.spec.protocol import Protocol, ProtocolError
from harness.tasks.splits import (
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
    """The protocol's task splits (SPLITS), exactly as freeze writes them: every split from the family's
    (probe) distribution, the held-out ones dealt from one pool (the confirm stream in C's per-round
    batches), the training splits stratified to the probe mix and guarded (harness.tasks.splits.build_splits).
    Raises ProtocolError naming tasks.yaml when the leak guard would exhaust a stratum."""
    try:
        return build_splits(protocol.family, protocol.seeds.task_seed, protocol.split_sizes(), protocol.guard,
                            protocol.tasks.leak_guard.max_held_out_fraction, confirm_batch=protocol.tasks.confirm.per_round)
    except ValueError as e:
        raise ProtocolError(f"{protocol.dir / 'tasks.yaml'}: {e}") from None


def report_splits(protocol: Protocol, splits: dict[str, list], out=print) -> None:
    """Print the split-mix tables (by stratum, then by program class), each capacity cell's capacity
    (the guard's key space, what the registered fraction lets the held-out splits take, what they need),
    the highest-mass class's programs held out against their cap, and the leak guard's registered
    choice and tightest cell."""
    family = protocol.family
    for line in mix_table(family, splits) + class_table(family, splits):
        out(f"[freeze] {line}")
    frac = protocol.tasks.leak_guard.max_held_out_fraction
    out(f"[freeze] task space per ({', '.join(family.cell_fields)}): held-out keys it holds, the {frac:.0%} the leak "
        f"guard lets the held-out splits take, their expected need:")
    for line in capacity_lines(family, split_capacity(family, protocol.split_sizes(), protocol.guard, frac)):
        out(f"[freeze]   {line}")
    held = [t for s in HELD_OUT_SPLITS for t in splits[s]]
    top = family.classes[0]
    rows = [r for r in class_capacity(family, held, protocol.guard, frac) if r["class"] == top and r["space"]]
    out(f"[freeze] {top} programs held out (of those there are; the cap is {frac:.0%}, the training splits "
        f"hold the rest): " + ", ".join(f"{family.describe_cell(r['cell'])} {r['held_out']}/{r['space']}" for r in rows))
    worst = guard_capacity(family, held, protocol.guard)[0]
    out(f"[freeze] leak guard: no probe, confirm or calibration program is in a training split; same steps with "
        f"other constants: {protocol.tasks.leak_guard.same_ops_other_constants}; tightest cell "
        f"{family.describe_cell(worst['cell'])}: {worst['held_out']} of {worst['space']} held out")


def materialise_sets(protocol: Protocol, results_dir: Path, out=print) -> dict[str, list]:
    """Run the conformance suite on the protocol's task family (refused: ConformanceError naming the
    property; its report is written to frozen/conformance.json), then build every registered split and
    write it under frozen/sets/. Sets already there must be byte-identical to what the protocol builds
    now (LockError otherwise). Returns split -> tasks."""
    report = conformance.require(protocol, out)
    records.atomic_write_text(core_paths.conformance_path(results_dir, protocol.name),
                              records.canonical_json(report.to_dict()) + "\n")
    out(f"[freeze] {protocol.name}: building splits {protocol.split_sizes()} of the task family {protocol.family!r} "
        f"from task seed {protocol.seeds.task_seed}")
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
