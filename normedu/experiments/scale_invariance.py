"""Scale invariance: the norm of weights that feed a normalization, under SGD.

The loss of a network ``x -> W x -> LayerNorm -> ReLU -> Linear`` does not change when ``W``
is scaled (up to the norm's ε), so (Euler, degree-0 homogeneity) ``⟨W, ∇L(W)⟩ = 0`` and
``‖∇L(W)‖ = c / ‖W‖`` with ``c = ‖∇L(W/‖W‖)‖``. SGD with weight decay λ on ``W`` (PyTorch's
coupled form, ``W <- (1 − ηλ) W − η g``) then gives, exactly, ::

    ‖W_{t+1}‖² = (1 − ηλ)² ‖W_t‖² + η² ‖g_t‖² = (1 − ηλ)² ‖W_t‖² + η² c_t² / ‖W_t‖²

whose fixed point is ``‖W*‖⁴ = η c² / (λ (2 − ηλ))`` (≈ ``η c² / (2λ)`` to first order in
ηλ); without decay the norm only grows. :func:`train` measures ``‖W‖``, the cosine between
``W`` and its gradient, ``c`` and the effective learning rate ``η / ‖W‖²`` over a few hundred
plain-SGD steps on the digits; :func:`runs` does it with and without decay on several seeds
and plugs each run's measured ``c`` into :func:`equilibrium_norm` (:func:`window_stats`).
float64 throughout, seeded. The equilibrium norm is van Laarhoven's (2017), named an
equilibrium by Chiley et al. (2019); the angular update √(2ηλ) per step and the proof that the
equilibrium is reached at a linear rate are Wan et al.'s (NeurIPS 2021), here without momentum.

Summed over a window of N steps, the recursion gives, exactly,
``(2ηλ − η²λ²) mean(u) = η² mean(c²/u) − (u_end − u_start)/N``: the window's mean norm meets
the equilibrium of the same window's c whenever the norm's change across the window is small
next to what decay removes over it (a bookkeeping identity, which a control run with a five
times weaker decay, still relaxing, passes too). :func:`quarter_gaps` is the test that can fail:
the norm against the equilibrium of each quarter of the window, at 1.2 relaxation times per
quarter for the control and 6 for the page's decay.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import seeding
from ..data import digits

__all__ = [
    "STEPS",
    "SEEDS",
    "equilibrium_norm",
    "norm_recursion",
    "CONTROL",
    "model",
    "quarter_gaps",
    "relaxation_steps",
    "train",
    "train_many",
    "window_stats",
    "runs",
]


#: Training length of the page's runs, and where their equilibrium window starts. With
#: η = 0.5, λ = 0.01 the norm relaxes toward its equilibrium in about 1/(4ηλ) = 50 steps
#: (:func:`relaxation_steps`); the window starts after 8 of them and lasts 24, long enough
#: that one stretch of large gradients does not decide the comparison (a 100-step window,
#: two relaxation times, put one seed's mean norm 15% off the equilibrium).
STEPS = 1600
#: Seeds of every verdict drawn from these runs (the 2 x 5 runs, side by side in
#: :func:`train_many`, cost about 5 CPU-s together).
SEEDS = 5
#: The control's weight decay is the page's divided by CONTROL: its norm relaxes in 1/(4ηλ) =
#: 250 steps at η = 0.5, λ = 0.002, so over steps 400-1600 it is still catching up with c.
CONTROL = 5


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


def train(
    lr: float = 0.5,
    wd: float = 0.0,
    steps: int = STEPS,
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
    (1 − ηλ)² ‖W_t‖² + η² ‖g_t‖²) and the settings. One run of :func:`train_many`.
    """
    return train_many(lr, (wd,), steps, hidden, batch, (seed,))[0]


