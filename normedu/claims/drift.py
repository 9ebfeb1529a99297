"""Claims of chapter 1 (activation drift), checked with the chapter's cached experiments.

One function per claim (or per group of claims measured together); :func:`check` runs them in
the chapter's order. The experiments are imported inside the functions: registering the checks
(importing this module) must not import torch.
"""

from __future__ import annotations

import math

import numpy as np

from .. import seeding
from ..claim import Claim, claims_for, measured_on, verdict, verdict_by_parts, verdict_within

CH = "drift"
#: Claims this course states itself (no paper behind them) are attributed to the chapter.
COURSE = "this course, chapter 'Activation drift'"
#: The seeds of the chapter's multi-seed verdicts: every run costs well under 2 CPU-s, so five.
SEEDS = seeding.seeds(5)
#: How far (nats) an untrained classifier's loss may sit from ln C, on every seed, to count as
#: the uniform softmax's: 2% of ln 10, against several nats for a confidently wrong network.
INIT_LOSS_TOL = 0.05


@claims_for(CH)
def check() -> list[Claim]:
    from ..experiments import drift as D

    out = compounding()
    dev = measured_on()
    out += [relu_gain(dev), tanh_gain(), tanh_unit_variance(dev)]
    out += [initial_loss(dev), bounded(dev)]
    conv = D.convergence()  # one training run per setting, shared with the page
    out += [smoother(conv, dev), faster(dev), fragile(dev)]
    return out + [hundreds(), internal_covariate_shift()]


def compounding() -> list[Claim]:
    """drift.1.05^50, drift.1.05^100, drift.0.95^100: powers of a per-layer gain."""
    from ..experiments import drift as D

    comp = D.compounding(gains=(1.05, 0.95), depths=(50, 100))
    return [
        Claim(
            id=cid,
            chapter=CH,
            claim=f"{g}^{L} ≈ {expected:g}",
            source=COURSE,
            measured=f"{comp[(g, L)]:.4g}",
            verdict=verdict_within(comp[(g, L)], expected, 0.02),
        )
        for (g, L), expected, cid in (
            ((1.05, 50), 11.5, "drift.1.05^50"),
            ((1.05, 100), 132.0, "drift.1.05^100"),
            ((0.95, 100), 0.006, "drift.0.95^100"),
        )
    ]


def relu_gain(dev: str) -> Claim:
    from ..experiments import drift as D

    relu = {g: D.preactivation_std_profile("relu", g)[-1] for g in (1.0, math.sqrt(2), 2.0)}
    ok = 0.5 < relu[math.sqrt(2)] < 2 and relu[1.0] < 1e-3 and relu[2.0] > 1e3
    return Claim(
        id="drift.relu_gain",
        chapter=CH,
        claim="Weights with std √2/√fan_in keep the activation variance of a ReLU network "
        "constant with depth",
        source="He et al., ICCV 2015",
        measured="50-layer ReLU net, no norm, std of layer 50: "
        + ", ".join(f"gain {g:.3g}: {v:.3g}" for g, v in relu.items()),
        verdict=verdict(ok),
        device=dev,
        extra={"cite": ["he2015delving"]},
    )


def tanh_gain() -> Claim:
    """What torch.nn.init.calculate_gain returns for tanh."""
    import torch

    gain = torch.nn.init.calculate_gain("tanh")
    return Claim(
        id="drift.tanh_gain",
        chapter=CH,
        claim="torch.nn.init.calculate_gain('tanh') is 5/3",
        source="PyTorch documentation, torch.nn.init",
        measured=f"calculate_gain('tanh') = {gain:.6f}; 5/3 = {5 / 3:.6f}",
        verdict=verdict(abs(gain - 5 / 3) < 1e-12),
        device=f"torch {torch.__version__}",
        extra={"cite": ["pytorch_init"]},
    )


