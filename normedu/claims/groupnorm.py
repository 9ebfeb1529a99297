"""Claims of the GroupNorm chapter, checked with its measurements: the BatchNorm chapter's
stored MLP batch-size sweep, and the chapter's own CNN runs (:mod:`normedu.experiments.convnet`).

One function per claim; :func:`check` runs them in the chapter's order.
"""

from __future__ import annotations

from .. import seeding
from ..claim import Claim, claims_for, measured_on, verdict

CH = "groupnorm"
WU_HE = "Wu & He, 'Group Normalization', ECCV 2018"


@claims_for(CH)
def check() -> list[Claim]:
    dev = measured_on()
    return [
        limits(),
        batch_independent(),
        small_batch(),
        cnn_small_batch(dev),
        imagenet(),
        groups_choice(dev),
    ]


def limits() -> Claim:
    """G = 1 is LayerNorm over (C, H, W), G = C is InstanceNorm: against torch's own functions."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from .. import functional as Fn

    x = seeding.rng(0).normal(1.0, 2.0, size=(4, 6, 5, 5))
    xt = torch.tensor(x)
    ln, inorm = Fn.group_norm(x, None, None, G=1), Fn.group_norm(x, None, None, G=6)
    err_ln = float(np.abs(ln - F.layer_norm(xt, x.shape[1:]).numpy()).max())
    err_in = float(np.abs(inorm - F.instance_norm(xt).numpy()).max())
    return Claim(
        id="gn.limits",
        chapter=CH,
        claim="GroupNorm with one group is LayerNorm over (C, H, W); with C groups it is "
        "InstanceNorm",
        source=WU_HE,
        measured=f"max |GroupNorm(G=1) - torch layer_norm| = {err_ln:.1e}, "
        f"max |GroupNorm(G=C) - torch instance_norm| = {err_in:.1e} on (4, 6, 5, 5)",
        verdict=verdict(max(err_ln, err_in) < 1e-10),
        device="CPU, float64",
    )


def batch_independent() -> Claim:
    from ..experiments import groupnorm as E

    mates = E.batchmates()
    gn, bn = mates["max_change"]["groupnorm"], mates["max_change"]["batchnorm"]
    return Claim(
        id="gn.batch_independent",
        quote="GN's computation is independent of batch sizes",
        quote_where="abstract (arXiv:1803.08494)",
        chapter=CH,
        claim="GroupNorm's computation is independent of the batch: a sample's output does "
        "not depend on its batchmates",
        source=WU_HE,
        measured=f"one sample in {mates['n_batches']} batches of {mates['batch']}: largest "
        f"change of its outputs {gn:.1e} with GroupNorm, {bn:.2f} with BatchNorm",
        verdict=verdict(gn == 0.0 and bn > 0.1),
        device="CPU, float64",
    )


def small_batch() -> Claim:
    """gn.small_batch, on the BatchNorm chapter's stored GPU sweep ("cited" without one)."""
    from ..experiments import batchnorm as B

    stored = B.stored_sweep()
    if stored is None:
        measured, found, device = "stored GPU batch-size sweep not available", "cited", "n/a"
    else:
        sw, prov = stored["data"], stored["provenance"]
        bs = sw["batch_sizes"]
        bn2, bn32 = sw["batchnorm"][bs.index(2)], sw["batchnorm"][bs.index(32)]
        gn2, gn32 = sw["groupnorm"][bs.index(2)], sw["groupnorm"][bs.index(32)]
        ok = bn2 > 2 * bn32 and gn2 < 1.5 * gn32 and gn2 < bn2 / 2
        measured = (
            f"digits MLP test error: BatchNorm {bn2:.1%} at batch 2 vs {bn32:.1%} at 32; "
            f"GroupNorm {gn2:.1%} vs {gn32:.1%} (range {min(sw['groupnorm']):.1%} to "
            f"{max(sw['groupnorm']):.1%} over batch {bs[0]} to {bs[-1]})"
        )
        found, device = verdict(ok), prov["device"]
    return Claim(
        id="gn.small_batch",
        quote=(
            "GN's computation is independent of batch sizes, and its accuracy is stable in a wide"
            " range of batch sizes."
        ),
        quote_where="abstract (arXiv:1803.08494)",
        chapter=CH,
        claim="GroupNorm's accuracy stays stable at small batches, where BatchNorm's "
        "error rises sharply",
        source=WU_HE,
        measured=measured,
        verdict=found,
        device=device,
    )


def imagenet() -> Claim:
    return Claim(
        id="gn.imagenet",
        quote=(
            "On ResNet-50 trained in ImageNet, GN has 10.6% lower error than its BN counterpart "
            "when using a batch size of 2"
        ),
        quote_where="abstract (arXiv:1803.08494)",
        chapter=CH,
        claim="ResNet-50 on ImageNet at 2 images per GPU: GroupNorm's top-1 error is 10.6 "
        "points lower than BatchNorm's",
        source=WU_HE,
        measured="not re-run (ImageNet training)",
        verdict="cited",
        device="n/a",
    )


