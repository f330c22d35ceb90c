"""A protocol: its schema and typed views, the arm-kind registry, the compute ledger, the lock, the frozen reader."""
