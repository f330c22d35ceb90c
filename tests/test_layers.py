"""The package graph: layers by concern, imports pointing down, sibling imports only where listed,
no cycle, and the library never importing the arms it runs or the task families it draws from (both
are found by name at run time). Every import is read with `ast`: those
inside functions and those under `if TYPE_CHECKING:` count too (a type named across layers is a
dependency all the same, and a circle through one is still a circle).

The checker (`graph`, `cycles`, `violations`) takes the tree's root, so the tests below run it on
copies of the real tree with one import planted, as well as on the real one."""
import ast
import functools
import shutil
from pathlib import Path

import pytest

from harness import PROJECT_ROOT

# lowest first; a module may import its own package and the packages of lower layers (the package root,
# harness/__init__.py, is the bottom: PROJECT_ROOT). arms/ sits above the runner whose contract it fills
# and below freeze and the commands; it is placed for its own imports only: the library never imports
# it (the registry names each kind's module and the runner loads it by that name). families/ is placed
# beside the sandbox and the learning code, above the task contract it implements, alike for its own
# imports only: neither the library nor the arms import a family (harness.tasks.registry finds it by name).
LAYERS = [
    ["harness"],
    ["harness.stats"],
    ["harness.core"],
    ["harness.tasks"],
    ["harness.sandbox", "harness.learning", "families"],
    ["harness.spec"],
    ["harness.running", "harness.readout"],
    ["arms"],
    ["harness.freeze"],
    ["harness.cli", "harness.__main__"],   # the commands, and `python -m harness` that runs them
]
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
# the only imports allowed between two packages of one layer: (importer, imported) -> why
SIBLING_IMPORTS = {
    ("harness.__main__", "harness.cli"): "`python -m harness` runs the commands",
}
SCANNED = ("harness", "arms", "families", "tools", "benchmarks")
MAX_MODULES_PER_FOLDER = 12


def module_name(path: Path, root: Path = PROJECT_ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str], root: Path = PROJECT_ROOT) -> set[str]:
    """Project modules that `path` imports, anywhere in the file (functions and TYPE_CHECKING blocks
    included). `from pkg import name` counts as importing pkg.name when that is a module, else pkg."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    try:
        imported = _imported(path.read_text(), package)
    except SyntaxError as err:
        raise SyntaxError(f"{path}: {err}") from None
    found = set()
    for base, names in imported:
        if not names:  # import x.y
            found.add(base)
        found.update(f"{base}.{n}" if f"{base}.{n}" in modules else base for n in names)
    return {m for m in found if m in modules and m != me}


@functools.cache
def _imported(source: str, package: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every import statement of `source` as (absolute module, names from it; () for `import x`),
    relative ones resolved against `package`. Cached on the text: the planted trees reparse only
    the files they change."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, tuple(a.name for a in node.names)))
    return tuple(out)


def graph(root: Path = PROJECT_ROOT) -> dict[str, set[str]]:
    """module -> the project modules it imports, over the scanned folders under `root`."""
    files = [p for d in SCANNED if (root / d).is_dir() for p in (root / d).rglob("*.py")]
    modules = {module_name(p, root) for p in files}
    return {module_name(p, root): imports_of(p, modules, root) for p in files}


def package_of(module: str) -> str | None:
    """The layered package a module belongs to (harness.<pkg>, the root `harness`, `arms` or
    `families`); None for what is outside the order (tools/, benchmarks/)."""
    parts = module.split(".")
    if parts[0] in ("arms", "families"):
        return parts[0]
    if parts[0] != "harness":
        return None
    return ".".join(parts[:2]) if len(parts) > 1 and ".".join(parts[:2]) in LEVEL else "harness"


def layer_of(module: str) -> int | None:
    pkg = package_of(module)
    return None if pkg is None else LEVEL[pkg]


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


def violations(g: dict[str, set[str]]) -> list[str]:
    """Every import of a layered module (harness/, arms/, families/) that breaks the order, one line each."""
    bad = []
    for mod, deps in sorted(g.items()):
        mine = package_of(mod)
        if mine is None:
            continue
        for dep in sorted(deps):
            theirs = package_of(dep)
            if theirs == mine:
                continue
            if theirs is None:
                bad.append(f"{mod} imports {dep}: nothing layered imports tools/ or benchmarks/")
            elif theirs == "arms":
                bad.append(f"{mod} imports {dep}: the library reaches arms/ only by the name its registry holds")
            elif theirs == "families":
                bad.append(f"{mod} imports {dep}: a task family is reached only by the name its registry holds")
            elif LEVEL[theirs] > LEVEL[mine]:
                bad.append(f"{mod} (layer {LEVEL[mine]}, {mine}) imports {dep} (layer {LEVEL[theirs]}, higher)")
            elif LEVEL[theirs] == LEVEL[mine] and (mine, theirs) not in SIBLING_IMPORTS:
                bad.append(f"{mod} imports {dep}: {mine} and {theirs} share layer {LEVEL[mine]} and this sibling "
                           f"import is not listed in SIBLING_IMPORTS")
    return bad


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles (modules that import each other, directly or around a loop): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_imports_point_down_the_layers():
    bad = violations(graph())
    assert not bad, "\n".join(bad)


def test_every_listed_sibling_import_is_between_siblings_and_still_made():
    """A stale or misplaced entry would quietly allow an import nobody reviewed."""
    made = {(package_of(m), package_of(d)) for m, deps in graph().items() for d in deps}
    for mine, theirs in SIBLING_IMPORTS:
        assert LEVEL[mine] == LEVEL[theirs] and mine != theirs, (mine, theirs)
        assert (mine, theirs) in made, f"SIBLING_IMPORTS lists {mine} -> {theirs}, which no module imports any more"


def test_no_library_folder_holds_more_than_twelve_modules():
    crowded = {str(d.relative_to(PROJECT_ROOT)): n for d in [PROJECT_ROOT / "harness", *(PROJECT_ROOT / "harness").iterdir()]
               if d.is_dir() and (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES_PER_FOLDER}
    assert not crowded, f"folders over {MAX_MODULES_PER_FOLDER} modules: {crowded}"


def test_every_library_package_has_a_layer():
    packages = {module_name(p.parent) for p in (PROJECT_ROOT / "harness").glob("*/__init__.py")}
    assert packages == set(LEVEL) - {"harness", "harness.__main__", "arms", "families"}


@pytest.mark.parametrize("pkg", [p for layer in LAYERS[1:] for p in layer if not p.endswith("__main__")])
def test_each_package_says_what_it_holds(pkg):
    init = PROJECT_ROOT / Path(*pkg.split(".")) / "__init__.py"
    assert ast.get_docstring(ast.parse(init.read_text())), f"{init}: a one-line docstring says what the folder holds"


# ---------------------------------------------------------------- the checker on planted trees

@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of the real tree's scanned folders (sources only), to plant an import in."""
    for d in SCANNED:
        shutil.copytree(PROJECT_ROOT / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return tmp_path


def plant(path: Path, code: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text() if path.exists() else "") + "\n" + code)