def cnn_small_batch(dev: str) -> Claim:
    """gn.cnn_small_batch: the small-batch claim, on the chapter's CNN (BN vs GN, seeds)."""
    from ..experiments import convnet as CN

    sw = CN.batch_size_sweep()
    bs, cross = sw["batch_sizes"], sw["crossover"]
    d0 = sw["gn_minus_bn"][0]
    where = "none" if cross is None else f"batch {bs[0]} to {cross}"
    return Claim(
        id="gn.cnn_small_batch",
        quote=(
            "BN's error increases rapidly when the batch size becomes smaller, caused by "
            "inaccurate batch statistics estimation."
        ),
        quote_where="abstract (arXiv:1803.08494)",
        chapter=CH,
        claim="In a convolutional network, GroupNorm beats BatchNorm at small batches",
        source=WU_HE,
        per_seed={
            f"BatchNorm, batch {bs[0]}": list(sw["batchnorm_all"][0]),
            f"GroupNorm, batch {bs[0]}": list(sw["groupnorm_all"][0]),
        },
        measured=f"digits CNN, {len(sw['seeds'])} seeds, {sw['epochs']} epoch(s): test error at "
        f"batch {bs[0]} BatchNorm {sw['batchnorm'][0]:.1%}, GroupNorm {sw['groupnorm'][0]:.1%} "
        f"(difference {d0['diff']:+.1%} ± {d0['se']:.1%}); batch sizes where GroupNorm is "
        f"lower by the rule (paired by seed) at every smaller size: {where}",
        verdict=verdict(cross is not None),
        device=dev,
    )


def _batches(sizes: list[int]) -> str:
    return "batch " + ", ".join(map(str, sizes))


def describe_cnn_sweep(sw: dict) -> str:
    """The verdict on the CNN's BatchNorm-vs-GroupNorm sweep, in words, for the page.

    ``sw``: :func:`normedu.experiments.convnet.batch_size_sweep`'s result (``batch_sizes``,
    ``seeds``, ``crossover``, ``gn_minus_bn``, ``batchnorm_all``, ``groupnorm_all``). The sizes
    where the rule finds one norm better are counted, not listed: which sizes they are changes
    with the seeds, the counts and the verdict at the smallest batch much less.
    """
    bs, cross, diffs = sw["batch_sizes"], sw["crossover"], sw["gn_minus_bn"]
    n = len(sw["seeds"])
    if cross is not None:
        return (
            f"**GroupNorm beats BatchNorm at batch {cross} and below** (by the rule over {n} "
            "seeds at every one of those sizes)."
        )
    clear_gn = [b for b, d in zip(bs, diffs, strict=True) if d["clear"] and d["diff"] < 0]
    clear_bn = [b for b, d in zip(bs, diffs, strict=True) if d["clear"] and d["diff"] > 0]
    gn_lower = [b for b, d in zip(bs, diffs, strict=True) if d["diff"] < 0]
    seed_spread = 100 * max(
        max(e) - min(e) for n_ in ("batchnorm", "groupnorm") for e in sw[f"{n_}_all"]
    )
    norm_gap = 100 * max(abs(d["diff"]) for d in diffs)
    return (
        "**No crossover at these sizes.** By the rule over "
        f"{n} seeds (paired by seed: a difference only where every seed agrees in sign or the "
        "mean exceeds twice its standard error), GroupNorm does not beat BatchNorm at the "
        f"smallest batch, {bs[0]}. Of the {len(bs)} batch sizes, GroupNorm's error is lower "
        f"by the rule at {len(clear_gn)} and BatchNorm's at {len(clear_bn)}; GroupNorm's mean "
        f"error is lower at {len(gn_lower)}. The {n} seeds of one setting differ by up to "
        f"{seed_spread:.1f} points, the two norms' means by at most {norm_gap:.1f}."
    )


def groups_choice(dev: str) -> Claim:
    """gn.groups: an intermediate G beats both ends (Wu & He, Table 3), on the CNN."""
    from ..experiments import convnet as CN

    gs = CN.group_sweep()
    ends = (1, gs["channels"])
    ok = bool(gs["beats_both"])  # an intermediate G lower than both ends by the rule
    errs = ", ".join(f"G={g}: {e:.1%}" for g, e in zip(gs["groups"], gs["errors"], strict=True))
    return Claim(
        id="gn.groups",
        chapter=CH,
        claim="An intermediate number of groups G beats both extremes, LayerNorm (G = 1) and "
        "InstanceNorm (G = C)",
        source=WU_HE,
        measured=f"digits CNN with {gs['channels']} channels per layer, batch {gs['batch']}, "
        f"{len(gs['seeds'])} seeds, mean test error: {errs}; intermediate G with a lower error "
        f"than both ends by the rule (paired by seed): {len(gs['beats_both'])} of "
        f"{len(gs['groups']) - len(ends)}",
        verdict=verdict(ok),
        device=dev,
        per_seed={f"G={g}": list(p) for g, p in zip(gs["groups"], gs["all"], strict=True)},
    )
