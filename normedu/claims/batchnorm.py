"""Claims of chapter 2 (BatchNorm), checked with the chapter's cached experiments.

One function per claim; :func:`check` runs them in the chapter's order. The experiments and
torch are imported inside the functions: registering the checks must not import torch.
"""

from __future__ import annotations

from .. import seeding
from ..claim import Claim, cite, claims_for, measured_on, verdict
from ..conventions import DEFAULT_EPS
from . import batchnorm_training as T
from .batchnorm_training import CH, NOTES

ARTICLE = NOTES


@claims_for(CH)
def check() -> list[Claim]:
    dev = measured_on()
    out = [formula(), momentum(dev), T.eval_mode(dev), T.small_batch(dev), wu_he()]
    out += [T.shift(dev), padding(dev), online(dev), syncbn(), autoregressive(dev)]
    out += [params(), cnn_batches(), enabled(), backward_compact(), bias_redundant()]
    out += [keras_momentum(), population_stats(), T.calibration(dev), regularization()]
    out += [
        T.two_per_process(dev),
        T.ddp_local_vs_sync(dev),
        torch_syncbn_cpu(),
        T.seed_record(dev),
    ]
    return out + [init_gradient_growth(), T.cnn_position(dev)]


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
        quote="On ResNet-50 trained in ImageNet, GN has 10.6% lower error than its BN "
        "counterpart when using a batch size of 2",
        quote_where="Abstract (the two BN errors: Figure 1 and Table 2)",
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
        claim="Online learning / RL with batch size 1: a BN layer that gets one value per "
        "channel (one sample of shape (1, C)) cannot compute batch statistics in training mode",
        source=NOTES,
        measured=f"torch: '{on['bn_error']['torch']}'; a LayerNorm MLP trained one example "
        f"at a time reaches {on['ln_online_acc']:.1%} test acc",
        verdict=verdict("no error" not in on["bn_error"]["torch"]),
        device=dev,
        note="after a convolution one image brings H·W values per channel and BatchNorm2d "
        "runs (the chapter's CNN at batch 1)",
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
        "all-reduces them (the global batch's statistics, at the cost of three all-reduces per "
        "BN layer per step: two in the forward, one in the backward)",
        source=NOTES + ", Parallelizability",
        measured=f"per-device batch 2: local variance is "
        f"{sy['local_var_ratio'][i2]:.3f} × the true one (theory {theory:g}); SyncBN's two-pass "
        "statistics (global mean, then squared deviations from it) equal the "
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
        claim="BatchNorm (Ioffe & Szegedy 2015) made deep CNNs practical (Inception-v2, "
        "ResNet); the standard networks before it used Local Response Normalization (AlexNet, "
        "GoogLeNet), which the BN paper's Inception dropped",
        source="Ioffe & Szegedy, ICML 2015 (BN-Inception); He et al., CVPR 2016 (ResNet); "
        "Krizhevsky et al., NIPS 2012; Szegedy et al., CVPR 2015",
        extra={
            "cite": ["ioffe2015batch", "he2016deep", "krizhevsky2012imagenet", "szegedy2015going"]
        },
        measured="history, not a measurement",
        verdict="cited",
        device="n/a",
        quote="Remove Local Response Normalization While Inception and other networks "
        "(Srivastava et al., 2014) benefit from it, we found that with Batch Normalization it "
        "is not necessary.",
        quote_where="Ioffe & Szegedy 2015, §4.2.1",
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
        quote="During training we need to backpropagate the gradient of loss ℓ through this "
        "transformation, as well as compute the gradients with respect to the parameters of "
        "the BN transform",
        quote_where="§3, after Algorithm 1 (the chain-rule gradients, before simplification)",
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
        quote="moving_mean = moving_mean * momentum + mean(batch) * (1 - momentum)",
        quote_where="Keras API reference, BatchNormalization (the update during training)",
    )


def population_stats() -> Claim:
    return Claim(
        id="bn.population_stats",
        chapter=CH,
        claim="BatchNorm's original inference uses population statistics computed after "
        "training, averaging the statistics of training mini-batches through the frozen "
        "network: calibration is the original method, running averages the later practice",
        source="Ioffe & Szegedy, ICML 2015",
        extra={"cite": ["ioffe2015batch"]},
        measured="not measured: the chapter's calibration (precise BN) is that pass",
        verdict="cited",
        device="n/a",
        quote="Process multiple training mini-batches B, each of size m, and average over "
        "them: E[x] ← E_B[μ_B], Var[x] ← m/(m−1) E_B[σ²_B]",
        quote_where="Algorithm 2, step 10 (inference with frozen parameters); see §3.1",
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
        quote="by viewing BN as an implicit regularizer, BN can be decomposed into population "
        "normalization (PN) and gamma decay as an explicit regularization",
        quote_where="Abstract",
    )


def torch_syncbn_cpu() -> Claim:
    """torch.nn.SyncBatchNorm in training mode inside a process group of ONE process, CPU."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():  # never inside someone else's group
        raise RuntimeError("torch_syncbn_cpu needs a process without a process group")
    layer = torch.nn.SyncBatchNorm(4)
    x = torch.randn(8, 4, generator=seeding.generator(0))
    outside = layer(x).shape == x.shape  # no process group: plain BatchNorm
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        try:
            layer(x)
            inside = "no error"
        except ValueError as err:
            inside = str(err)
        layer.eval()
        evaluates = layer(x).shape == x.shape
    finally:
        dist.destroy_process_group()
    return Claim(
        id="bn.torch_syncbn_cpu",
        chapter=CH,
        claim="PyTorch's nn.SyncBatchNorm raises on a CPU tensor whenever it trains inside a "
        "process group, even of one process; outside a group, or in eval mode, it runs as "
        "plain BatchNorm",
        source=cite("pytorch_syncbn_source", where="SyncBatchNorm.forward"),
        measured=f"world size 1, gloo, CPU: training mode raised '{inside}'; without a group: "
        f"{'runs' if outside else 'fails'}; eval mode in the group: "
        f"{'runs' if evaluates else 'fails'}",
        verdict=verdict(inside != "no error" and outside and evaluates),
        device="CPU, torch " + torch.__version__,
        quote="SyncBatchNorm expected input tensor to be on GPU or XPU or",
        quote_where="torch/nn/modules/batchnorm.py, SyncBatchNorm.forward (the error raised)",
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
        quote="gradient signals grow exponentially in depth and that these exploding gradients "
        "cannot be eliminated by tuning the initial weight variances or by adjusting the "
        "nonlinear activation function",
        quote_where="Yang et al. 2019, Abstract",
    )