def test_the_copied_tree_passes_before_anything_is_planted(tree):
    assert graph(tree) == graph() and not violations(graph(tree)) and not cycles(graph(tree))


def test_a_planted_upward_import_inside_a_function_is_named(tree):
    plant(tree / "harness" / "core" / "seeds.py", "def _late():\n    from ..cli import main\n    return main\n")
    assert violations(graph(tree)) == ["harness.core.seeds (layer 2, harness.core) imports harness.cli.main "
                                       "(layer 9, higher)"]


def test_a_planted_type_checking_cycle_is_named(tree):
    """A circle closed only under TYPE_CHECKING, inside one package (so no layer rule sees it)."""
    plant(tree / "harness" / "core" / "planted_a.py", "from harness.core import planted_b\n")
    plant(tree / "harness" / "core" / "planted_b.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                      "    import harness.core.planted_a\n")
    g = graph(tree)
    assert cycles(g) == [["harness.core.planted_a", "harness.core.planted_b"]] and not violations(g)


def test_the_old_type_checking_circle_through_the_design_analysis_is_named(tree):
    """stats/power.py once named spec/protocol.py's ConfirmRule under TYPE_CHECKING: upward, and a circle."""
    plant(tree / "harness" / "stats" / "power.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                   "    from harness.spec.protocol import ConfirmRule\n")
    g = graph(tree)
    assert ["harness.spec.protocol", "harness.stats.power"] in cycles(g)
    assert violations(g) == ["harness.stats.power (layer 1, harness.stats) imports harness.spec.protocol "
                             "(layer 5, higher)"]


def test_a_planted_arms_to_cli_import_is_named(tree):
    plant(tree / "arms" / "a_sft.py", "from harness.cli.main import main  # noqa\n")
    assert violations(graph(tree)) == ["arms.a_sft (layer 7, arms) imports harness.cli.main (layer 9, higher)"]


def test_the_library_importing_an_arm_is_named_even_from_above(tree):
    """freeze/ sits above arms/ in the order, yet may not import it: arms are reached by name only."""
    plant(tree / "harness" / "freeze" / "pilot.py", "import arms.b_selfplay\n")
    assert violations(graph(tree)) == ["harness.freeze.pilot imports arms.b_selfplay: the library reaches arms/ only "
                                       "by the name its registry holds"]


def test_the_library_or_an_arm_importing_a_task_family_is_named(tree):
    """The protocol names the family; the library and the arms find it through harness.tasks.registry."""
    plant(tree / "harness" / "freeze" / "sets.py", "from families.code import CodeFamily  # noqa\n")
    plant(tree / "arms" / "a_sft.py", "import families.loops  # noqa\n")
    assert violations(graph(tree)) == [
        "arms.a_sft imports families.loops: a task family is reached only by the name its registry holds",
        "harness.freeze.sets imports families.code: a task family is reached only by the name its registry holds"]


def test_a_task_family_importing_the_library_above_its_contract_is_named(tree):
    plant(tree / "families" / "code.py", "from harness.spec.protocol import load_protocol  # noqa\n")
    assert violations(graph(tree)) == ["families.code (layer 4, families) imports harness.spec.protocol (layer 5, "
                                       "higher)"]


def test_an_unlisted_sibling_import_is_named(tree):
    plant(tree / "harness" / "readout" / "audit.py", "from harness.running import runner\n")
    assert violations(graph(tree)) == ["harness.readout.audit imports harness.running.runner: harness.readout and "
                                       "harness.running share layer 6 and this sibling import is not listed in "
                                       "SIBLING_IMPORTS"]


def test_the_library_importing_tools_is_named(tree):
    plant(tree / "harness" / "cli" / "main.py", "from tools import profile  # noqa\n")
    assert violations(graph(tree)) == ["harness.cli.main imports tools.profile: nothing layered imports tools/ or "
                                       "benchmarks/"]
