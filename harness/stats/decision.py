"""The decision rule's spec: what decision.yaml and bootstrap.yaml register for the readout's
statistics (harness.stats.contrasts), read from a loaded protocol. The readout applies it; the
design analysis (harness.stats.power) simulates it, exactly."""
from __future__ import annotations

from harness.stats import contrasts


def decision_spec(protocol) -> dict:
    """The stats spec from decision.yaml + bootstrap.yaml (the design block is the design analysis', not the rule's)."""
    d, b = protocol.decision, protocol.bootstrap
    spec = {"alpha": d.alpha, "sesoi": d.sesoi, "power": d.power,
            "contrasts": [list(c) for c in d.contrasts], "spread_rule": dict(d.spread_rule),
            "bootstrap": {"n_resamples": b.n_resamples, "method": str(b.method).lower(),
                          "confidence_level": b.confidence_level, "rng_seed": b.rng_seed}}
    return contrasts.validate_spec(spec)
