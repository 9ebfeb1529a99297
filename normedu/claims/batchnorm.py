"""Claims of chapter 2 (BatchNorm), checked with the chapter's cached experiments.

One function per claim; :func:`check` runs them in the chapter's order. The experiments and
torch are imported inside the functions: registering the checks must not import torch.
"""

from __future__ import annotations

import math

from .. import seeding
from ..claim import Claim, claims_for, measured_on, verdict
from ..conventions import DEFAULT_EPS

CH = "batchnorm"
#: Claims this course states itself (no paper behind them) are attributed to the chapter.
NOTES = "this course, chapter 'Batch Normalization'"
ARTICLE = NOTES


@claims_for(CH)
def check() -> list[Claim]:
    dev = measured_on()
    out = [formula(), momentum(dev), eval_mode(dev), small_batch(dev), wu_he()]
    out += [shift(dev), padding(dev), online(dev), syncbn(), autoregressive(dev)]
    out += [params(), cnn_batches(), enabled(), backward_compact(), bias_redundant()]
    out += [keras_momentum(), calibration(dev), regularization()]
    return out + [two_per_process(dev), init_gradient_growth(), cnn_position(dev)]


def formula() -> Claim:
    """Per-feature mean and biased variance over the batch, checked against torch."""
    import numpy as np
    import torch

    from .. import functional as Fn

    rng = seeding.rng(0)
    x = rng.normal(2.0, 3.0, size=(32, 16))
    ours, _, _ = Fn.batch_norm(x)
    ref = torch.nn.functional.batch_norm(torch.tensor(x), None, None, training=True).numpy()
    err = float(np.abs(ours - ref).max())
    return Claim(
        id="bn.formula",
        chapter=CH,
        claim="BN normalizes each feature with the batch mean and the biased (1/B) batch variance",
        source=NOTES,
        measured=f"max |ours - torch.nn.functional.batch_norm| = {err:.1e} on (32, 16)",
        verdict=verdict(err < 1e-10),
        device="CPU, float64",
    )


def momentum(dev: str) -> Claim:
    from ..experiments import batchnorm as B

    tr = B.running_average_trace()
    return Claim(
        id="bn.momentum",
        chapter=CH,
        claim="Running averages: 0.9 * old + 0.1 * batch statistic (PyTorch: momentum=0.1 "
        "on the new value)",
        source=NOTES,
        measured=f"our BatchNorm1d vs torch.nn.BatchNorm1d buffers after 60 batches: "
        f"max diff {tr['torch_max_diff']:.1e}",
        verdict=verdict(tr["torch_max_diff"] < 1e-5),
        device=dev,
    )


def eval_mode(dev: str) -> Claim:
    from ..experiments import batchnorm as B

    ev = B.eval_mode_demo()
    ok = ev["eval_batch1"] == ev["eval_full"] and ev["train_batch1"] < ev["eval_full"]
    return Claim(
        id="bn.eval",
        chapter=CH,
        claim="model.eval() matters: it switches BN to the running statistics",
        source=NOTES,
        measured=f"digits CNN test acc: eval mode {ev['eval_full']:.1%} (batch 1 too: "
        f"{ev['eval_batch1']:.1%}); left in training mode: {ev['train_batch1']:.1%} at "
        "batch 1, "
        f"{ev['train_sorted8']:.1%} on digit-sorted batches of 8",
        verdict=verdict(ok),
        device=dev,
    )


def small_batch(dev: str) -> Claim:
    from ..experiments import batchnorm as B

    sw = B.batch_size_sweep()
    bsz = sw["batch_sizes"]
    bn2, bn32 = sw["batchnorm"][bsz.index(2)], sw["batchnorm"][bsz.index(32)]
    ln2, gn2 = sw["layernorm"][bsz.index(2)], sw["groupnorm"][bsz.index(2)]
    ok = bn2 > 2 * bn32 and bn2 > 2 * max(ln2, gn2)
    return Claim(
        id="bn.small_batch",
        chapter=CH,
        claim="BN breaks at small batches (< 8): batch statistics are noisy, accuracy drops",
        source=NOTES + "; interview question Q1",
        measured=f"digits MLP test error: BN {bn2:.1%} at batch 2 vs "
        f"{bn32:.1%} at 32; at batch 2 GroupNorm {gn2:.1%}, LayerNorm {ln2:.1%}",
        verdict=verdict(ok),
        device=dev,
    )


