"""The arm kinds: one module per kind, loaded by the runner by the name the registry (harness/spec/kinds.py) holds."""
