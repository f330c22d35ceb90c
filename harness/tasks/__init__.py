"""The task-family contract and registry, the splits and leak guard over any family, the proposer and the dedup bank."""