def wu_he() -> Claim:
    return Claim(
        id="bn.wu_he",
        chapter=CH,
        claim="ResNet-50 on ImageNet: BN 23.6% top-1 error at 32 images/GPU vs 34.7% at 2",
        source="Wu & He, 'Group Normalization', ECCV 2018",
        extra={"cite": ["wu2018group"]},
        measured="not re-run (90-epoch ImageNet training)",
        verdict="cited",
        device="n/a",
    )


def shift(dev: str) -> Claim:
    from ..experiments import batchnorm as B

    sh = B.distribution_shift()
    ok = sh["bn_shift"] < sh["bn_clean"] - 0.1 and sh["bn_recalibrated"] > sh["bn_shift"] + 0.1
    return Claim(
        id="bn.shift",
        chapter=CH,
        claim="Train/inference distribution shift: silent accuracy drop (running averages "
        "do not match the data)",
        source=NOTES,
        measured=f"test acc {sh['bn_clean']:.1%} → {sh['bn_shift']:.1%} under a "
        "contrast/brightness "
        f"shift; {sh['bn_recalibrated']:.1%} after re-estimating BN statistics on shifted data",
        verdict=verdict(ok),
        device=dev,
        note="LayerNorm is not immune to an input shift either: "
        f"{sh['ln_clean']:.1%} → {sh['ln_shift']:.1%}",
    )


def padding(dev: str) -> Claim:
    from ..experiments import batchnorm as B

    pad = B.padding_demo()
    return Claim(
        id="bn.padding",
        chapter=CH,
        claim="Variable-length sequences: BN's statistics (and outputs) depend on the other "
        "sequences and their padding",
        source=NOTES,
        measured="same sequence, different batchmates: max output change "
        f"{pad['bn_max_diff']:.3f} "
        f"(BN), {pad['masked_bn_max_diff']:.3f} (BN with pads masked), "
        f"{pad['ln_max_diff']:.1e} (LN)",
        verdict=verdict(pad["bn_max_diff"] > 1e-3 and pad["ln_max_diff"] == 0),
        device=dev,
    )


def online(dev: str) -> Claim:
    from ..experiments import batchnorm as B

    on = B.online_demo()
    return Claim(
        id="bn.online",
        chapter=CH,
        claim="Online learning / RL with batch size 1: BN cannot compute batch statistics",
        source=NOTES,
        measured=f"torch: '{on['bn_error']['torch']}'; a LayerNorm MLP trained one example "
        "at a "
        f"time reaches {on['ln_online_acc']:.1%} test acc",
        verdict=verdict("no error" not in on["bn_error"]["torch"]),
        device=dev,
    )


def syncbn() -> Claim:
    from ..experiments import batchnorm as B

    sy = B.syncbn_simulation()
    i2 = sy["per_device"].index(2)
    theory = B.expected_local_var_ratio(2)
    ok = abs(sy["local_var_ratio"][i2] - theory) < 0.05 and sy["sync_max_diff"] < 1e-9
    return Claim(
        id="bn.syncbn",
        chapter=CH,
        claim="Local BN uses per-GPU statistics (biased for small per-GPU batches); SyncBN "
        "all-reduces "
        "them (correct, one extra communication)",
        source=NOTES + ", Parallelizability",
        measured=f"per-device batch 2: local variance is "
        f"{sy['local_var_ratio'][i2]:.3f} × the true one (theory {theory:g}); SyncBN statistics "
        "equal the "
        f"global batch's to {sy['sync_max_diff']:.0e}",
        verdict=verdict(ok),
        device="CPU, float64 simulation",
    )


def autoregressive(dev: str) -> Claim:
    from ..experiments import batchnorm as B

    leak = B.causal_leak_demo()
    return Claim(
        id="bn.autoregressive",
        chapter=CH,
        claim="BN does not fit autoregressive Transformers (batch statistics mix positions "
        "and samples)",
        source=ARTICLE,
        measured="changing the last token changes position 0's BN output by "
        f"{leak['bn_change']:.3f}; "
        f"LN: {leak['ln_change']:.1e}",
        verdict=verdict(leak["bn_change"] > 1e-3 and leak["ln_change"] == 0),
        device=dev,
    )


def params() -> Claim:
    import torch

    bn = torch.nn.BatchNorm1d(64)
    n_par = sum(p.numel() for p in bn.parameters())
    n_buf = sum(b.numel() for n, b in bn.named_buffers() if n.startswith("running"))
    return Claim(
        id="bn.params",
        chapter=CH,
        claim="BatchNorm has 2C parameters + 2C buffers",
        source=NOTES,
        measured=f"torch.nn.BatchNorm1d(64): {n_par} parameters, "
        f"{n_buf} running buffers (+1 step counter)",
        verdict=verdict(n_par == 128 and n_buf == 128),
        device="torch",
    )


