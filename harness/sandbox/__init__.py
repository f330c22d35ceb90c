"""Untrusted code: the zygote pool and its worker, the exec verifier and the determinism gate."""
