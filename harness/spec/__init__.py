"""A protocol: its schema and typed views, the arm kinds, the compute ledger, the lock, the frozen reader, the deviations log."""
