"""A protocol: its schema and typed views, the arm-kind registry, the lock and the reader of a frozen protocol."""
