"""The registry of task families: a family's name -> the module that defines it.

A protocol names its family in tasks.yaml, `family: {name: <name>, ...its settings}`, as an arm names
its kind; the library imports the family's module by the path registered here and never by name in
code. A family defined elsewhere (a research package, a test) is registered by the protocol itself:
`family: {name: <name>, module: <dotted module path>, ...}`. Either way the module exposes `FAMILY`
(or, with `module: <path>:<attribute>`, that attribute), a harness.tasks.contract.TaskFamily subclass
whose `name` is the registered name.
"""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from harness.tasks.contract import TaskFamily

FAMILIES: dict[str, str] = {
    "code": "families.code",    # straight-line Python functions from three templates (arith, string, list)
    "loops": "families.loops",  # integer functions with a loop, a condition and an accumulator
}
RESERVED = ("name", "module")  # tasks.yaml family keys that are not the family's settings


def family_class(name: object, module: object = None) -> type[TaskFamily]:
    """The family class registered as `name` (or defined in `module`). ValueError, in words fit for
    a refusal that names tasks.yaml's key, when it is not found or not a family."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"key 'family.name': expected a family name, one of {sorted(FAMILIES)} or a family "
                         f"with its module, got {name!r}")
    if module is not None and (not isinstance(module, str) or module.count(":") > 1
                               or not all(p.isidentifier() for p in module.replace(":", ".").split("."))):
        raise ValueError(f"key 'family.module': expected a dotted module path (optionally :<attribute>), got {module!r}")
    if module is not None and name in FAMILIES and module != FAMILIES[name]:
        raise ValueError(f"key 'family.module': '{name}' is a registered family ({FAMILIES[name]}); a module "
                         f"registers only a family of another name, got {module!r}")
    spec = module or FAMILIES.get(name)
    if spec is None:
        raise ValueError(f"key 'family.name': expected one of {sorted(FAMILIES)}, or a family's own name with "
                         f"`module: <dotted path>`, got {name!r}")
    path, _, attr = spec.partition(":")
    try:
        mod = importlib.import_module(path)
    except ImportError as e:
        raise ValueError(f"key 'family': module {path!r} of family '{name}' does not import ({e})") from None
    cls = getattr(mod, attr or "FAMILY", None)
    if not (inspect.isclass(cls) and issubclass(cls, TaskFamily)) or inspect.isabstract(cls):
        raise ValueError(f"key 'family': module {path!r} exposes no {attr or 'FAMILY'} (a concrete "
                         f"harness.tasks.contract.TaskFamily subclass)")
    if cls.name != name:
        raise ValueError(f"key 'family.name': module {path!r} defines the family '{cls.name}', not '{name}'")
    return cls


def source_files(cls: type[TaskFamily]) -> list[Path]:
    """The source of the family's module (a package: every .py under its folder), sorted: what the
    lock hashes for it."""
    path = Path(inspect.getfile(inspect.getmodule(cls)))
    return sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