@lru_cache(maxsize=16)  # the page's runs, and a try-it's
def train_many(
    lr: float,
    wds: tuple[float, ...],
    steps: int = STEPS,
    hidden: int = 32,
    batch: int = 64,
    seeds: tuple[int, ...] = (0,),
) -> tuple[dict, ...]:
    """Several :func:`train` runs side by side, run ``r`` with weight decay ``wds[r]`` from
    :func:`model` ``(hidden, seeds[r])``, its batches drawn in the order of ``seeds[r]``.

    The runs are independent (each loss is its own batch's mean, summed: the gradient of one
    run's weights is its own loss's), stacked along a leading run axis R so that one step of
    all of them costs little more than one step of one: (R, B, 64) inputs, (R, H, 64) first
    weights, per-run LayerNorm affine (R, 1, H) and last layer (R, 10, H). The update is
    ``torch.optim.SGD``'s without momentum, written out (constructing an optimizer imports
    ``torch._dynamo``: 1.5 to 3 CPU-s in a fresh kernel): W ← W − η(g + λW) for the first
    layer, p ← p − η g for the others. Returns one :func:`train` dict per run.
    """
    if len(wds) != len(seeds):
        raise ValueError(f"one weight decay per seed, got {len(wds)} and {len(seeds)}")
    data = digits()
    x, y = data.x_train.double(), data.y_train
    nets = [model(hidden, s) for s in seeds]
    eps = nets[0][1].eps

    def stack(i: int, name: str, mid: bool = False) -> Tensor:
        t = torch.stack([getattr(n[i], name).detach() for n in nets])
        return (t[:, None, :] if mid else t).clone().requires_grad_(True)

    w = stack(0, "weight")  # (R, H, 64)
    rest = [stack(1, "weight", True), stack(1, "bias", True), stack(3, "weight")]
    rest.append(stack(3, "bias", True))  # (R, 1, H) twice, (R, 10, H), (R, 1, 10)
    decay = torch.tensor(wds, dtype=torch.float64)[:, None, None]

    def forward(xb: Tensor) -> Tensor:  # (R, N, 64) or (N, 64) -> (R, N, 10)
        gamma, beta, w2, b2 = rest
        h = F.layer_norm(xb @ w.transpose(1, 2), (hidden,), eps=eps) * gamma + beta
        return torch.relu(h) @ w2.transpose(1, 2) + b2

    runs, n = len(seeds), len(x)
    gens = {s: seeding.generator(s) for s in set(seeds)}
    perms = {s: torch.randperm(n, generator=g) for s, g in gens.items()}
    rec = {k: np.empty((runs, steps)) for k in ("norm", "grad_norm", "cos", "loss", "turn")}
    pos = 0
    for t in range(steps):
        if pos + batch > n:  # every run reshuffles at the same step: same batch size
            perms, pos = {s: torch.randperm(n, generator=g) for s, g in gens.items()}, 0
        idx = torch.stack([perms[s][pos : pos + batch] for s in seeds])  # (R, B)
        pos += batch
        logits = forward(x[idx])
        loss = F.cross_entropy(logits.reshape(-1, 10), y[idx].reshape(-1), reduction="none")
        loss = loss.reshape(runs, batch).mean(1)  # (R,)
        for p in (w, *rest):
            p.grad = None
        loss.sum().backward()
        with torch.no_grad():
            wn, gn = w.norm(dim=(1, 2)), w.grad.norm(dim=(1, 2))
            rec["norm"][:, t], rec["grad_norm"][:, t] = wn.numpy(), gn.numpy()
            rec["loss"][:, t] = loss.numpy()
            rec["cos"][:, t] = ((w * w.grad).sum((1, 2)) / (wn * gn)).numpy()
            before = w / wn[:, None, None]
            w.sub_(lr * (w.grad + decay * w))
            for p in rest:
                p.sub_(lr * p.grad)
            # The angle from the chord between unit vectors: accurate for small turns, where
            # arccos of a cosine near 1 loses half the digits.
            chord = (w / w.norm(dim=(1, 2))[:, None, None] - before).norm(dim=(1, 2))
            rec["turn"][:, t] = 2 * np.arcsin(np.minimum(chord.numpy() / 2, 1.0))
    with torch.no_grad():
        final = w.norm(dim=(1, 2)).numpy()
        pred = forward(data.x_test.double()[None]).argmax(-1)  # (R, N_test)
        acc = (pred == data.y_test).double().mean(1).numpy()
    out = []
    for r, wd in enumerate(wds):
        one = {k: v[r].copy() for k, v in rec.items()}
        after = np.append(one["norm"][1:], final[r]) ** 2
        predicted = (1 - lr * wd) ** 2 * one["norm"] ** 2 + lr**2 * one["grad_norm"] ** 2
        out.append(
            {
                **one,
                "c": one["norm"] * one["grad_norm"],
                "eff_lr": lr / one["norm"] ** 2,
                "final_norm": float(final[r]),
                "test_acc": float(acc[r]),
                "step_residual": float(np.max(np.abs(after - predicted) / after)),
                "lr": lr,
                "wd": wd,
                "steps": steps,
            }
        )
    return tuple(out)


