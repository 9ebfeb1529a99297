"""normedu: the package behind the course *Normalization in Deep Networks*.

Modules (import what you need; ``import normedu`` itself stays light and torch-free so
that the numpy-only exercises start fast):

- :mod:`normedu.functional` NumPy reference norms: forward, hand-written backward, Jacobians.
- :mod:`normedu.nn`         textbook torch norms and modules (LayerNorm, RMSNorm, BatchNorm1d).
- :mod:`normedu.stats`      hooks recording per-layer activation and gradient statistics.
- :mod:`normedu.data`       scikit-learn's bundled digits as tensors (no downloads).
- :mod:`normedu.mlp`        deep MLPs with a norm switch.
- :mod:`normedu.device`     device choice and the size presets of the scale experiments.
- :mod:`normedu.provenance` where and how a result was produced (device, versions, command).
- :mod:`normedu.ledger`     the claims ledger: each quantitative claim, its source and our check.
"""

__version__ = "0.1.0"
