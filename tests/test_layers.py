"""The package graph: layers by concern, imports pointing down, no cycle, and the library never
importing the arms it runs. Every import is read with `ast`, those inside functions included
(`if TYPE_CHECKING:` blocks excluded: they never run)."""
import ast
from pathlib import Path

import pytest

from harness import PROJECT_ROOT

# lowest first; a module may import from its own layer or lower ones (the package root, harness/__init__.py,
# is the bottom: PROJECT_ROOT)
LAYERS = [
    ["harness"],
    ["harness.stats"],
    ["harness.core"],
    ["harness.tasks"],
    ["harness.sandbox", "harness.learning"],
    ["harness.spec"],
    ["harness.running", "harness.readout"],
    ["harness.freeze"],
    ["harness.cli", "harness.__main__"],   # the commands, and `python -m harness` that runs them
]
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
SCANNED = ("harness", "arms", "tools", "benchmarks")
MAX_MODULES_PER_FOLDER = 12


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Project modules that `path` imports, anywhere in the file except `if TYPE_CHECKING:` blocks.
    `from pkg import name` counts as importing pkg.name when that is a module, else pkg."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()

    def visit(node):
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(tree)
    return {m for m in found if m in modules and m != me}


def graph() -> dict[str, set[str]]:
    files = [p for d in SCANNED for p in (PROJECT_ROOT / d).rglob("*.py")]
    modules = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, modules) for p in files}


def layer_of(module: str) -> int | None:
    """The layer of a library module: its package's (harness.<pkg>...), or the root's."""
    parts = module.split(".")
    if parts[0] != "harness":
        return None
    return LEVEL.get(".".join(parts[:2]), LEVEL["harness"]) if len(parts) > 1 else LEVEL["harness"]


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), as sorted lists."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles (modules that import each other, directly or around a loop): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_library_imports_point_down_the_layers():
    bad = []
    for mod, deps in sorted(graph().items()):
        mine = layer_of(mod)
        if mine is None:
            continue
        for dep in sorted(deps):
            theirs = layer_of(dep)
            if theirs is None:
                bad.append(f"{mod} imports {dep} (the library never imports arms/, tools/ or benchmarks/)")
            elif theirs > mine:
                bad.append(f"{mod} (layer {mine}) imports {dep} (layer {theirs}, higher)")
    assert not bad, "\n".join(bad)


def test_no_library_folder_holds_more_than_twelve_modules():
    crowded = {str(d.relative_to(PROJECT_ROOT)): n for d in [PROJECT_ROOT / "harness", *(PROJECT_ROOT / "harness").iterdir()]
               if d.is_dir() and (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES_PER_FOLDER}
    assert not crowded, f"folders over {MAX_MODULES_PER_FOLDER} modules: {crowded}"


def test_every_library_package_has_a_layer():
    packages = {module_name(p.parent) for p in (PROJECT_ROOT / "harness").glob("*/__init__.py")}
    assert packages == set(LEVEL) - {"harness", "harness.__main__"}


def test_the_checker_sees_function_level_imports_and_skips_type_checking(tmp_path):
    """The scanner itself: an import inside a function counts, one under TYPE_CHECKING does not,
    and relative imports resolve; a planted cycle and an upward import are named."""
    mods = {"harness.core.a", "harness.core.b", "harness.cli.c"}
    src = tmp_path / "harness" / "core"
    src.mkdir(parents=True)
    (src / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.cli import c\n"
                              "def f():\n    from . import b\n")
    import tests.test_layers as me
    old = me.PROJECT_ROOT
    me.PROJECT_ROOT = tmp_path
    try:
        assert imports_of(src / "a.py", mods) == {"harness.core.b"}
    finally:
        me.PROJECT_ROOT = old
    assert cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z"]]
    assert layer_of("harness.cli.c") > layer_of("harness.core.a") > layer_of("harness")
    assert layer_of("arms.a_sft") is None


@pytest.mark.parametrize("pkg", [p for layer in LAYERS[1:] for p in layer if not p.endswith("__main__")])
def test_each_package_says_what_it_holds(pkg):
    init = PROJECT_ROOT / Path(*pkg.split(".")) / "__init__.py"
    assert ast.get_docstring(ast.parse(init.read_text())), f"{init}: a one-line docstring says what the folder holds"
