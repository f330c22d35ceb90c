"""One arm x seed: the runner, the arm contract, the compute ledger, evaluation, C's experience store and gate, tracking."""
