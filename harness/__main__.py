"""`python -m harness <command> [args]`; `python -m harness <command> --help` for a command's own."""
import sys

from harness.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
