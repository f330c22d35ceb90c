"""Typed records: frozen dataclasses read from, and written back to, the JSON objects the harness stores.

A class declares its fields with their types; `from_dict` is its one reader (it checks that every
required field is there and that nested sections are objects and lists, converting those declared as
typed, and names the file and field on a bad one) and `to_dict` its one writer. Reading then writing
gives back the same dict, so the bytes written (canonical JSON, keys sorted) do not change:

  - a field with a default (`= None`) may be absent; when it was absent on reading it is absent on
    writing (an old record stays the record it was, it does not gain a null field);
  - a key the class does not declare is kept as read and written back (a record of another format
    version round-trips; the readers read only the declared fields);
  - values are kept as read (an int stays an int, a float a float); only declared sections become
    objects.

Fields typed `SomeRecord`, `dict[str, SomeRecord]`, `list[SomeRecord]` or `SomeRecord | None` are
converted; every other field is kept as the JSON value, checked only to be a dict or a list when
declared so. A record of a lower layer that is no `Typed` (the statistics' records, harness.stats sits
below harness.core) converts the same way when it is a dataclass with its own `from_dict(data, where)`
and `to_dict()`, which then keep the same promise: reading then writing gives back the same dict.
"""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

from harness.core.errors import HarnessError


class RecordError(HarnessError, ValueError):
    """A stored record lacks a field or holds a section of the wrong shape; the message names where."""


@dataclasses.dataclass(frozen=True)
class Typed:
    """Base of every typed record. Subclasses are `@dataclasses.dataclass(frozen=True)`."""

    # which declared fields were absent when read, and the undeclared keys as read (set by from_dict)
    _absent = frozenset()
    _extra: typing.ClassVar[dict] = {}

    @classmethod
    def from_dict(cls, data: Any, where: str = ""):
        """Read `data` (a JSON object) as this record; RecordError naming `where` and the field when a
        required field is missing or a section is not an object / list. A record is returned as is."""
        if isinstance(data, cls):
            return data
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise RecordError(f"{where}: expected an object ({cls.__name__}), got {type(data).__name__}")
        hints = _hints(cls)
        values, absent = {}, []
        for f in _fields(cls):
            if f.name in data:
                values[f.name] = _read(hints[f.name], data[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING:
                raise RecordError(f"{where}: lacks field '{f.name}' ({cls.__name__})")
            else:
                absent.append(f.name)
        record = cls(**values)
        declared = {f.name for f in _fields(cls)}
        object.__setattr__(record, "_absent", frozenset(absent))
        object.__setattr__(record, "_extra", {k: v for k, v in data.items() if k not in declared})
        return record

    def to_dict(self) -> dict:
        """The JSON object of this record: every declared field present when read (or set when built),
        then the undeclared keys as read."""
        out = {f.name: _write(getattr(self, f.name)) for f in _fields(type(self)) if f.name not in self._absent}
        out.update(self._extra)
        return out

    def has(self, name: str) -> bool:
        """Whether the record holds `name`: a declared field present when read (a record built in code has
        all of them), or an undeclared key kept as read."""
        return name in self._extra or (name in _names(type(self)) and name not in self._absent)

    def value(self, name: str) -> Any:
        """The field or kept key `name` (for the readers that go by name, such as the monitors); None
        when the record does not hold it."""
        if name in _names(type(self)):
            return getattr(self, name)
        return self._extra.get(name)


@functools.cache
def _fields(cls) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(cls)


@functools.cache
def _names(cls) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@functools.cache
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_record(hint) -> bool:
    """A Typed record, or a dataclass with its own reader and writer (see the module docstring)."""
    return isinstance(hint, type) and (issubclass(hint, Typed) or _own_record(hint))


def _own_record(cls) -> bool:
    return dataclasses.is_dataclass(cls) and callable(getattr(cls, "from_dict", None)) \
        and callable(getattr(cls, "to_dict", None))


def _read(hint, value, where: str):
    """`value` as the declared type `hint` (see the module docstring for what is converted)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _read(inner[0], value, where) if len(inner) == 1 else value
    if _is_record(hint):
        return hint.from_dict(value, where)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object, got {type(value).__name__}")
        if len(args) == 2:
            return {k: _read(args[1], v, f"{where}.{k}") for k, v in value.items()}
        return value
    if origin is list or hint is list:
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {type(value).__name__}")
        if args:
            return [_read(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value
    return value


def _write(value):
    if isinstance(value, Typed) or (not isinstance(value, type) and _own_record(type(value))):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _write(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_write(v) for v in value]
    return value


# ---------------------------------------------------------------- a run's records (records.jsonl, manifest.json)

@dataclasses.dataclass(frozen=True)
class EvalRecord(Typed):
    """One evaluation on the probe set (a start record's base_eval, a round's eval). `probe_passed` is
    one '0'/'1' per probe scored; completions and reasons are per probe, when kept."""
    probe_passed: str
    probe_pass_rate: float | None = None
    heldout_bpb: float | None = None
    monitor_within_entropy: float | None = None
    monitor_cross_mi: float | None = None
    probe_completions: Any = None  # checked by the reader that knows the probe count
    probe_reasons: Any = None
    probe_retried: int | None = None


@dataclasses.dataclass(frozen=True)
class StartRecord(Typed):
    """records.jsonl line 1: what the run is, tied to the lock, and the base's one evaluation."""
    kind: str
    protocol: str
    arm: str
    seed: int
    lock_hash: str | None
    code_version: str
    base_eval: EvalRecord
    budget: dict
    registered: dict | None = None
    kernels: Any = None


@dataclasses.dataclass(frozen=True)
class HeirCommitRecord(Typed):
    """A gated round's commit gate: the screen (None when it did not run), the confirm decision,
    the recovery and the update continued instead of it."""
    confirm: dict
    recovery: dict
    screen: dict | None = None
    continued_update: dict | None = None


@dataclasses.dataclass(frozen=True)
class RoundRecord(Typed):
    """records.jsonl lines 2..: one round. `train`, `monitors`, `band` and `heircommit` are the sections
    an arm's kind writes (absent for the others)."""
    kind: str
    round: int
    eval: EvalRecord
    budget: dict
    checkpoint: str
    ledger_lines: int
    experience_lines: int
    train: Any = None
    monitors: dict | None = None
    band: dict | None = None
    heircommit: HeirCommitRecord | None = None

    def monitor(self, name: str) -> float | None:
        """A solver monitor of this round by name (None when the round has none)."""
        return (self.monitors or {}).get(name)


@dataclasses.dataclass(frozen=True)
class RunManifest(Typed):
    """A sealed run's manifest.json: the runner's fields, then every file's sha256 and every chain's head."""
    protocol: str
    arm: str
    seed: int
    lock_hash: str | None
    code_version: str
    rounds: int
    files: dict
    chain_heads: dict
    budget_consumed: dict
    wall_clock_s: Any
    budget_registered: dict | None = None
    provenance: Any = None  # checked by the readout (harness.spec.provenance)
    deviations_head: dict | None = None  # the deviations log's head at the seal (harness.spec.deviations.head)
