"""The deviations log: an entry is added after freeze and before the readout, the readout reports it
("none" when empty) and seals its hash, and the audit sees a log changed after the readout."""
import datetime
import json

import pytest

from harness.__main__ import main
from harness.core import records
from harness.readout.analyzer import readout
from harness.readout.audit import audit
from harness.spec.deviations import DeviationError, add_deviation, deviations_path
from harness.spec.lock import LockError
from tests.fixtures_runs import build_tree, edit_bytes, writable_copy

WHEN = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)


def test_no_deviation_reads_none(tmp_path):
    tree = build_tree(tmp_path)
    out = readout(tree.protocol_dir, tree.results_dir, figures=False)
    v = json.loads((out / "verdict.json").read_text())
    assert v["deviations"] == {"entries": [], "sha256": None}
    assert "## Deviations\n\nnone (no deviation was logged after freeze)" in (out / "report.md").read_text()


def test_a_logged_deviation_is_reported_sealed_and_closed_at_the_readout(tmp_path):
    tree = build_tree(tmp_path)
    add_deviation(tree.protocol, tree.results_dir, "B seed 2 rerun from round 1", "the machine rebooted",
                  "the lead", "no", now=WHEN)
    out = readout(tree.protocol_dir, tree.results_dir)
    v = json.loads((out / "verdict.json").read_text())
    log = deviations_path(tree.results_dir, tree.name)
    assert v["deviations"]["entries"] == [{"date": "2026-12-01T12:00:00+00:00", "what": "B seed 2 rerun from round 1",
                                           "why": "the machine rebooted", "who": "the lead", "outcome_seen": "no"}]
    assert v["deviations"]["sha256"] == records.verify_sealed(out)["deviations_sha256"] == records.sha256_file(log)
    assert ("| 2026-12-01T12:00:00+00:00 | B seed 2 rerun from round 1 | the machine rebooted | the lead | no |"
            in (out / "report.md").read_text())
    with pytest.raises(DeviationError, match="sealed"):
        add_deviation(tree.protocol, tree.results_dir, "late", "late", "me", "yes")

    # the audit recomputes verdict.json from the log as it is: a log changed after the readout is seen
    copy = writable_copy(tree.root, tmp_path / "copy")
    edit_bytes(copy / "results" / tree.name / log.name, b"the machine rebooted", b"the machine crashed!")
    ok, message = audit(copy / "protocols" / tree.name, copy / "results")
    assert not ok and "deviations log does not verify" in message and "DEVIATIONS.jsonl:1" in message


def test_a_deviation_needs_every_field_and_a_verifying_lock(tmp_path):
    tree = build_tree(tmp_path)
    with pytest.raises(DeviationError, match="--why is empty"):
        add_deviation(tree.protocol, tree.results_dir, "x", " ", "me", "no")
    with pytest.raises(DeviationError, match="--outcome-seen must be one of"):
        add_deviation(tree.protocol, tree.results_dir, "x", "y", "me", "maybe")
    edit_bytes(tree.frozen / "sets" / "probe.jsonl", b'"template": "arith"', b'"template": "arith" ')
    with pytest.raises(LockError):  # frozen content changed: refused, as before
        add_deviation(tree.protocol, tree.results_dir, "x", "y", "me", "no")
    assert not deviations_path(tree.results_dir, tree.name).exists()


def test_the_deviation_command_appends_an_entry(tmp_path, capsys):
    tree = build_tree(tmp_path)
    status = main(["deviation", "--protocol", str(tree.protocol_dir), "--results-dir", str(tree.results_dir),
                   "--what", "ran on another machine", "--why", "the first one was down", "--who", "ops",
                   "--outcome-seen", "no"])
    assert status == 0 and "[deviation] logged in" in capsys.readouterr().out
    entries = records.RecordLog(deviations_path(tree.results_dir, tree.name)).records()
    assert [(e["what"], e["outcome_seen"]) for e in entries] == [("ran on another machine", "no")]


@pytest.mark.parametrize("argv, words", [
    (["--outcome-seen", ""], ["argument --outcome-seen: invalid choice: ''", "--help lists the arguments"]),
    (["--outcome-seen="], ["argument --outcome-seen: invalid choice: ''"]),
    ([], ["the following arguments are required: --outcome-seen"]),
])
def test_a_bad_deviation_flag_is_one_line_and_writes_nothing(tmp_path, capsys, argv, words):
    status = main(["deviation", "--protocol", "smoke", "--results-dir", str(tmp_path / "results"),
                   "--what", "x", "--why", "y", "--who", "z", *argv])
    out, err = capsys.readouterr()
    assert status == 2 and out == "" and "usage:" not in err
    assert err.count("\n") == 1 and err.startswith("error: python -m harness deviation: "), err
    assert all(w in err for w in words), err
    assert list(tmp_path.iterdir()) == []


def _append_resumes(protocol_dir, results_dir, arm, n):
    from harness.spec.deviations import record_resume
    from harness.spec.protocol import load_protocol
    protocol = load_protocol(protocol_dir)
    for i in range(n):
        record_resume(protocol, results_dir, arm, 1, i)


def test_runs_side_by_side_log_their_resumes_into_one_intact_chain(tmp_path):
    """Two processes append at once (as `make experiment`'s jobs may): the lock on the log keeps one chain."""
    import multiprocessing

    from harness.spec.deviations import AUTOMATIC, read_deviations
    from tests.fixtures_runs import write_protocol
    protocol = write_protocol(tmp_path, "fixture")
    results = tmp_path / "results"
    ctx = multiprocessing.get_context("spawn")
    jobs = [ctx.Process(target=_append_resumes, args=(str(protocol.dir), str(results), arm, 25)) for arm in "AB"]
    for j in jobs:
        j.start()
    for j in jobs:
        j.join(120)
    assert [j.exitcode for j in jobs] == [0, 0]
    entries = read_deviations(results, protocol.name)["entries"]  # verifies the chain line by line
    assert len(entries) == 50 and {e["who"] for e in entries} == {AUTOMATIC}
    for arm in "AB":
        mine = [e["what"] for e in entries if e["what"].startswith(f"{arm} seed 1 ")]
        assert mine[0] == f"{arm} seed 1 started over from round 0 after an interruption before its first round completed"
        assert mine[1:] == [f"{arm} seed 1 resumed from round {i} after an interruption" for i in range(1, 25)]
