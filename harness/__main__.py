"""`python -m harness <command> [args]`; `python -m harness <command> --help` for a command's own."""
from __future__ import annotations

import sys

from harness.cli import COMMANDS, guarded


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help}" for name, (_, help) in COMMANDS.items()]
    return ("usage: python -m harness <command> [args]   (python -m harness <command> --help for its own)\n\n"
            "commands:\n" + "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"error: unknown command {argv[0]!r}\n{usage()}", file=sys.stderr)
        return 2
    return guarded(COMMANDS[argv[0]][0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
