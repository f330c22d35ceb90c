"""A protocol's task splits from its family (harness.tasks.contract.TaskFamily), whatever the family.

Splits (`build_splits`): the held-out splits (probe, confirm, calibration) are drawn first, as one
pool from the probe distribution, program-disjoint: no program (a task's `program_hash`, whatever its
phrasing) is in two held-out tasks, within a split or across splits. The pool is then dealt at random
to the splits, stratified by (program class, stratum), so that the splits are exchangeable: drawn one
after another, the split drawn first took more than twice as many of the few high-mass constant-free
programs of the code family as the one drawn last. The leak guard then holds out every held-out
*program* from the training splits (seed set, warm-up), and with `guard="ops"` also every held-out
op structure (no training on the same steps with other constants). The training splits are
stratified to the probe set's mix, so they look like the probes.

Capacity (`split_capacity`): per capacity cell of the family (strata sharing one key space), the
guard's key space, what the registered fraction of it may hold out, and what the held-out splits need
there in expectation; `build_splits` refuses before drawing when a need exceeds its capacity, and
after drawing when the draw took more. The same fraction caps each (cell, program class) as the pool
is drawn (`class_capacity`): a class too small for its share of the draws (the code family's
constant-free programs) is held out up to the cap, never whole.

Every draw is seeded (`random.Random` from a string of the seed), so the same family, settings and
seed give the same bytes (`tasks_jsonl`).
"""
from __future__ import annotations

import json
import random
from collections import Counter

from harness.core.seeds import derive_seed
from harness.tasks.contract import GUARDS, Cell, Stratum, Task, TaskFamily

HELD_OUT_SPLITS = ("probe", "confirm", "calibration")  # never trained on, drawn first, as one pool
TRAINING_SPLITS = ("seed_set", "warmup")               # stratified to the probe mix, guarded
SPLIT_ORDER = HELD_OUT_SPLITS + TRAINING_SPLITS


def check_guard(guard: str) -> None:
    if guard not in GUARDS:
        raise ValueError(f"leak guard {guard!r}: expected one of {list(GUARDS)}")


def guard_key(task: Task, guard: str) -> str:
    """The key the leak guard compares: the program, or its op structure under guard "ops"."""
    return task.ops_hash if guard == "ops" else task.program_hash


def blocked(task: Task, exclude: set[str] | frozenset) -> bool:
    """Whether any of the task's identities (canonical, shape, program, ops) is in `exclude`."""
    return bool({task.canonical_hash, task.shape_hash, task.program_hash, task.ops_hash} & exclude)


def held_out_keys(tasks: list[Task], guard: str = "program") -> set[str]:
    """What the leak guard keeps out of training for these held-out tasks: their canonical and
    program hashes, and with guard "ops" their op structures too (no same steps, other constants)."""
    check_guard(guard)
    keys = {h for t in tasks for h in (t.canonical_hash, t.program_hash)}
    return keys | ({t.ops_hash for t in tasks} if guard == "ops" else set())


# ---- mixes ------------------------------------------------------------------------------------

def mix(tasks: list[Task]) -> Counter:
    """stratum -> number of tasks in it."""
    return Counter(t.stratum for t in tasks)


def class_mix(family: TaskFamily, tasks: list[Task]) -> Counter:
    """program class -> number of tasks in it."""
    return Counter(family.program_class(t) for t in tasks)


def allocate(n: int, weights: Counter) -> dict[Stratum, int]:
    """`n` split over the strata of `weights` in proportion to their counts (largest remainder,
    ties broken by stratum order): every stratum with weight gets its share, rounded."""
    total = sum(weights.values())
    if n < 0 or total <= 0:
        raise ValueError(f"allocate: need n >= 0 and a non-empty mix, got n={n}, mix of {total}")
    keys = sorted(k for k, w in weights.items() if w > 0)
    exact = {k: n * weights[k] / total for k in keys}
    out = {k: int(exact[k]) for k in keys}
    for k in sorted(keys, key=lambda k: (-(exact[k] - out[k]), k))[: n - sum(out.values())]:
        out[k] += 1
    return out


# ---- capacity ---------------------------------------------------------------------------------

def _row(family: TaskFamily, cell: Cell, **values) -> dict:
    """A capacity row: the cell, its named parts, then `values`."""
    return {"cell": cell, **dict(zip(family.cell_fields, cell)), **values}