def relaxation_steps(lr: float, wd: float) -> float:
    """1/(4ηλ): the number of steps in which a deviation of ‖W‖² from its equilibrium shrinks
    by a factor e (the recursion's slope at its fixed point is ≈ 1 − 4ηλ)."""
    return 1.0 / (4 * lr * wd)


def quarter_gaps(run: dict, start: int) -> tuple[np.ndarray, np.ndarray]:
    """The settling test of a decay run over steps ``start`` to the end, cut in four quarters.

    Returns ``(same, lagged)``: ``same[q]`` = mean ‖W‖ over quarter q / the equilibrium of
    that quarter's rms c − 1 (4,), which a norm still catching up with c fails when a quarter
    is short next to the relaxation time 1/(4ηλ); ``lagged[q]`` = mean ‖W‖ over quarter q + 1
    against the equilibrium of quarter q's c (3,): c measured on other steps than the norm.
    """
    lr, wd = run["lr"], run["wd"]
    edges = np.linspace(start, len(run["norm"]), 5).astype(int)
    quarters = [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    eq = np.array([equilibrium_norm(lr, wd, np.sqrt(np.mean(run["c"][q] ** 2))) for q in quarters])
    norm = np.array([np.mean(run["norm"][q]) for q in quarters])
    return norm / eq - 1, norm[1:] / eq[:-1] - 1


def window_stats(plain: dict, decay: dict, start: int) -> dict:
    """One seed's summary over steps ``start`` to the end of two :func:`train` runs (same
    seed and length, without and with decay).

    Keys: ``c_rms`` (root mean square of the decay run's c, which takes c's place in the
    equilibrium), ``measured`` (its mean ‖W‖), ``predicted`` and ``predicted_first_order``
    (:func:`equilibrium_norm` of ``c_rms``), ``gap`` (measured / predicted − 1), ``turn``
    (``{"plain", "decay"}``: rms rotation per step, radians), ``eff_lr`` (the decay run's
    mean η/‖W‖²), ``c_median``, ``c_max``, ``c_near`` (share of the decay run's steps whose c
    lies within ±25% of its median), ``c_plain_early``/``c_plain`` (the plain run's rms c
    over the steps before ``start`` and over the window), ``loss`` (``{"plain", "decay"}``:
    mean training loss over the last two quarters of the run, ``(third, fourth)``),
    ``test_acc`` (``{"plain", "decay"}``), ``grew`` (the plain run's norm rose at every
    step), ``cos_max`` (largest |cos(W, g)| of either run), ``step_residual`` (the larger of the
    two runs'), ``norm_first`` (‖W‖ at step 0), ``plain_final`` (the plain run's last ‖W‖) and
    ``plain_eff_lr_fall`` (its η/‖W‖² at the first step over the last); ``quarters`` and
    ``lagged`` (:func:`quarter_gaps` of the decay run), ``worst_quarter`` (the largest
    |quarters|), ``drift`` (the decay run's mean ‖W‖ over the window's last quarter / its first
    − 1); ``c_ratio`` (rms c over the window, decay run / plain run) and ``eff_lr_ratio``
    (mean η/‖W‖² over the window, decay / plain): the two factors of the turn per step.
    """
    w = slice(start, None)
    lr, wd = decay["lr"], decay["wd"]
    c = decay["c"][w]
    c_rms = float(np.sqrt(np.mean(c**2)))
    predicted = equilibrium_norm(lr, wd, c_rms)
    measured = float(np.mean(decay["norm"][w]))
    median = float(np.median(c))
    same, lagged = quarter_gaps(decay, start)
    n = len(decay["loss"])
    q3, q4 = slice(n // 2, 3 * n // 4), slice(3 * n // 4, None)
    return {
        "c_rms": c_rms,
        "measured": measured,
        "predicted": predicted,
        "predicted_first_order": equilibrium_norm(lr, wd, c_rms, first_order=True),
        "gap": measured / predicted - 1,
        "turn": {
            k: float(np.sqrt(np.mean(r["turn"][w] ** 2)))
            for k, r in (("plain", plain), ("decay", decay))
        },
        "eff_lr": float(np.mean(decay["eff_lr"][w])),
        "c_median": median,
        "c_max": float(c.max()),
        "c_near": float(np.mean(np.abs(c / median - 1) <= 0.25)),
        "c_plain_early": float(np.sqrt(np.mean(plain["c"][:start] ** 2))),
        "c_plain": float(np.sqrt(np.mean(plain["c"][w] ** 2))),
        "loss": {
            k: (float(np.mean(r["loss"][q3])), float(np.mean(r["loss"][q4])))
            for k, r in (("plain", plain), ("decay", decay))
        },
        "test_acc": {"plain": plain["test_acc"], "decay": decay["test_acc"]},
        "cos_max": float(max(np.abs(plain["cos"]).max(), np.abs(decay["cos"]).max())),
        "step_residual": max(plain["step_residual"], decay["step_residual"]),
        "norm_first": float(plain["norm"][0]),
        "plain_final": plain["final_norm"],
        "plain_eff_lr_fall": float(plain["eff_lr"][0] / plain["eff_lr"][-1]),
        "grew": bool(np.all(np.diff(np.append(plain["norm"], plain["final_norm"])) > 0)),
        "quarters": same.tolist(),
        "lagged": lagged.tolist(),
        "worst_quarter": float(np.max(np.abs(same))),
        "drift": float(
            np.mean(decay["norm"][n - (n - start) // 4 :])
            / np.mean(decay["norm"][start : start + (n - start) // 4])
            - 1
        ),
        "c_ratio": float(c_rms / np.sqrt(np.mean(plain["c"][w] ** 2))),
        "eff_lr_ratio": float(np.mean(decay["eff_lr"][w]) / np.mean(plain["eff_lr"][w])),
    }


def runs(lr: float = 0.5, wd: float = 0.01, steps: int = STEPS, seeds: int = SEEDS) -> dict:
    """:func:`train` without (``"plain"``) and with (``"decay"``) weight decay on ``seeds``
    seeds, and the theory.

    The equilibrium window is the last three quarters of the run (from ``"tail_start"`` =
    ``steps // 4``). ``"per_seed"``: one :func:`window_stats` dict per seed, in seed order
    (``"seeds"``). ``"plain"`` and ``"decay"`` are the first seed's two runs (the figure's),
    and ``"c_rms"``, ``"measured"``, ``"predicted"``, ``"predicted_first_order"`` and
    ``"turn_rms"`` its window values; ``"angular_step"`` is √(2ηλ), the rotation per step at
    equilibrium (radians). ``"control"``: the same per-seed stats for runs with decay
    ``wd / CONTROL`` (``"control_wd"``; its own √(2ηλ) is ``"control_angular_step"``), the
    negative control of the settling test.
    """
    start = steps // 4
    seed_list = seeding.seeds(seeds)
    wds = (0.0,) * seeds + (wd,) * seeds + (wd / CONTROL,) * seeds
    both = train_many(lr, wds, steps, seeds=seed_list * 3)
    plain, decay, control = both[:seeds], both[seeds : 2 * seeds], both[2 * seeds :]
    pairs = list(zip(plain, decay, strict=True))
    per_seed = [window_stats(p, d, start) for p, d in pairs]
    first = per_seed[0]
    return {
        "plain": pairs[0][0],
        "decay": pairs[0][1],
        "lr": lr,
        "wd": wd,
        "steps": steps,
        "seeds": seed_list,
        "tail_start": start,
        "relaxation": relaxation_steps(lr, wd),
        "per_seed": per_seed,
        "c_rms": first["c_rms"],
        "measured": first["measured"],
        "predicted": first["predicted"],
        "predicted_first_order": first["predicted_first_order"],
        "angular_step": float(np.sqrt(2 * lr * wd)),
        "turn_rms": first["turn"],
        "control_wd": wd / CONTROL,
        "control_angular_step": float(np.sqrt(2 * lr * wd / CONTROL)),
        "control": [window_stats(p, k, start) for p, k in zip(plain, control, strict=True)],
    }