def tanh_unit_variance(dev: str) -> Claim:
    """Whether 5/3 is the variance-preserving tanh gain: the gain that keeps unit variance,
    two ways, and the scale a deep tanh stack at 5/3 settles at (the page's experiment)."""
    import torch

    from ..experiments import drift as D

    vp = 1 / math.sqrt(D.tanh_second_moment(1.0))  # Gauss-Hermite quadrature
    # An independent check of the quadrature: a seeded Monte Carlo estimate in float64.
    z = torch.randn(1_000_000, generator=seeding.generator(0), dtype=torch.float64)
    vp_mc = 1 / math.sqrt(float(torch.tanh(z).pow(2).mean()))
    q = 1.0
    for _ in range(200):  # the variance map q -> g² E[tanh(√q z)²] at g = 5/3, to its fixed point
        q = (5 / 3) ** 2 * D.tanh_second_moment(q)
    std = {g: D.preactivation_std_profile("tanh", g)[-1] for g in (5 / 3, vp)}
    keeps_unit = abs(vp - 5 / 3) < 0.01 and abs(std[5 / 3] - 1) < 0.02
    return Claim(
        id="drift.tanh_unit_variance",
        chapter=CH,
        claim="The tanh gain 5/3 preserves unit variance from layer to layer",
        source=f"{COURSE}; a common reading of the gain that PyTorch's documentation gives "
        "without a derivation",
        measured=f"variance preservation for unit-variance inputs needs 1/√E[tanh(z)²] = "
        f"{vp:.4f} (quadrature; {vp_mc:.4f} from 10⁶ seeded samples), not 5/3 = {5 / 3:.4f}; "
        f"at 5/3 the variance map settles at std {math.sqrt(q):.4f}, and a 50-layer tanh net "
        f"measures std {std[5 / 3]:.3f} at layer 50 ({std[vp]:.3f} with gain {vp:.3f})",
        verdict=verdict(keeps_unit),
        device=dev,
        note="5/3 is a heuristic: it keeps the scale stable, "
        f"{100 * (math.sqrt(q) - 1):.0f}% above unit standard deviation",
        extra={"cite": ["pytorch_init"]},
    )


def initial_losses() -> list[float]:
    """The untrained 20-layer ReLU MLP's loss on the digits, one network per seed of
    :data:`SEEDS` (output-layer gain 0.1, the MLPs' default)."""
    from ..experiments import drift as D

    return [D.initial_loss("none", "relu", seed=s) for s in SEEDS]


def initial_loss(dev: str) -> Claim:
    losses = initial_losses()
    worst = max(abs(v - math.log(10)) for v in losses)
    return Claim(
        id="drift.initial_loss",
        chapter=CH,
        claim="At initialization a classifier's loss should be -log(1/C) (uniform softmax)",
        source="Karpathy, makemore part 3 (2022)",
        measured=f"20-layer ReLU MLP, 10 classes, {len(losses)} seeds: "
        + ", ".join(f"{v:.4f}" for v in losses)
        + f" vs -log(1/10) = {math.log(10):.4f}; every seed within {INIT_LOSS_TOL} nats "
        f"(largest gap {worst:.4f})",
        verdict=verdict(worst <= INIT_LOSS_TOL),
        device=dev,
        per_seed={"initial loss": losses},
        extra={"cite": ["karpathy2022makemore"]},
    )


def bounded(dev: str) -> Claim:
    """The norm layers' own outputs (not the tanh after them), at the sweep's extreme gains."""
    from ..experiments import drift as D

    rows = D.init_gain_sweep()
    gains = (min(r["gain"] for r in rows), max(r["gain"] for r in rows))
    recs = [s for g in gains for s in D.norm_output_stats("batchnorm", g)]
    mean = max(abs(s.act_mean) for s in recs)
    stds = [s.act_std for s in recs]
    no = [r["last_std"] for r in rows if r["norm"] == "none"]
    # BatchNorm divides by sqrt(var + eps): its output std is just below 1, not exactly 1.
    ok = mean < 1e-3 and max(abs(v - 1) for v in stds) < 0.01
    return Claim(
        id="drift.bounded",
        chapter=CH,
        claim="Normalized activations keep ~zero mean and unit variance whatever the "
        "preceding layers do (bounded activations)",
        source=COURSE,
        measured=f"outputs of the {len(recs) // len(gains)} BatchNorm layers of a deep tanh MLP "
        f"at init gains {gains[0]:g} and {gains[1]:g}: |mean| at most {mean:.1g}, std "
        f"{min(stds):.5f}-{max(stds):.5f}; without a norm the last layer's std ranges "
        f"{min(no):.2g}-{max(no):.2g} over gains {gains[0]:g}-{gains[1]:g}",
        verdict=verdict(ok),
        device=dev,
    )