def cnn_batches() -> Claim:
    return Claim(
        id="bn.cnn_batches",
        chapter=CH,
        claim="Image training uses batches of 32-128+ and fixed resolutions (224×224, 299×299)",
        source="299×299: Szegedy et al., CVPR 2016 (Inception-v3)",
        measured="not measured: common practice",
        verdict="cited",
        device="n/a",
    )


def enabled() -> Claim:
    return Claim(
        id="bn.enabled",
        chapter=CH,
        claim="BatchNorm (Ioffe & Szegedy 2015) made deep CNNs practical: Inception-v2, ResNet",
        source="Ioffe & Szegedy, ICML 2015 (BN-Inception); He et al., CVPR 2016 (ResNet)",
        extra={"cite": ["ioffe2015batch", "he2016deep"]},
        measured="history, not a measurement",
        verdict="cited",
        device="n/a",
    )


# --------------------------------------------------------------------------- derivation, practice


def backward_compact() -> Claim:
    """The compact backward formula against torch autograd (random upstream gradient)."""
    import numpy as np
    import torch

    rng = seeding.rng(0)
    x, dout = rng.normal(1.0, 2.0, size=(16, 6)), rng.normal(size=(16, 6))
    gamma = rng.normal(size=6)
    xt = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.batch_norm(xt, None, None, torch.tensor(gamma), None, training=True)
    y.backward(torch.tensor(dout))
    mu, var = x.mean(0), x.var(0)
    istd = 1 / np.sqrt(var + DEFAULT_EPS)  # torch's batch_norm default, as called above
    xhat = (x - mu) * istd
    dx = gamma * istd * (dout - dout.mean(0) - xhat * (dout * xhat).mean(0))
    err = float(np.abs(dx - xt.grad.numpy()).max())
    return Claim(
        id="bn.backward_compact",
        chapter=CH,
        claim="dx = (γ/σ)(dout − mean(dout) − x̂·mean(dout·x̂)), means over the batch",
        source="Ioffe & Szegedy, ICML 2015 (backward pass); simplified in this chapter",
        measured=f"max |error| vs torch autograd, random upstream gradient: {err:.1e}",
        verdict=verdict(err < 1e-10),
        device="float64",
        extra={"cite": ["ioffe2015batch"]},
    )


def bias_redundant() -> Claim:
    import torch

    seeding.manual_seed(0)
    lin, bn = torch.nn.Linear(8, 4).double(), torch.nn.BatchNorm1d(4).double()
    inp = torch.randn(32, 8, dtype=torch.float64)
    o = bn(lin(inp))
    (o * torch.randn_like(o)).sum().backward()
    with torch.no_grad():
        lin.bias += 5.0
        change = float((bn(lin(inp)) - o).abs().max())
    grad = float(lin.bias.grad.abs().max())
    return Claim(
        id="bn.bias_redundant",
        chapter=CH,
        claim="The bias of a layer followed by BatchNorm is redundant",
        source=NOTES,
        measured=f"bias gradient {grad:.1e}; output change after bias += 5: {change:.1e}",
        verdict=verdict(grad < 1e-12 and change < 1e-12),
        device="float64",
    )


def keras_momentum() -> Claim:
    return Claim(
        id="bn.keras_momentum",
        chapter=CH,
        claim="Keras's BatchNormalization momentum 0.99 weighs the old value; it equals "
        "PyTorch momentum 0.01, not PyTorch's default 0.1",
        source="Keras API reference, BatchNormalization; PyTorch documentation, BatchNorm1d",
        measured="the chapter runs both update formulas on one stream of batch means",
        verdict="cited",
        device="n/a",
        extra={"cite": ["keras_batchnorm", "pytorch_batchnorm1d"]},
    )


def calibration(dev: str) -> Claim:
    from ..experiments import batchnorm as B

    cal = {r["momentum"]: r for r in B.calibration_demo()}
    hi = cal[max(cal)]
    return Claim(
        id="bn.calibration",
        chapter=CH,
        claim="Re-estimating BatchNorm's statistics after training (precise BN) improves "
        "on running averages that training estimated poorly",
        source="Wu & Johnson, 2021",
        measured=f"batch 4, BN momentum {max(cal):g}: test error "
        f"{hi['error_running']:.1%} → {hi['error_calibrated']:.1%} after calibration",
        verdict=verdict(hi["error_calibrated"] < hi["error_running"], otherwise="depends"),
        device=dev,
        extra={"cite": ["wu2021rethinking"]},
    )


