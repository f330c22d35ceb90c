"""The task family (programs, splits, leak guard), the mutation proposer and the dedup bank."""