def class_capacity(family: TaskFamily, held_out: list[Task], guard: str = "program",
                   max_held_out_fraction: float = 1.0) -> list[dict]:
    """Per (cell, program class) of the distribution: the guard's keys there (`space`), the most the
    held-out splits may take (`capacity`: floor(fraction x space)) and how many they took
    (`held_out`). Sorted by cell and class."""
    taken: dict[tuple, set[str]] = {}
    for t in held_out:
        taken.setdefault((family.cell_of(t.stratum), family.program_class(t)), set()).add(guard_key(t, guard))
    rows = []
    for cell in family.cells():
        for cls in family.classes:
            space = family.class_space(cell, cls, guard)
            rows.append(_row(family, cell, **{"class": cls, "space": space, "capacity": int(max_held_out_fraction * space),
                                              "held_out": len(taken.get((cell, cls), ()))}))
    return rows


def guard_capacity(family: TaskFamily, held_out: list[Task], guard: str = "program") -> list[dict]:
    """Per cell of the distribution: the guard's key space, how many keys the held-out tasks take,
    and the fraction held out of training. Sorted by fraction, largest first."""
    taken: dict[Cell, set[str]] = {}
    for t in held_out:
        taken.setdefault(family.cell_of(t.stratum), set()).add(guard_key(t, guard))
    rows = []
    for cell in family.cells():
        space, keys = family.space(cell, guard), len(taken.get(cell, ()))
        rows.append(_row(family, cell, space=space, held_out=keys, fraction=keys / max(space, 1)))
    return sorted(rows, key=lambda r: (-r["fraction"], r["cell"]))


def split_capacity(family: TaskFamily, sizes: dict[str, int], guard: str = "program",
                   max_held_out_fraction: float = 1.0) -> list[dict]:
    """Per cell of the distribution: `space` (the guard's keys: programs, or op structures),
    `capacity` (the most keys the held-out splits may take: floor(fraction x space)) and `need` (the
    keys the held-out splits of `sizes` take there in expectation: every held-out task is its own
    program, `family.expected_draws` places them; under the "ops" guard, the expected number of
    distinct op structures among them). Sorted by need / capacity, largest first."""
    held = sum(sizes.get(name, 0) for name in HELD_OUT_SPLITS)
    draws = family.expected_draws(held)
    rows = []
    for cell in family.cells():
        space, tasks = family.space(cell, guard), draws.get(cell, 0.0)
        need = tasks if guard == "program" else space * (1 - (1 - 1 / space) ** tasks) if space else 0.0
        rows.append(_row(family, cell, space=space, capacity=int(max_held_out_fraction * space), need=need))
    return sorted(rows, key=lambda r: (-r["need"] / max(r["capacity"], 1e-9), r["cell"]))


def capacity_refusal(family: TaskFamily, row: dict, sizes: dict[str, int], guard: str, frac: float) -> str:
    """Why a cell's expected need exceeds its capacity, naming the sizes that make the need."""
    unit = "op structures" if guard == "ops" else "programs"
    return (f"task space: {family.describe_cell(row['cell'])}: {row['space']} {unit}; the registered "
            f"max_held_out_fraction {frac:.0%} lets the held-out splits take {row['capacity']}, but probe.size "
            f"{sizes.get('probe', 0)} + calibration.size {sizes.get('calibration', 0)} + the confirm stream "
            f"{sizes.get('confirm', 0)} (2 x confirm.per_round x budget rounds) need about {row['need']:.0f} there; "
            f"widen the probe distribution (the family's settings) or shrink the held-out splits")


def check_capacity(family: TaskFamily, sizes: dict[str, int], guard: str = "program",
                   max_held_out_fraction: float = 1.0) -> list[dict]:
    """`split_capacity`'s rows, or ValueError naming the first cell whose expected need exceeds its
    capacity and the sizes that make the need."""
    rows = split_capacity(family, sizes, guard, max_held_out_fraction)
    if rows and rows[0]["need"] > rows[0]["capacity"]:
        raise ValueError(capacity_refusal(family, rows[0], sizes, guard, max_held_out_fraction))
    return rows


