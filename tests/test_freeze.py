"""`make freeze`: materialised sets, a deterministic base, loud warnings, and no re-freeze of
changed content."""
import shutil

import pytest

from harness.freeze import freeze, load_sets, set_paths
from harness.lock import LockError
from harness.protocol import load_protocol
from harness.tasks import build_splits
from tests.tiny_protocol import make_tiny_protocol


def run_freeze(proto, results):
    lines = []
    out = freeze(str(proto), results, out=lines.append)
    return out, "\n".join(lines)


def test_freeze_materialises_the_registered_splits_and_is_idempotent(tmp_path):
    proto = make_tiny_protocol(tmp_path)
    results = tmp_path / "results"
    first, text = run_freeze(proto, results)
    p = load_protocol(proto)
    sets = load_sets(results, p.name)
    t = p.tasks
    want = build_splits(p.seeds["task_seed"], {"warmup": t["warmup"]["size"], "seed": t["seed_set"]["size"],
                                              "probe": t["probe"]["size"], "confirm": p.confirm_stream_size()},
                        {"warmup": p.difficulty("warmup"), "seed": p.difficulty("seed_set"),
                         "probe": p.difficulty("probe"), "confirm": p.difficulty("confirm")})
    assert [x.canonical_hash for x in sets["probe"]] == [x.canonical_hash for x in want["probe"]]
    assert sets["probe"][0].expected == want["probe"][0].expected  # auditors see what was probed, answers included
    assert "base probe pass rate" in text and "MDE" in text
    base = set_paths(results, p.name)["base"].read_bytes()
    again, _ = run_freeze(proto, results)  # same content: a no-op that verifies
    assert again["lock"]["lock_hash"] == first["lock"]["lock_hash"]
    shutil.rmtree(results)
    run_freeze(proto, results)  # rebuilt from the recipe: the same bytes
    assert set_paths(results, p.name)["base"].read_bytes() == base


def test_refreezing_changed_content_is_refused(tmp_path):
    proto = make_tiny_protocol(tmp_path)
    results = tmp_path / "results"
    run_freeze(proto, results)
    decision = proto / "decision.yaml"
    decision.write_text(decision.read_text().replace("sesoi: 0.05", "sesoi: 0.04"))
    with pytest.raises(LockError, match="a changed protocol is a new protocol"):
        run_freeze(proto, results)


def test_freeze_warns_loudly_off_range_and_underpowered(tmp_path):
    proto = make_tiny_protocol(tmp_path, model={"base_pass_range": [0.9, 1.0]})
    _, text = run_freeze(proto, tmp_path / "results")
    assert "WARNING: the base's probe pass rate" in text and "outside the registered range [0.9, 1.0]" in text
    assert "WARNING: underpowered" in text
