"""The deviations log cannot be shortened behind a sealed run: every sealed run's manifest records the
log's head at its seal, and the readout refuses a log that does not extend each recorded head, in one
line naming the run and the missing entries."""
import datetime
import json
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT
from harness.core import records
from harness.readout.analyzer import ReadoutError, readout
from harness.spec import deviations
from harness.spec.deviations import DeviationError, add_deviation, deviations_path, record_resume
from harness.spec.protocol import load_protocol
from tests.fixtures_runs import build_tree, writable_copy

WHEN = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def anchored(tmp_path_factory):
    """A sealed tree whose runs recorded the log's head as the runner does at its seal: A seed 1 resumed
    (an entry before its seal), an entry by hand with an outcome seen before B seed 1 was sealed, so
    the runs sealed from then on recorded two entries; then one more entry after every seal."""
    root = tmp_path_factory.mktemp("anchored")

    def at_seal(arm, seed, fields):  # build_tree has written the protocol and its frozen files by now
        protocol = load_protocol(root / "protocols" / "fixture")
        if (arm, seed) == ("A", 1):
            record_resume(protocol, root / "results", "A", 1, 1, now=WHEN)
        if (arm, seed) == ("B", 1):
            add_deviation(protocol, root / "results", "looked at the probe scores of A", "curiosity", "the lead", "yes",
                          now=WHEN)
        fields["deviations_head"] = deviations.head(root / "results", protocol.name)

    tree = build_tree(root, edit_manifest=at_seal)
    add_deviation(tree.protocol, tree.results_dir, "rebooted the machine", "maintenance", "the lead", "no", now=WHEN)
    return tree


def _manifest(tree, arm, seed) -> dict:
    return json.loads((tree.run(arm, seed) / records.MANIFEST_NAME).read_text())


def _log_lines(tree) -> list[bytes]:
    return deviations_path(tree.results_dir, tree.name).read_bytes().splitlines(keepends=True)


def test_each_sealed_run_records_the_head_it_was_sealed_at(anchored):
    hashes = [json.loads(line)["hash"] for line in _log_lines(anchored)]
    assert len(hashes) == 3
    assert _manifest(anchored, "A", 1)["deviations_head"] == {"entries": 1, "hash": hashes[0]}
    assert _manifest(anchored, "A", 2)["deviations_head"] == {"entries": 1, "hash": hashes[0]}
    for arm, seed in (("B", 1), ("B", 2), ("C", 1), ("C", 2)):
        assert _manifest(anchored, arm, seed)["deviations_head"] == {"entries": 2, "hash": hashes[1]}
    assert deviations.head(anchored.results_dir, anchored.name) == {"entries": 3, "hash": hashes[2]}


def test_a_log_that_extends_every_head_reads_out(anchored, tmp_path):
    copy = writable_copy(anchored.root, tmp_path / "copy")
    out = readout(copy / "protocols" / anchored.name, copy / "results")
    entries = json.loads((out / "verdict.json").read_text())["deviations"]["entries"]
    assert [e["what"] for e in entries] == ["A seed 1 resumed from round 1 after an interruption",
                                           "looked at the probe scores of A", "rebooted the machine"]


def _shortened(anchored, tmp_path, keep: int):
    copy = writable_copy(anchored.root, tmp_path / "copy")
    log = deviations_path(copy / "results", anchored.name)
    log.chmod(0o600)
    log.write_bytes(b"".join(_log_lines(anchored)[:keep]))
    return copy


def test_removing_an_anchored_entry_is_refused_naming_the_run_and_the_entry(anchored, tmp_path):
    """The hand-made entry with an outcome seen, and the one after it, removed: the chain that is left
    verifies, but runs B and C were sealed with two entries."""
    copy = _shortened(anchored, tmp_path, 1)
    assert records.verify_chain(deviations_path(copy / "results", anchored.name))  # what the chain alone allows
    with pytest.raises(ReadoutError) as caught:
        readout(copy / "protocols" / anchored.name, copy / "results")
    text = str(caught.value)
    assert "\n" not in text
    assert ("DEVIATIONS.jsonl: holds 1 entries, but run B/seed1 was sealed when it held 2 (head "
            in text and "entry 2 is missing (the log was shortened) (3 other sealed run(s) too)" in text)
    assert not (copy / "results" / anchored.name / "readout").exists()


def test_an_emptied_or_removed_log_is_refused(anchored, tmp_path):
    copy = _shortened(anchored, tmp_path, 0)
    with pytest.raises(ReadoutError, match=r"holds 0 entries, but run B/seed1 was sealed when it held 2 .*entries "
                                           r"1 to 2 are missing"):
        readout(copy / "protocols" / anchored.name, copy / "results")
    deviations_path(copy / "results", anchored.name).unlink()
    with pytest.raises(ReadoutError, match="entries 1 to 2 are missing"):
        readout(copy / "protocols" / anchored.name, copy / "results")


def test_a_rewritten_log_of_the_same_length_is_refused(anchored, tmp_path):
    """A new chain with the outcome-seen entry replaced verifies on its own; its entry 2 is not the one
    the runs were sealed with."""
    copy = writable_copy(anchored.root, tmp_path / "copy")
    log = deviations_path(copy / "results", anchored.name)
    entries = records.RecordLog(log).records()
    log.unlink()
    for e in entries:
        records.RecordLog(log).append(dict(e, outcome_seen="no") if e["outcome_seen"] == "yes" else e)
    with pytest.raises(ReadoutError, match=r"entry 2 hashes to \w{12}\.\.\., but run B/seed1 was sealed when the "
                                           r"log's head was \w{12}\.\.\.: entries up to 2 were rewritten"):
        readout(copy / "protocols" / anchored.name, copy / "results")


def test_the_readout_command_refuses_a_shortened_log_in_one_line(anchored, tmp_path):
    copy = _shortened(anchored, tmp_path, 1)
    p = subprocess.run([sys.executable, "-m", "harness", "readout", "--protocol", str(copy / "protocols" / anchored.name),
                        "--results-dir", str(copy / "results")], cwd=PROJECT_ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stdout + p.stderr
    assert "the deviations log does not verify" in p.stderr and "run B/seed1" in p.stderr and "entry 2 is missing" in p.stderr


@pytest.mark.parametrize("anchor", [{"entries": -1, "hash": "0" * 64}, {"entries": 1}, "2", {"entries": True, "hash": "0" * 64}])
def test_a_malformed_recorded_head_is_refused_naming_the_run(tmp_path, anchor):
    with pytest.raises(DeviationError, match=r"run A/seed1: manifest 'deviations_head' is .*; expected"):
        deviations.check_anchors(tmp_path / "DEVIATIONS.jsonl", [], {"A/seed1": anchor})


def test_a_head_of_no_entries_is_extended_by_any_log(tmp_path):
    """A run sealed before any entry recorded 0 entries: the empty log (or none) extends it."""
    deviations.check_anchors(tmp_path / "DEVIATIONS.jsonl", [], {"A/seed1": {"entries": 0, "hash": "0" * 64}})
    deviations.read_deviations(tmp_path, "none", {})  # no log, no anchor: nothing to extend
