"""The design analysis' records (harness.stats.design.records): what the simulation reads and writes."""