def capacity_lines(family: TaskFamily, rows: list[dict]) -> list[str]:
    """`split_capacity`'s rows as printable lines, one per cell."""
    head = " ".join(f"{f:>9}" for f in family.cell_fields)
    out = [f"{head} {'space':>12} {'capacity':>12} {'need':>8} {'used':>6}"]
    for r in sorted(rows, key=lambda r: r["cell"]):
        cell = " ".join(f"{v!s:>9}" for v in r["cell"])
        out.append(f"{cell} {r['space']:>12} {r['capacity']:>12} {r['need']:>8.0f} {r['need'] / max(r['capacity'], 1):>5.0%}")
    return out


# ---- drawing ----------------------------------------------------------------------------------

def draw_held_out(family: TaskFamily, seed: int, n: int, guard: str = "program",
                  max_held_out_fraction: float = 1.0) -> list[Task]:
    """The held-out pool: `n` tasks from the probe distribution (`family.sample`), one per program,
    taking at most floor(max_held_out_fraction x its keys) of any (cell, program class)'s guard keys
    (`class_capacity`). A draw into a full class is drawn again: the distribution's mass on a class
    too small for its share is capped there, so the training splits always hold some of its
    programs. Expected outputs included. Deterministic in `seed`."""
    rng = random.Random(f"held-out/{seed}")
    out: list[Task] = []
    programs: set[str] = set()
    keys: dict[tuple, set[str]] = {}  # (cell, class) -> the guard's keys taken there
    caps: dict[tuple, int] = {}
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 200 * n + 1000:
            raise ValueError(f"held-out pool (seed {seed}): found {len(out)} of {n} tasks with distinct programs within "
                             f"each class's {max_held_out_fraction:.0%} of {family!r}; widen the task space or shrink "
                             f"the held-out splits")
        task = family.sample(rng, len(out))
        if task.program_hash in programs:
            continue
        cell = (family.cell_of(task.stratum), family.program_class(task))
        key = guard_key(task, guard)
        taken = keys.setdefault(cell, set())
        if cell not in caps:
            caps[cell] = int(max_held_out_fraction * family.class_space(cell[0], cell[1], guard))
        if key not in taken and len(taken) >= caps[cell]:
            continue
        taken.add(key)
        programs.add(task.program_hash)
        out.append(task)
    return [family.with_expected(t) for t in out]


def deal(family: TaskFamily, tasks: list[Task], sizes: dict, seed: int) -> dict:
    """`tasks` dealt at random to splits of `sizes` (split -> count, adding up to len(tasks)), alike in
    their mix of program class and stratum. Cell by cell ((class, stratum), sorted), in shuffled order
    within the cell, each task goes to the split with room left that is furthest below its share of the
    tasks dealt so far, summed over the task's cell, class, stratum and all tasks; ties go in a random
    order. Every split so gets its share of each class, stratum and cell to within a task or two, and
    which task goes where is random. Each split's order is shuffled. Deterministic in `seed`."""
    n = len(tasks)
    if sum(sizes.values()) != n or min(sizes.values(), default=0) < 0:
        raise ValueError(f"deal: split sizes {sizes} must be non-negative and add up to the {n} tasks dealt")
    rng = random.Random(f"deal/{seed}")
    names = list(sizes)
    cells: dict[tuple, list[Task]] = {}
    for t in tasks:
        cells.setdefault((family.program_class(t), t.stratum), []).append(t)
    seen: Counter = Counter()        # level -> tasks dealt there so far
    got: dict = {}                   # level -> split -> tasks dealt to it there
    out: dict = {name: [] for name in names}
    for (cls, stratum), members in sorted(cells.items(), key=lambda kv: (family.classes.index(kv[0][0]), kv[0][1])):
        levels = (("cell", cls, stratum), ("class", cls), ("stratum", stratum), ("all",))
        members = sorted(members, key=lambda t: t.canonical_hash)  # the pool's draw order plays no part
        rng.shuffle(members)
        for t in members:
            # n x (share of the dealt tasks - tasks got), summed over the levels: integers, so no rounding decides
            def lag(name):
                return sum((seen[lv] + 1) * sizes[name] - n * got.get(lv, {}).get(name, 0) for lv in levels)
            name = max((x for x in rng.sample(names, len(names)) if len(out[x]) < sizes[x]), key=lag)
            out[name].append(t)
            for lv in levels:
                seen[lv] += 1
                got.setdefault(lv, Counter())[name] += 1
    for name in names:
        rng.shuffle(out[name])
    return out


