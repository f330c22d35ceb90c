"""The commands: `python -m harness <command>` and the Hydra app behind `run`."""
