"""The model, its sizes, sampling, training, advantages, the difficulty frontier, monitors and checkpoint I/O."""