def build_stratified(family: TaskFamily, seed: int, n: int, like: Counter, exclude: set[str] | frozenset = frozenset(),
                     distinct: bool = True, what: str = "split", distinct_programs: bool = False) -> list[Task]:
    """`n` tasks whose stratum counts are `allocate(n, like)`, each drawn from the family's
    distribution conditioned on its stratum (`family.draw`), none blocked by `exclude` (canonical,
    shape, program or ops hashes). `distinct=False` allows repeats of a task (i.i.d. draws, as a large
    training set from a small stratum has); `distinct_programs` forbids two tasks with one program (a
    held-out split's). Order is shuffled, deterministic in `seed`; expected outputs included."""
    rng = random.Random(f"stratified/{seed}")
    out: list[Task] = []
    programs: set[str] = set()  # across strata: one program may be phrased plainly in one and not in another
    for stratum, quota in sorted(allocate(n, like).items()):
        seen: set[str] = set()
        got, attempts = 0, 0
        while got < quota:
            attempts += 1
            if attempts > 200 * quota + 2000:
                raise ValueError(f"{what}: stratum ({', '.join(family.stratum_fields)}) = {stratum}: found {got} of "
                                 f"{quota} {'distinct ' if distinct else ''}tasks outside the {len(exclude)} excluded "
                                 f"hashes; the task space of {family!r} is too small for this split")
            task = family.draw(rng, stratum)
            if blocked(task, exclude) or (distinct and task.canonical_hash in seen) \
                    or (distinct_programs and task.program_hash in programs):
                continue
            seen.add(task.canonical_hash)
            if distinct_programs:
                programs.add(task.program_hash)
            out.append(task)
            got += 1
    rng.shuffle(out)
    return [family.with_expected(t) for t in out]


