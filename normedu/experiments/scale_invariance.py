"""Scale invariance: the norm of weights that feed a normalization, under SGD.

The loss of a network ``x -> W x -> LayerNorm -> ReLU -> Linear`` does not change when ``W``
is scaled (up to the norm's ε), so (Euler, degree-0 homogeneity) ``⟨W, ∇L(W)⟩ = 0`` and
``‖∇L(W)‖ = c / ‖W‖`` with ``c = ‖∇L(W/‖W‖)‖``. SGD with weight decay λ on ``W`` (PyTorch's
coupled form, ``W <- (1 − ηλ) W − η g``) then gives, exactly, ::

    ‖W_{t+1}‖² = (1 − ηλ)² ‖W_t‖² + η² ‖g_t‖² = (1 − ηλ)² ‖W_t‖² + η² c_t² / ‖W_t‖²

whose fixed point is ``‖W*‖⁴ = η c² / (λ (2 − ηλ))`` (≈ ``η c² / (2λ)`` to first order in
ηλ); without decay the norm only grows. :func:`train` measures ``‖W‖``, the cosine between
``W`` and its gradient, ``c`` and the effective learning rate ``η / ‖W‖²`` over a few hundred
plain-SGD steps on the digits; :func:`runs` does it with and without decay and plugs the
measured ``c`` into :func:`equilibrium_norm`. float64 throughout, seeded.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import seeding
from ..data import digits

__all__ = ["equilibrium_norm", "norm_recursion", "model", "train", "runs"]


def equilibrium_norm(lr: float, wd: float, c: float, first_order: bool = False) -> float:
    """‖W*‖ where decay and growth balance: (η c² / (λ (2 − ηλ)))^(1/4).

    ``first_order``: drop the ηλ in (2 − ηλ), i.e. (η c² / (2λ))^(1/4). ``c``: the gradient
    norm at unit weight norm (``‖g‖ · ‖W‖``); for a fluctuating c, pass the root mean square.
    """
    if lr <= 0 or wd <= 0 or lr * wd >= 1:
        raise ValueError(f"need lr > 0, wd > 0 and lr * wd < 1, got lr={lr}, wd={wd}")
    return float((lr * c**2 / (wd * (2 - (0 if first_order else lr * wd)))) ** 0.25)


def norm_recursion(w0: float, lr: float, wd: float, c, steps: int) -> np.ndarray:
    """‖W_t‖ for t = 0..steps from u_{t+1} = (1 − ηλ)² u_t + η² c_t² / u_t, u = ‖W‖².

    ``c``: a number, or one value per step. The scalar model of the norm under SGD with a
    gradient orthogonal to W; returns an array of ``steps + 1`` norms.
    """
    cs = np.broadcast_to(np.asarray(c, dtype=float), (steps,))
    u = np.empty(steps + 1)
    u[0] = w0**2
    for t in range(steps):
        u[t + 1] = (1 - lr * wd) ** 2 * u[t] + lr**2 * cs[t] ** 2 / u[t]
    return np.sqrt(u)


def model(hidden: int = 32, seed: int = 0) -> nn.Sequential:
    """``Linear(64, hidden, bias=False) -> LayerNorm(hidden) -> ReLU -> Linear(hidden, 10)``.

    float64, PyTorch's default initialization under ``seed``. Its loss does not depend on the
    scale of the first layer's weight (up to the LayerNorm's ε). Input (N, 64) -> (N, 10).
    """
    seeding.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(64, hidden, bias=False),
        nn.LayerNorm(hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    ).double()


@torch.no_grad()
def _sgd_step(w: Tensor, rest: list[Tensor], lr: float, wd: float) -> None:
    """``torch.optim.SGD`` without momentum, weight decay ``wd`` on ``w`` only, written out:
    the same operations in the same order (g + λW, then W - η(g + λW)), so the same bits.
    Written out because constructing a ``torch.optim`` optimizer imports ``torch._dynamo``
    (and sympy) on first use: 1.5 to 3 CPU-s in a fresh kernel, for a two-line update."""
    w.add_(w.grad.add(w, alpha=wd), alpha=-lr)
    for p in rest:
        p.add_(p.grad, alpha=-lr)


@lru_cache(maxsize=8)
def train(
    lr: float = 0.5,
    wd: float = 0.0,
    steps: int = 400,
    hidden: int = 32,
    batch: int = 64,
    seed: int = 0,
) -> dict:
    """Plain SGD (no momentum) on :func:`model`, weight decay ``wd`` on the first layer only.

    Minibatches of ``batch`` training digits, reshuffled each pass. Returns arrays over the
    ``steps`` steps, each measured before the step's update: ``norm`` (‖W‖), ``grad_norm``
    (‖g‖, the loss gradient without the decay term), ``cos`` (cosine of W and g), ``c``
    (‖g‖ · ‖W‖), ``eff_lr`` (η / ‖W‖²), ``loss``, ``turn`` (the angle in radians between W
    before and after the step's update); plus ``final_norm``, ``test_acc``,
    ``step_residual`` (largest relative gap between the measured ‖W_{t+1}‖² and
    (1 − ηλ)² ‖W_t‖² + η² ‖g_t‖²) and the settings.
    """
    data = digits()
    x, y = data.x_train.double(), data.y_train
    net = model(hidden, seed)
    w = net[0].weight
    rest = [p for p in net.parameters() if p is not w]
    gen = seeding.generator(seed)
    rec = {k: np.empty(steps) for k in ("norm", "grad_norm", "cos", "loss", "turn")}
    perm, pos = torch.randperm(len(x), generator=gen), 0
    for t in range(steps):
        if pos + batch > len(x):
            perm, pos = torch.randperm(len(x), generator=gen), 0
        idx = perm[pos : pos + batch]
        pos += batch
        loss = F.cross_entropy(net(x[idx]), y[idx])
        net.zero_grad()
        loss.backward()
        wn, gn = float(w.detach().norm()), float(w.grad.norm())
        rec["norm"][t], rec["grad_norm"][t], rec["loss"][t] = wn, gn, loss.item()
        rec["cos"][t] = float((w.detach() * w.grad).sum()) / (wn * gn)
        before = w.detach() / wn
        _sgd_step(w, rest, lr, wd)
        # The angle from the chord between unit vectors: accurate for small turns, where
        # arccos of a cosine near 1 loses half the digits.
        chord = float((w.detach() / w.detach().norm() - before).norm())
        rec["turn"][t] = 2 * np.arcsin(min(chord / 2, 1.0))
    final = float(w.detach().norm())
    after = np.append(rec["norm"][1:], final) ** 2
    predicted = (1 - lr * wd) ** 2 * rec["norm"] ** 2 + lr**2 * rec["grad_norm"] ** 2
    with torch.no_grad():
        acc = float((net(data.x_test.double()).argmax(1) == data.y_test).double().mean())
    return {
        **rec,
        "c": rec["norm"] * rec["grad_norm"],
        "eff_lr": lr / rec["norm"] ** 2,
        "final_norm": final,
        "test_acc": acc,
        "step_residual": float(np.max(np.abs(after - predicted) / after)),
        "lr": lr,
        "wd": wd,
        "steps": steps,
    }


def runs(lr: float = 0.5, wd: float = 0.01, steps: int = 400) -> dict:
    """:func:`train` without (``"plain"``) and with (``"decay"``) weight decay, and the theory.

    The equilibrium uses the root mean square of the measured ``c`` over the decay run's last
    quarter (``"c_rms"``); ``"measured"`` is the mean ‖W‖ over the same steps, ``"predicted"``
    and ``"predicted_first_order"`` come from :func:`equilibrium_norm`, and
    ``"angular_step"`` is √(2ηλ), the rotation per step at equilibrium (radians), and
    ``"turn_rms"`` (``{"plain", "decay"}``) the measured root mean square of each run's
    per-step rotation over the same steps.
    """
    plain, decay = train(lr, 0.0, steps), train(lr, wd, steps)
    tail = slice(3 * steps // 4, None)
    c_rms = float(np.sqrt(np.mean(decay["c"][tail] ** 2)))
    return {
        "plain": plain,
        "decay": decay,
        "lr": lr,
        "wd": wd,
        "tail_start": 3 * steps // 4,
        "c_rms": c_rms,
        "measured": float(np.mean(decay["norm"][tail])),
        "predicted": equilibrium_norm(lr, wd, c_rms),
        "predicted_first_order": equilibrium_norm(lr, wd, c_rms, first_order=True),
        "angular_step": float(np.sqrt(2 * lr * wd)),
        "turn_rms": {
            k: float(np.sqrt(np.mean(r["turn"][tail] ** 2)))
            for k, r in (("plain", plain), ("decay", decay))
        },
    }
