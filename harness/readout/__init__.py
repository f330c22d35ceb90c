"""The one-shot readout: the analyzer, the control checks, the report and the audit."""
