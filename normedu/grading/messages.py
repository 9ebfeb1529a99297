"""Feedback shared by the norms that standardize ``(x − μ) / sqrt(σ² + ε)``
and then apply ``γ·x̂ + β``; they differ only in the axis (their own modules say which).
"""

EPS_OUT = "ε must be inside the square root: (x − μ) / sqrt(σ² + ε), not (x − μ) / (σ + ε)"
EPS_IGNORED = "the eps argument is not used (or not inside the square root): divide by sqrt(σ² + eps) with the eps you were given"  # noqa: E501
NO_SQRT = "you divided by the variance; divide by the standard deviation sqrt(σ² + ε)"
NO_BETA = "the shift β is missing: out = γ·x̂ + β"
NO_GAMMA = "the scale γ is missing: out = γ·x̂ + β"
SWAPPED = "γ and β are swapped: γ scales, β shifts (out = γ·x̂ + β)"