def build_splits(family: TaskFamily, seed: int, sizes: dict[str, int], guard: str = "program",
                 max_held_out_fraction: float = 1.0, confirm_batch: int = 0) -> dict[str, list[Task]]:
    """Named splits from disjoint seeds, all from the family's (probe) distribution:

        probe, confirm, calibration   one held-out pool (`draw_held_out`: one task per program, each
                     (cell, program class) capped at `max_held_out_fraction`) dealt at random (`deal`),
                     stratified by program class and stratum, so the three are exchangeable. With
                     `confirm_batch`, the confirm stream is dealt as consecutive batches of that size
                     (C's per-round screen and confirm batches), each alike too.
        seed_set     stratified to the probe set's mix, distinct, no held-out key (`held_out_keys`)
        warmup       stratified to the probe set's mix, repeats allowed, no held-out key, no seed task

    Refuses (ValueError naming the cell) before drawing when the held-out splits would need more
    than `max_held_out_fraction` of some cell's key space (`check_capacity`), and after drawing when
    they took more: training there would see a distorted remainder, or nothing."""
    unknown = set(sizes) - set(SPLIT_ORDER)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; expected a subset of {list(SPLIT_ORDER)}")
    if "probe" not in sizes:
        raise ValueError("build_splits: the probe split is required (every other split follows its mix)")
    check_guard(guard)
    check_capacity(family, sizes, guard, max_held_out_fraction)
    held_sizes = {name: sizes[name] for name in HELD_OUT_SPLITS if name in sizes}
    pool = draw_held_out(family, split_seed(seed, "held_out"), sum(held_sizes.values()), guard, max_held_out_fraction)
    hands = dict(held_sizes)
    n_confirm = hands.pop("confirm", 0)
    if confirm_batch and n_confirm:
        if confirm_batch < 0 or n_confirm % confirm_batch:
            raise ValueError(f"build_splits: the confirm stream of {n_confirm} tasks is not a whole number of "
                             f"batches of confirm_batch {confirm_batch}")
        hands.update({("confirm", i): confirm_batch for i in range(n_confirm // confirm_batch)})
    elif "confirm" in held_sizes:
        hands[("confirm", 0)] = n_confirm
    dealt = deal(family, pool, hands, split_seed(seed, "deal"))
    s = {name: dealt[name] for name in held_sizes if name != "confirm"}
    if "confirm" in held_sizes:
        s["confirm"] = [t for hand in sorted(h for h in dealt if isinstance(h, tuple)) for t in dealt[hand]]
    held_out = [t for name in HELD_OUT_SPLITS for t in s.get(name, [])]
    worst = guard_capacity(family, held_out, guard)[0]
    if worst["fraction"] > max_held_out_fraction:
        raise ValueError(f"leak guard ({guard}): the held-out splits take {worst['held_out']} of the {worst['space']} "
                         f"{'op structures' if guard == 'ops' else 'programs'} of {family.describe_cell(worst['cell'])} "
                         f"({worst['fraction']:.0%} > the registered {max_held_out_fraction:.0%}); "
                         f"widen the task space or shrink the held-out splits")
    like = mix(s["probe"])
    forbid = held_out_keys(held_out, guard)
    if "seed_set" in sizes:
        s["seed_set"] = build_stratified(family, split_seed(seed, "seed"), sizes["seed_set"], like,
                                         exclude=frozenset(forbid), what="seed_set")
        forbid |= {t.canonical_hash for t in s["seed_set"]}
    if "warmup" in sizes:
        s["warmup"] = build_stratified(family, split_seed(seed, "warmup"), sizes["warmup"], like,
                                       exclude=frozenset(forbid), distinct=False, what="warmup")
    return {name: s[name] for name in SPLIT_ORDER if name in s}


# ---- tables -----------------------------------------------------------------------------------

def mix_table(family: TaskFamily, splits: dict[str, list[Task]]) -> list[str]:
    """The split-mix table: one row per stratum present in any split, one column per split with its
    count and share, then the totals and each split's coverage of the probe strata. Returns printable
    lines."""
    names = list(splits)
    counts = {n: mix(ts) for n, ts in splits.items()}
    rows = sorted(set().union(*counts.values()))
    fields = family.stratum_fields
    width = max(9 * len(fields) - 1, 5)
    head = " ".join(f"{f:<8}" for f in fields) + " |" + "".join(f" {n:>17}" for n in names)
    named = ", ".join(fields[:-1]) + " and " + fields[-1] if len(fields) > 1 else fields[0]
    lines = [f"split mix by {named} (count, share of the split):", head, "-" * len(head)]
    for st in rows:
        cells = "".join(f" {counts[n][st]:>9} {100 * counts[n][st] / max(len(splits[n]), 1):5.1f}% " for n in names)
        lines.append(" ".join(f"{v!s:<8}" for v in st) + " |" + cells)
    lines.append(f"{'total':<{width}} |" + "".join(f" {len(splits[n]):>9}        " for n in names))
    if "probe" in counts:
        for n in names:
            missing = sorted(set(counts["probe"]) - set(counts[n]))
            if n != "probe":
                lines.append(f"{n}: covers {len(counts['probe']) - len(missing)} of {len(counts['probe'])} probe strata"
                             + (f"; missing {missing}" if missing else ""))
    return lines


def class_table(family: TaskFamily, splits: dict[str, list[Task]]) -> list[str]:
    """The split-mix table by program class: one row per class, one column per split with its count
    and share of the split. Returns printable lines."""
    names = list(splits)
    counts = {n: class_mix(family, ts) for n, ts in splits.items()}
    head = f"{'program class':<23} |" + "".join(f" {n:>17}" for n in names)
    lines = ["split mix by program class (count, share of the split):", head, "-" * len(head)]
    for cls in family.classes:
        cells = "".join(f" {counts[n][cls]:>9} {100 * counts[n][cls] / max(len(splits[n]), 1):5.1f}% " for n in names)
        lines.append(f"{cls:<23} |{cells}")
    return lines


# ---- seeds and files --------------------------------------------------------------------------

def split_seed(seed: int, name: str) -> int:
    return derive_seed(seed, name, bits=48)


def tasks_jsonl(tasks: list[Task]) -> str:
    """One task per line, keys sorted: the bytes of a materialised set."""
    return "".join(json.dumps(t.to_dict(), sort_keys=True) + "\n" for t in tasks)


def save_tasks(path, tasks: list[Task]) -> None:
    with open(path, "w") as f:
        f.write(tasks_jsonl(tasks))


def load_tasks(path, family: TaskFamily) -> list[Task]:
    """The tasks of a JSONL file written by `save_tasks`, read by their family; ValueError naming
    path:line for a line that is not one of its tasks."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(family.task_from_dict(json.loads(line)))
            except (json.JSONDecodeError, ValueError) as e:
                raise ValueError(f"{path}:{i}: {e}") from None
    return out
