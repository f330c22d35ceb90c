"""C's experience store: append and reload, rejected-round material kept, recovery candidates,
and clear errors on a damaged file."""
import json

import pytest

from harness.running.experience import Experience
from families.code import CodeFamily, Difficulty, Task, with_expected

FAMILY = CodeFamily(Difficulty())

A = with_expected(Task("string", (("reverse", None),), (0,), ("abc", "")))
B = with_expected(Task("list", (("sort", None), ("take", 2)), (0, 1), ([3, 1, 2], [])))
C = with_expected(Task("arith", (("add", 3),), (0,), (1, -4)))
SOL_A = "    s = s[::-1]\n    return s\n"
SOL_A2 = "    return s[::-1]\n"
SOL_B = "    xs = sorted(xs)[:2]\n    return xs\n"
SOL_C = "    return x + 3\n"


def test_append_reload_and_reopen_appends(tmp_path):
    path = tmp_path / "sub" / "experience.jsonl"
    arc = Experience(path, FAMILY)
    assert arc.entries() == []
    arc.add(A, SOL_A, round=0, win_rate=0.5, kept=True)
    arc.add(B, SOL_B, round=0, win_rate=0.25, kept=True)
    Experience(path, FAMILY).add(C, SOL_C, round=1, win_rate=0.75, kept=False)  # a new handle appends
    entries = Experience(path, FAMILY).entries()
    assert [(Task.from_dict(e["task"]), e["solution"], e["round"], e["win_rate"], e["kept"]) for e in entries] == [
        (A, SOL_A, 0, 0.5, True), (B, SOL_B, 0, 0.25, True), (C, SOL_C, 1, 0.75, False)]
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == 3 and all(line.endswith("\n") for line in lines)
    for line in lines:  # canonical JSON: sorted keys, compact separators, one object per line
        assert line == json.dumps(json.loads(line), sort_keys=True, separators=(",", ":")) + "\n"


def test_rejected_round_material_is_kept_and_served(tmp_path):
    arc = Experience(tmp_path / "a.jsonl", FAMILY)
    arc.add(A, SOL_A, round=-1, win_rate=1.0, kept=True)  # seed material, before the first round
    arc.add(B, SOL_B, round=1, win_rate=0.5, kept=False)  # round 1's successor was retained-root
    assert [(e["round"], e["kept"]) for e in arc.entries()] == [(-1, True), (1, False)]
    assert (B, SOL_B) in arc.recovery_candidates()


def test_recovery_candidates_one_per_task_most_recent_first(tmp_path):
    path = tmp_path / "a.jsonl"
    arc = Experience(path, FAMILY)
    arc.add(A, SOL_A, round=0, win_rate=0.5, kept=True)
    arc.add(B, SOL_B, round=0, win_rate=0.5, kept=True)
    arc.add(A, SOL_A2, round=1, win_rate=0.4, kept=False)
    arc.add(C, SOL_C, round=2, win_rate=0.6, kept=True)
    expected = [(C, SOL_C), (A, SOL_A2), (B, SOL_B)]
    assert arc.recovery_candidates() == expected
    assert Experience(path, FAMILY).recovery_candidates() == expected  # same file -> same answer
    assert arc.recovery_candidates(limit=2) == expected[:2]
    assert arc.recovery_candidates(limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        arc.recovery_candidates(limit=-1)


def test_malformed_line_names_path_and_line(tmp_path):
    path = tmp_path / "a.jsonl"
    arc = Experience(path, FAMILY)
    arc.add(A, SOL_A, round=0, win_rate=0.5, kept=True)
    arc.add(B, SOL_B, round=0, win_rate=0.5, kept=True)
    with open(path, "a") as f:
        f.write('{"task": {"template": "arith"}, "solution": \n')
    with pytest.raises(ValueError, match=rf"{path}:3: not valid JSON"):
        arc.entries()


def test_missing_field_truncated_line_and_tampered_task_are_named(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"solution": "x"}\n')
    with pytest.raises(ValueError, match=rf"{path}:1: missing field"):
        Experience(path, FAMILY).entries()

    arc = Experience(tmp_path / "b.jsonl", FAMILY)
    arc.add(A, SOL_A, round=0, win_rate=0.5, kept=True)
    with open(arc.path, "a") as f:
        f.write('{"kept": true')  # a crash mid-write leaves no newline
    with pytest.raises(ValueError, match=r"b.jsonl:2: truncated line"):
        arc.entries()

    arc = Experience(tmp_path / "c.jsonl", FAMILY)
    arc.add(A, SOL_A, round=0, win_rate=0.5, kept=True)
    rec = json.loads(arc.path.read_text())
    rec["task"]["ops"] = [["upper", None]]
    arc.path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match=r"c.jsonl:1: task hashes to"):
        arc.recovery_candidates()


@pytest.mark.parametrize("field,value", [("solution", ""), ("round", -2), ("round", 1.0), ("win_rate", 1.5),
                                         ("win_rate", float("nan")), ("kept", 1)])
def test_bad_record_fields_are_refused(tmp_path, field, value):
    args = {"solution": SOL_A, "round": 0, "win_rate": 0.5, "kept": True, field: value}
    arc = Experience(tmp_path / "a.jsonl", FAMILY)
    with pytest.raises(ValueError, match=field):
        arc.add(A, **args)
    assert not arc.path.exists()
