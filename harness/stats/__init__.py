"""Statistics, no torch: the readout's contrasts, the paired test's power, the design's power analysis, the decision spec."""
