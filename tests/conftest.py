import os

# The shipped protocols' kernel path (model.yaml cpu_capability: avx2), set before torch computes
# anything: the suite's own tensors and the harness's runs share this process, and torch fixes its
# path at the first kernel (harness.core.kernels.pin refuses a process on another path).
from harness.core.kernels import KernelRecipe

os.environ.update(KernelRecipe("avx2", 1).env())

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)  # same as the harness default: fast and stable on a shared 2-core machine


@pytest.fixture(autouse=True, scope="session")
def _one_pilot_per_input(tmp_path_factory):
    """A pilot is a deterministic function of its inputs (protocol files, sets, base bytes, source:
    `harness.freeze.pilot.inputs`), just as freeze keeps a pilot.json of the same inputs: the suite
    measures each distinct protocol once, in whichever xdist worker needs it first (a file per input
    in the session's shared temporary folder, under a file lock), and every later freeze of the same
    protocol gets the same numbers, instead of spending most of its time re-measuring them."""
    import hashlib
    import json
    import os

    from filelock import FileLock

    from harness.core import records
    from harness.freeze import pilot
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "pilots"  # this session's only
    shared.mkdir(exist_ok=True)
    real = pilot.measure

    def measure(protocol, splits, base_bytes, model, device, out=print, jobs=1, base_first=False):
        key = json.dumps([protocol.name, pilot.inputs(protocol, splits, records.sha256_bytes(base_bytes))], sort_keys=True)
        path = shared / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
        with FileLock(f"{path}.lock"):
            if not path.exists():  # a base off its range raises here, before the arms' rounds, as freeze's does
                records.atomic_write_text(path, json.dumps(real(protocol, splits, base_bytes, model, device, out, jobs,
                                                                base_first)))
            elif base_first:
                pilot.check_base(protocol, json.loads(path.read_text())["base"]["pass_rate"])
        return json.loads(path.read_text())
    pilot.measure = measure
    yield
    pilot.measure = real


@pytest.fixture(autouse=True, scope="session")
def _one_freeze_per_tiny_protocol(tmp_path_factory):
    """Freeze is a function of the protocol's files and the code: `tests.tiny_protocol.freeze_tiny`
    freezes each distinct tiny protocol once for the whole session (in whichever xdist worker needs
    it first, under a file lock, in the session's shared temporary folder) and hands every caller its
    own copy of the frozen tree. Tests of freeze itself call `freeze` directly. Likewise
    `tests.fixtures_runs.build_tree` writes each distinct protocol's frozen folder once per process."""
    import os

    from tests import fixtures_runs, tiny_protocol
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "frozen_tiny"  # this session's only
    shared.mkdir(exist_ok=True)
    tiny_protocol.FROZEN_CACHE = shared
    fixtures_runs.FROZEN_CACHE = tmp_path_factory.mktemp("frozen_fixture_trees")  # this process's (no lock needed)
    yield
    tiny_protocol.FROZEN_CACHE = fixtures_runs.FROZEN_CACHE = None


@pytest.fixture(autouse=True, scope="session")
def _one_conformance_suite_per_registration():
    """The family conformance suite (freeze's gate, run by every freeze and pilot) is a deterministic
    function of the family's code and its registration (harness.freeze.conformance.Registration): each
    test process runs it once per distinct registration, the family's class and source file included,
    and hands later freezes the same report (still printed, still refused when it fails)."""
    import hashlib
    import inspect
    import json

    from harness.freeze import conformance
    real, reports = conformance.run_suite, {}

    def run_suite(reg):
        cls = type(reg.family)
        source = hashlib.sha256(open(inspect.getsourcefile(cls), "rb").read()).hexdigest()
        key = json.dumps([cls.__module__, cls.__qualname__, source, reg.family.identity(), reg.sizes, reg.guard,
                          reg.max_held_out_fraction, reg.task_seed, reg.operators, reg.module], sort_keys=True,
                         default=repr)
        if key not in reports:
            reports[key] = real(reg)
        return reports[key]
    conformance.run_suite = run_suite
    yield
    conformance.run_suite = real


@pytest.fixture(autouse=True, scope="session")
def _one_base_build_per_recipe():
    """A base is a deterministic function of its recipe (the model block as loaded, the warm-up set, the
    device): freeze's and the pilot's builds (those that report to `out`) are made once per test process
    and recipe, and their bytes handed to every later freeze of the same recipe, with the build's effect
    on the caller's threads kept. Direct calls (no `out`, as tests of the build itself make) always build."""
    import hashlib

    import torch

    from harness.core import kernels
    from harness.freeze import base as freeze_base
    from harness.tasks.splits import tasks_jsonl
    real, built = freeze_base.build_base, {}

    def build_base(protocol, warmup, device="cpu", progress=True, out=None):
        if out is None:
            return real(protocol, warmup, device, progress, out)
        key = hashlib.sha256(repr((protocol.model, protocol.base_draw, device, tasks_jsonl(warmup))).encode()).hexdigest()
        if key not in built:
            built[key] = real(protocol, warmup, device, progress, out)
        else:  # what the build leaves behind: the kernel path checked, the run's thread count
            kernels.pin(protocol.model.kernels(protocol.model.base.torch_threads), f"the base of {protocol.name}")
            torch.set_num_threads(protocol.model.run_threads)
        return built[key]
    freeze_base.build_base = build_base
    yield
    freeze_base.build_base = real
