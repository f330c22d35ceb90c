"""The task families the protocols register by name (harness.tasks.registry): plug-ins of the
harness.tasks.contract.TaskFamily contract. The library never imports them by name."""
