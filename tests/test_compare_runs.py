"""tools.compare_runs: runs that differ only in the code they ran with compare identical; any other
changed field is named by its path."""
import json

from tools.compare_runs import main


def _tree(root, bpb=0.5, lock="a" * 64, passed="0110"):
    run = root / "smoke" / "A" / "seed1"
    run.mkdir(parents=True)
    recs = [{"kind": "start", "lock_hash": lock, "code_version": lock, "hash": lock, "prev": "0" * 64},
            {"kind": "round", "round": 0, "eval": {"probe_passed": passed, "heldout_bpb": bpb, "probe_pass_rate": 0.5},
             "train": {"mean_loss": 0.25}, "checkpoint": "c" * 64, "hash": lock, "prev": lock}]
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return root


def test_only_code_and_chain_fields_are_ignored(tmp_path, capsys):
    before = _tree(tmp_path / "before")
    assert main([str(before), str(_tree(tmp_path / "same", lock="b" * 64))]) == 0
    assert "A/1: IDENTICAL" in capsys.readouterr().out
    assert main([str(before), str(_tree(tmp_path / "other", bpb=0.5000001, passed="0111"))]) == 1
    out = capsys.readouterr().out
    assert "records.jsonl:2: eval.heldout_bpb: 0.5 != 0.5000001" in out and "eval.probe_passed" in out
    assert "A/1: DIFFERENT" in out and "some runs differ" in out
    assert main([str(before), str(tmp_path / "absent")]) == 2