def smoother(conv: dict, dev: str) -> Claim:
    """``conv``: :func:`normedu.experiments.drift.convergence`'s runs."""
    med = {
        k: (
            float(np.median([p["loss_range"] for p in r.probes])),
            float(np.median([p["grad_lipschitz"] for p in r.probes])),
        )
        for k, r in conv.items()
    }
    smoother = []
    for act in ("tanh", "relu"):
        lr_bn, gl_bn = med[(act, "batchnorm")]
        lr_no, gl_no = med[(act, "none")]
        smoother.append(lr_bn < lr_no)
        smoother.append(gl_bn < gl_no)
    found = verdict_by_parts(smoother)
    measured = "; ".join(
        f"{a}: loss range {med[(a, 'none')][0]:.2g} → {med[(a, 'batchnorm')][0]:.2g}, "
        f"grad-change ratio {med[(a, 'none')][1]:.3g} → {med[(a, 'batchnorm')][1]:.3g}"
        for a in ("tanh", "relu")
    )
    return Claim(
        id="drift.smoother",
        quote=(
            "it makes the optimization landscape significantly smoother. This smoothness induces "
            "a more predictive and stable behavior of the gradients, allowing for faster "
            "training."
        ),
        quote_where="abstract (NeurIPS 2018; arXiv:1805.11604)",
        chapter=CH,
        claim="Normalization smooths the loss landscape (gradients change less along a step)",
        source="Santurkar et al., NeurIPS 2018",
        extra={"cite": ["santurkar2018how"]},
        measured=f"median over probes, no norm → BatchNorm: {measured}",
        verdict=found,
        device=dev,
        note="" if found == "confirmed" else "only part of the measures agree on this small net",
    )


def final_losses() -> dict[tuple[str, str], list[float]]:
    """``{(act, norm): [final loss per seed]}``: the 20-layer digits MLP at learning rate 0.1,
    without a norm and with BatchNorm, the seeds of :data:`SEEDS` trained side by side
    (:mod:`normedu.experiments.drift_stack`); final loss = the loss on the whole training set
    after the last step."""
    from ..experiments import drift_stack as S

    return {
        (a, n): S.final_losses(n, a, 0.1, SEEDS) for a in ("tanh", "relu") for n in FASTER_NORMS
    }


def still_falling() -> bool:
    """Whether every run of :func:`final_losses` was still improving at the end: its mean loss
    over the last 20 steps below that over the 20 before."""
    from ..experiments import drift_stack as S

    runs = [
        S.train_seeds(n, a, 0.1, None, SEEDS)[0] for a in ("tanh", "relu") for n in FASTER_NORMS
    ]
    return all(bool((r[:, -20:].mean(1) < r[:, -40:-20].mean(1)).all()) for r in runs)


#: The two networks of the "trains faster" comparison.
FASTER_NORMS = ("none", "batchnorm")


def faster_comparisons(final: dict) -> dict[str, seeding.SeedComparison]:
    """Per activation, the rule's comparison of the log final losses, no norm minus BatchNorm
    (positive: BatchNorm's is lower), paired by seed; ``final``: :func:`final_losses`."""
    return {
        a: seeding.compare(np.log(final[(a, "none")]), np.log(final[(a, "batchnorm")]))
        for a in ("tanh", "relu")
    }


def faster_words(final: dict) -> str:
    """The verdict on "BatchNorm trains faster", per activation, in the rule's words."""
    comp = faster_comparisons(final)
    return "; ".join(
        f"with {a}, " + comp[a].words("BatchNorm's final loss is lower", "BatchNorm's is higher")
        for a in ("tanh", "relu")
    )


def faster(dev: str) -> Claim:
    from ..device import choose
    from ..experiments import drift as D

    final = final_losses()
    comp = faster_comparisons(final)
    ok = all(c.clear and c.sign > 0 for c in comp.values())
    steps = choose(D.SIZES).steps
    return Claim(
        id="drift.faster",
        chapter=CH,
        claim="Networks with normalization train faster (lower loss after the same steps)",
        source=COURSE,
        measured=f"20-layer digits MLP, plain SGD at lr 0.1, {len(SEEDS)} seeds, loss on the "
        f"whole training set after {steps} steps: "
        + ", ".join(
            f"{a}: {np.mean(final[(a, 'none')]):.3f} without, "
            f"{np.mean(final[(a, 'batchnorm')]):.3f} with BatchNorm (means)"
            for a in ("tanh", "relu")
        )
        + "; "
        + faster_words(final),
        verdict=verdict(ok),
        device=dev,
        per_seed={f"{a}, {n}": final[(a, n)] for a in ("tanh", "relu") for n in FASTER_NORMS},
        note=f"after {steps} steps"
        + (", the losses still falling" if still_falling() else "")
        + "; the tanh networks start at PyTorch's gain 5/3, the ReLU ones at √2",
    )


