"""Where everything lives. One default results directory, whatever the working directory, and every
path the commands read or write, derived from (results dir, protocol name). No torch, no runner:
reading sealed records must not import the training loop.

    <results>/<protocol>/frozen/sets/{warmup,seed_set,probe,confirm,calibration}.jsonl   materialised splits
    <results>/<protocol>/frozen/base.pt (+ base.json)                          the base and its recipe hash
    <results>/<protocol>/frozen/pilot.json                                     what the pilot measured
    <results>/<protocol>/frozen/base_eval.json                                 the base scored once (round -1)
    <results>/<protocol>/frozen/freeze.json                                    what freeze measured
    <results>/<protocol>/frozen/FROZEN.lock                                    written last
    <results>/<protocol>/<arm>/seed<k>/                                        one sealed run
    <results>/<protocol>/readout/                                              the one-shot readout
    <results>/.replicate/<protocol>/<arm>/seed<k>/                             a replication (harness.running.replicate)
A protocol about the recipe (decision.yaml recipe) freezes its registration once, in frozen/ (sets, the
sequential plan: frozen/recipe.json), and each registered base is a frozen tree of its own, a results
directory whose layout is the one above, every arm x seed of that base beside its base.pt:
    <results>/<protocol>/bases/b<k>/<protocol>/frozen/{base.pt,base_eval.json,FROZEN.lock,...}
    <results>/<protocol>/bases/b<k>/<protocol>/<arm>/seed<s>/                  one sealed run on base k
    <results>/<protocol>/looks.jsonl                                           each look the plan took, chained
"""
from __future__ import annotations

from pathlib import Path

from harness import PROJECT_ROOT

LOCK_NAME = "FROZEN.lock"   # the lock freeze writes last (harness.spec.lock)
PREREG_NAME = "PREREGISTRATION.md"   # frozen/: the protocol in a registry's terms (harness.readout.prereg)
DEVIATIONS_NAME = "DEVIATIONS.jsonl"  # results/<protocol>/, beside frozen/, never inside it (harness.spec.deviations)

DEFAULT_RESULTS = PROJECT_ROOT / "results"
SPLITS = ("warmup", "seed_set", "probe", "confirm", "calibration")
READOUT_NAME = "readout"
REPLICATE_NAME = ".replicate"  # beside the protocols' folders, never in one
CHECKPOINTS_DIR = "checkpoints/"  # a run's round checkpoints (an archive leaves them out unless asked)


def results_dir(value: str | Path | None = None) -> Path:
    """The results directory as an absolute path; None (or "") means the default, `results/` under the
    project root (not under the working directory: `make` and `python -m harness` agree wherever run)."""
    return Path(value).expanduser().resolve() if value else DEFAULT_RESULTS


def frozen_dir(results: Path, name: str) -> Path:
    return Path(results) / name / "frozen"


def lock_path(results: Path, name: str) -> Path:
    return frozen_dir(results, name) / LOCK_NAME


def set_paths(results: Path, name: str) -> dict[str, Path]:
    d = frozen_dir(results, name)
    return {s: d / "sets" / f"{s}.jsonl" for s in SPLITS} | {"base": d / "base.pt"}


def base_recipe_path(results: Path, name: str) -> Path:
    return frozen_dir(results, name) / "base.json"


def pilot_path(results: Path, name: str) -> Path:
    """What `make pilot` measured (harness.freeze.pilot); freeze records its sha256 in the lock."""
    return frozen_dir(results, name) / "pilot.json"


def conformance_path(results: Path, name: str) -> Path:
    """The task family's conformance report (harness.freeze.conformance), written before the sets are
    drawn; freeze records its sha256 in the lock."""
    return frozen_dir(results, name) / "conformance.json"


def numerics_path(results: Path, name: str) -> Path:
    """The numerics fingerprint of the host that froze the protocol (harness.learning.numerics), written
    before the base; freeze records its sha256 in the lock, and every computing process checks its own."""
    return frozen_dir(results, name) / "numerics.json"


def base_eval_path(results: Path, name: str) -> Path:
    """The base's one evaluation on the probe set (harness.running.evaluation.evaluate_base): every run's
    round -1 and the readout's base row read it; freeze records its sha256 in the lock."""
    return frozen_dir(results, name) / "base_eval.json"


def freeze_summary_path(results: Path, name: str) -> Path:
    return frozen_dir(results, name) / "freeze.json"


def run_dir(results: Path, protocol: str, arm: str, seed: int) -> Path:
    return Path(results) / protocol / arm / f"seed{seed}"


def base_tree(results: Path, name: str, label: str) -> Path:
    """The results directory of one registered base of a recipe protocol (its label: b01, b02, ...)."""
    return Path(results) / name / "bases" / label


def recipe_plan_path(results: Path, name: str) -> Path:
    """A recipe protocol's registration as freeze computed it: the bases, the sequential plan and its
    simulated operating characteristics; the lock hashes it."""
    return frozen_dir(results, name) / "recipe.json"


def looks_path(results: Path, name: str) -> Path:
    """The looks a recipe protocol's sequential plan took (chained JSONL, one record per look)."""
    return Path(results) / name / "looks.jsonl"


def readout_dir(results: Path, name: str) -> Path:
    return Path(results) / name / READOUT_NAME


def replicate_dir(results: Path, protocol: str, arm: str, seed: int) -> Path:
    """Where a replication of one run is written (kept when it differs, for inspection)."""
    return Path(results) / REPLICATE_NAME / protocol / arm / f"seed{seed}"


def command_hint(target: str, protocol: str, results: Path, **extra) -> str:
    """How to run `target` again for this protocol and results dir, as a user would type it:
    `make freeze PROTOCOL=smoke RESULTS=/data/r` (RESULTS only when it is not the default)."""
    args = [f"PROTOCOL={protocol}"] + [f"{k.upper()}={v}" for k, v in extra.items()]
    if Path(results).resolve() != DEFAULT_RESULTS:
        args.append(f"RESULTS={results}")
    return f"make {target} " + " ".join(args)
