import pytest
import torch

torch.set_num_threads(1)  # same as the harness default: fast and stable on a shared 2-core machine


@pytest.fixture(autouse=True, scope="session")
def _one_pilot_per_input():
    """A pilot is a deterministic function of its inputs (protocol files, sets, base bytes, source:
    `harness.freeze.pilot.inputs`), just as freeze keeps a pilot.json of the same inputs: the suite measures
    each distinct protocol once and every later freeze of the same protocol gets the same numbers,
    instead of spending most of its time re-measuring them."""
    import copy
    import json

    from harness.core import records
    from harness.freeze import pilot
    measured: dict[str, dict] = {}
    real = pilot.measure

    def measure(protocol, splits, base_bytes, model, device, out=print, jobs=1, base_first=False):
        key = json.dumps([protocol.name, pilot.inputs(protocol, splits, records.sha256_bytes(base_bytes))], sort_keys=True)
        if key not in measured:  # a base off its range raises here, before the arms' rounds, as freeze's does
            measured[key] = real(protocol, splits, base_bytes, model, device, out, jobs, base_first)
        elif base_first:
            pilot.check_base(protocol, measured[key]["base"]["pass_rate"])
        return copy.deepcopy(measured[key])
    pilot.measure = measure
    yield
    pilot.measure = real