def gradient_spans() -> dict[str, list[float]]:
    """Per seed of :data:`SEEDS`, how many-fold the gradient norm changes from the last hidden
    layer of the 50-layer tanh MLP at initialization back to the first (>1: grows): the plain
    network at the gain 5/3 and the normalized ones at gain 3 (keys ``"plain, gain 5/3"``,
    ``"BatchNorm"``, ``"LayerNorm"``)."""
    from ..experiments import drift as D

    def span(norm: str, gain: float, s: int) -> float:
        # Seed 0 spelled as the page spells it, so that its cached network is reused.
        rec = D.init_stats(norm, "tanh", gain) if s == 0 else D.init_stats(norm, "tanh", gain, s)
        return rec[0].grad_norm / rec[-1].grad_norm

    return {
        "plain, gain 5/3": [span("none", 5 / 3, s) for s in SEEDS],
        "BatchNorm": [span("batchnorm", 3.0, s) for s in SEEDS],
        "LayerNorm": [span("layernorm", 3.0, s) for s in SEEDS],
    }


def flatter_than_plain(spans: dict) -> dict[str, seeding.SeedComparison]:
    """Per norm, the rule's comparison of |log span| against the plain gain-5/3 network's
    (negative: the normalized profile is flatter), paired by seed; ``spans``:
    :func:`gradient_spans`."""
    plain = np.abs(np.log(spans["plain, gain 5/3"]))
    return {n: seeding.compare(np.abs(np.log(spans[n])), plain) for n in ("BatchNorm", "LayerNorm")}


def flatter_words(spans: dict) -> str:
    """ "flatter only with LayerNorm", "flatter with both", ...: the norms whose gradient profile
    the rule finds flatter than the plain gain-5/3 network's, in words."""
    comp = flatter_than_plain(spans)
    flatter = [n for n, c in comp.items() if c.clear and c.sign < 0]
    if not flatter:
        return "no flatter with either norm"
    return f"flatter only with {flatter[0]}" if len(flatter) == 1 else "flatter with both"


def fragile(dev: str) -> Claim:
    from ..device import choose
    from ..experiments import drift as D

    depth = choose(D.SIZES).train_depth
    frag = {r["setting"]: r for r in D.fragility()}
    hi_none = frag["no norm, Kaiming gain, lr 1.0"]
    hi_bn = frag["BatchNorm, gain 1, lr 1.0"]
    small = frag["no norm, gain 1 (too small), lr 0.1"]
    # "trains": not diverged and well above chance (10%); "near chance": below 20%
    trains = not hi_bn["diverged"] and hi_bn["test_acc"] > 0.5
    ok = hi_none["diverged"] and trains and small["test_acc"] < 0.2
    return Claim(
        id="drift.fragile",
        chapter=CH,
        claim=f"In a {depth}-layer ReLU MLP trained with plain SGD, the un-normalized net "
        "diverges at learning rate 1.0 with Kaiming init and stays near chance accuracy with "
        "gain 1 at learning rate 0.1, while BatchNorm trains at learning rate 1.0 with gain 1",
        source=COURSE,
        measured=f"{depth}-layer ReLU MLP on digits: lr 1.0 without a norm diverged="
        f"{hi_none['diverged']}, with BatchNorm test acc {hi_bn['test_acc']:.0%}; gain 1 "
        f"without a norm: test acc {small['test_acc']:.0%} (chance 10%)",
        verdict=verdict(ok),
        device=dev,
        note="one run per setting; other initializations, optimizers and schedules untried",
    )


def hundreds() -> Claim:
    return Claim(
        id="drift.hundreds",
        chapter=CH,
        claim="With normalization, hundreds of layers train with standard hyperparameters",
        source="He et al., ECCV 2016 (1001-layer pre-activation ResNet with BatchNorm)",
        extra={"cite": ["he2016identity"]},
        measured="not measured at that depth; this page trains 20 layers",
        verdict="cited",
        device="n/a",
    )


def internal_covariate_shift() -> Claim:
    return Claim(
        id="drift.ics",
        quote=(
            "Training Deep Neural Networks is complicated by the fact that the distribution of "
            "each layer's inputs changes during training, as the parameters of the previous "
            "layers change."
        ),
        quote_where="Ioffe & Szegedy, abstract (arXiv:1502.03167)",
        chapter=CH,
        claim="'Internal covariate shift' names the change of each layer's input distribution "
        "during training",
        source="Ioffe & Szegedy, ICML 2015; critique: Santurkar et al., NeurIPS 2018",
        extra={"cite": ["ioffe2015batch", "santurkar2018how"]},
        measured="terminology, not a measurement",
        verdict="cited",
        device="n/a",
    )
