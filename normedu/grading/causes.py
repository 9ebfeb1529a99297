"""The mistakes every standardizing norm can make, as one-line entries of a norm's table.

A norm's table (:class:`.normcheck.NormTable`) lists its causes as ``(message, variant)``
pairs. Most are the same mistake in another place: the unbiased variance, eps outside the
square root, a dropped term of the backward. :func:`switched` turns a norm's own
"computation with switches" into those entries, so that a norm names only its messages::

    *switched(ln_variant, unbiased=UNBIASED, eps_outside=EPS_OUT, no_beta=NO_BETA)

A new kind of mistake is one more line in :data:`SWITCHES` (and a switch of the variant
functions in :mod:`.diagnose`), then one keyword in the tables that want it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from normedu.grading.normcheck import Cause, Probe

__all__ = ["SWITCHES", "switched", "param_grad_causes"]

#: Each mistake: (keywords for the variant, change to the probe). Forward variants take
#: :func:`.diagnose.normalize`'s switches, backward ones :func:`.diagnose.normalize_backward`'s.
SWITCHES: dict[str, tuple[dict[str, Any], Callable[[Probe], Probe]]] = {
    # forward
    "unbiased": ({"ddof": 1}, lambda p: p),
    "eps_outside": ({"eps_mode": "outside"}, lambda p: p),
    "no_sqrt": ({"sqrt": False}, lambda p: p),
    "one_pass": ({"one_pass": True}, lambda p: p),
    "no_center": ({"center": False}, lambda p: p),
    "no_beta": ({}, lambda p: p.replace(beta=None)),
    "no_gamma": ({}, lambda p: p.replace(gamma=None)),
    "swapped": ({}, lambda p: p.replace(gamma=p.beta, beta=p.gamma)),
    # backward (dx)
    "constants": ({"mean_term": False, "var_term": False}, lambda p: p),
    "no_var_term": ({"var_term": False}, lambda p: p),
    "no_mean_term": ({"mean_term": False}, lambda p: p),
    "dx_no_gamma": ({"use_gamma": False}, lambda p: p),
}


def switched(variant: Callable[..., Any], **messages: str) -> list[Cause]:
    """``(message, probe -> variant(changed probe, **switches))`` for each named mistake of
    :data:`SWITCHES`, in the order given. ``variant(probe, **switches)`` is the norm's own
    computation (correct without switches)."""

    def entry(key: str) -> Callable[[Probe], Any]:
        switches, change = SWITCHES[key]
        return lambda p: variant(change(p), **switches)

    return [(message, entry(key)) for key, message in messages.items()]


def param_grad_causes(
    x_hat: Callable[[Probe], np.ndarray],
    axes: Callable[[Probe], tuple[int, ...]],
    uses_x: str,
    means: str,
    shift: bool = True,
) -> list[Cause]:
    """The mistakes of ``dgamma = Σ dout·x̂`` (and ``dbeta = Σ dout``) over ``axes(p)``:
    ``dout·x`` instead of ``dout·x̂``, and means instead of sums (of both, or of one).
    ``shift=False``: a norm without β, whose variants are dgamma alone."""

    def grads(p: Probe, xh: np.ndarray, g_mean: bool = False, b_mean: bool = False) -> Any:
        a = axes(p)
        dg = (p.dout * xh).mean(a) if g_mean else (p.dout * xh).sum(a)
        return (dg, p.dout.mean(a) if b_mean else p.dout.sum(a)) if shift else dg

    causes = [
        (uses_x, lambda p: grads(p, p.x)),
        (means, lambda p: grads(p, x_hat(p), g_mean=True, b_mean=True)),
    ]
    if shift:
        causes += [
            (means, lambda p: grads(p, x_hat(p), b_mean=True)),
            (means, lambda p: grads(p, x_hat(p), g_mean=True)),
        ]
    return causes
