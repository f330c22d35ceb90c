"""Command line: `python -m harness <command> [args]`. COMMANDS maps each sub-command to one function
that takes the remaining arguments and returns the exit status."""
from __future__ import annotations

import argparse
import json
import sys

from harness.cli import COMMANDS as EXPERIMENT_COMMANDS


def verify(argv: list[str]) -> int:
    """Verify completions against tasks; print one JSON verdict per line (counters on stderr)."""
    ap = argparse.ArgumentParser(prog="python -m harness verify", description=verify.__doc__)
    ap.add_argument("--tasks", required=True, help="tasks JSONL (harness.tasks.save_tasks format)")
    ap.add_argument("--completions", required=True,
                    help='JSONL, one {"completion": str} per line; optional "index" or "canonical_hash" '
                         "picks its task, otherwise line i goes with task i")
    ap.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPU count)")
    args = ap.parse_args(argv)
    from harness.tasks import load_tasks
    from harness.verifier import Verifier, load_completions

    try:
        tasks = load_tasks(args.tasks)
        pairs = load_completions(args.completions, tasks, args.tasks)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with Verifier(workers=args.workers) as verifier:
        verdicts = verifier.verify_many([(tasks[i], completion) for i, completion in pairs])
        counters = verifier.counters
    for (i, _), v in zip(pairs, verdicts):
        print(json.dumps({"index": i, "canonical_hash": tasks[i].canonical_hash, "passed": v.passed,
                          "reason": v.reason, "tests": list(v.tests), "detail": v.detail}))
    print(json.dumps({"counters": counters}), file=sys.stderr)
    return 0


COMMANDS = {"verify": verify}
COMMANDS.update(EXPERIMENT_COMMANDS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=sorted(COMMANDS))
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the command's own arguments (see <command> -h)")
    ns = ap.parse_args(argv)
    return COMMANDS[ns.command](ns.args)


if __name__ == "__main__":
    sys.exit(main())
