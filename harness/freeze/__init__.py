"""Freeze: the sets, the base, the pilot, the design analysis and the lock, in that order."""