def regularization() -> Claim:
    return Claim(
        id="bn.regularization",
        chapter=CH,
        claim="The noise of batch statistics acts as a mild regularizer",
        source="Luo et al., ICLR 2019",
        measured="not measured on this page",
        verdict="cited",
        device="n/a",
        extra={"cite": ["luo2019towards"]},
    )


def two_per_process(dev: str) -> Claim:
    """m = 2: x̂ = ±d/sqrt(d² + eps), checked inside the replay of the DDP table's local row."""
    from ..experiments import syncbn as S

    rep = S.local_bn_replica(2, 2)
    # |x̂| = 1/sqrt(1 + ε/d²) is within 1e-3 of 1 once |d| exceeds this; z₁ − z₂ = 2d.
    gap = 2 * math.sqrt(DEFAULT_EPS / ((1 / (1 - 1e-3)) ** 2 - 1))
    # The formula holds for any inputs; what can fail is that most values sit at ±1 in
    # training mode (samples that rarely nearly tie) and almost none do in eval mode.
    ok = (
        rep["max_formula_error"] < 1e-9
        and min(rep["pm1_train"]) > 0.8
        and max(rep["pm1_eval"]) < 0.01
    )
    return Claim(
        id="bn.two_per_process",
        chapter=CH,
        claim="With 2 samples per process, local BN normalizes each feature to ±d/√(d²+ε), "
        f"within 10⁻³ of ±1 whenever the two samples differ by more than {gap:.2f} (most "
        "values here): the layer passes on little more than the sign of their difference",
        source=NOTES + ", SyncBN section",
        measured=f"replay of the DDP run (test error {rep['error']:.1%}): "
        + ", ".join(f"{v:.0%}" for v in rep["pm1_train"])
        + " of x̂ within 1e-3 of ±1 per BN layer, all equal to ±d/√(d²+ε) to "
        f"{rep['max_formula_error']:.0e}; in eval mode {max(rep['pm1_eval']):.2%}; test error "
        f"in training mode on pairs {rep['error_train_mode']:.1%}",
        verdict=verdict(ok),
        device=dev,
    )


def init_gradient_growth() -> Claim:
    from ..experiments import bn_init as I

    g = I.growth_with_depth()
    bn, none = g["rate"]["batchnorm"], g["rate"]["none"]
    return Claim(
        id="bn.init_gradient_growth",
        chapter=CH,
        claim="At initialization the gradients of a deep BatchNorm network grow exponentially "
        "toward the input (ReLU, He init: about ×sqrt(π/(π−1)) ≈ 1.21 per layer); without a "
        "norm, at the same initialization, they grow far more slowly (per-layer excess over 1 "
        "under a fifth of BatchNorm's)",
        source="Yang et al., ICLR 2019",
        measured=f"ReLU MLP, width {g['width']}, batch {g['batch']}, depths {g['depths']}: "
        f"first/last gradient-norm ratio grows ×{bn:.3f} per layer with BN, ×{none:.3f} "
        "without",
        # The page's rule: BN's excess over 1 at least 5 times the no-norm one (a bare
        # `none < 1.05` would call ×1.049 per layer, ×4.6 over 32 layers, "no growth").
        verdict=verdict(
            abs(bn - I.RELU_BN_RATE) < 0.25 * (I.RELU_BN_RATE - 1) and bn - 1 > 5 * abs(none - 1)
        ),
        device="CPU, float32",
        extra={"cite": ["yang2019mean", "luther2020batchnorm"]},
    )


def cnn_position(dev: str) -> Claim:
    """bn.cnn_position: BN before or after the ReLU in the digits CNN, over seeds."""
    from ..experiments import convnet as CN

    pc = CN.position_comparison()
    d = pc["after_minus_before"]
    mean = {k: sum(pc[k]) / len(pc[k]) for k in ("before", "after")}
    return Claim(
        id="bn.cnn_position",
        chapter=CH,
        claim="In a convolutional network, BN before the non-linearity (Ioffe & Szegedy's "
        f"placement) and after it show no difference in test error detectable with "
        f"{len(pc['seeds'])} seeds (|after − before| < 2 paired standard errors)",
        source=NOTES,
        measured=f"digits CNN, batch {pc['batch']}, {pc['epochs']} epochs, "
        f"{len(pc['seeds'])} seeds: test error {mean['before']:.1%} before, "
        f"{mean['after']:.1%} after (difference {d['diff']:+.1%} ± {d['se']:.1%}, paired "
        "over seeds)",
        verdict=verdict(not d["clear"]),
        device=dev,
    )
