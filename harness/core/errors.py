"""The one error type a user can cause. Every refusal (a bad protocol, a lock mismatch, a sealed run,
a tampered record, a budget that cannot be spent) is a `HarnessError`: the CLI and the Hydra app
catch this one class and print its message on one line, exit status 2, no traceback."""


class HarnessError(Exception):
    """A refusal with a message that names the file, field or value and what was expected."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread of a run (harness.running.runner.sigterm_stops): the run stops as at
    Ctrl-C, so its `finally` blocks and the exit handlers run (the sandbox pools close, and none of their
    processes is left behind); the command exits 143 and says how to resume."""


class BudgetError(HarnessError):
    """A registered budget cannot be spent exactly (e.g. too few proposals survive gate and bank)."""
