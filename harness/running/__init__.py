"""One arm x seed: the runner, the arm contract, evaluation, C's experience store and gate, tracking."""
