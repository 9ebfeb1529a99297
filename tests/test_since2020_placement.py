"""The placements since 2020, QK-norm and the half-precision statistics, each against an
independent computation (torch.nn.functional ops, closed forms, NumPy in float64)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from normedu import halfprec as H
from normedu import placements as P
from normedu.transformer import Block, GPTConfig, TinyGPT, count_norms


def _randomize_norms(block: Block, gen: torch.Generator) -> None:
    """Gains and biases away from 1 and 0, so that a swapped norm would show."""
    with torch.no_grad():
        for name, p in block.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))


def _ln(m, z):
    return F.layer_norm(z, (z.shape[-1],), m.weight, m.bias, m.eps)


@pytest.mark.parametrize("placement", ["sandwich", "peri", "olmo2", "deepnorm"])
def test_block_matches_hand_written_placement(placement):
    cfg = GPTConfig(d_model=16, n_heads=2, n_layers=5, placement=placement)
    block = Block(cfg).double()
    _randomize_norms(block, torch.Generator().manual_seed(1))
    x = torch.randn(2, 6, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    alpha = (2 * 5) ** 0.25

    def sub(z, norm, layer, out):
        if placement in ("sandwich", "peri"):
            return z + _ln(out, layer(_ln(norm, z)))
        if placement == "olmo2":
            return z + _ln(norm, layer(z))
        return _ln(norm, alpha * z + layer(z))

    h = sub(x, block.norm1, block.attn, getattr(block, "norm1_out", None))
    expected = sub(h, block.norm2, block.mlp, getattr(block, "norm2_out", None))
    torch.testing.assert_close(block(x), expected, rtol=1e-12, atol=1e-12)


def test_norm_counts_and_final_norm():
    counts = {p: count_norms(TinyGPT(GPTConfig(n_layers=3, placement=p))) for p in P.PLACEMENTS}
    # 2 norms per block (4 for the sandwich), plus a final norm where the stream is never
    # normalized
    assert counts == {"pre": 7, "post": 6, "sandwich": 13, "peri": 13, "olmo2": 7, "deepnorm": 6}


def test_deepnorm_constants_and_init_scale():
    for n in (1, 6, 48, 1000):
        assert P.deepnorm_alpha(n) == pytest.approx(math.sqrt(math.sqrt(2 * n)), rel=1e-14)
        assert P.deepnorm_beta(n) == pytest.approx(1 / math.sqrt(math.sqrt(8 * n)), rel=1e-14)
    n, d = 12, 16
    deep = TinyGPT(GPTConfig(n_layers=n, d_model=d, placement="deepnorm", seed=3))
    post = TinyGPT(GPTConfig(n_layers=n, d_model=d, placement="post", seed=3))
    beta = 1 / (8 * n) ** 0.25
    for bd, bp in zip(deep.blocks, post.blocks, strict=True):
        # same draw, scaled: value rows and the FF/output projections by beta, q and k not;
        # the value rows also from the fused (3d, d) Xavier scale to a (d, d) matrix's
        wq, wp = bd.attn.qkv.weight.detach(), bp.attn.qkv.weight.detach()
        torch.testing.assert_close(wq[: 2 * d], wp[: 2 * d])
        torch.testing.assert_close(wq[2 * d :], beta * math.sqrt(2) * wp[2 * d :])
        for name in ("attn.proj", "mlp.fc1", "mlp.fc2"):
            a = bd.get_submodule(name).weight.detach()
            b = bp.get_submodule(name).weight.detach()
            torch.testing.assert_close(a, beta * b)
    # DeepNet's closed form: W_V and W_O are (d, d) Xavier draws times beta, entries uniform
    # on +-beta sqrt(6 / 2d), of variance beta^2 / d (3072 entries each: the estimate's relative
    # standard error is about 2%)
    for w in (torch.cat([b.attn.qkv.weight[2 * d :] for b in deep.blocks]),
              torch.cat([b.attn.proj.weight for b in deep.blocks])):  # fmt: skip
        w = w.detach().double()
        bound = beta * math.sqrt(6 / (2 * d))
        assert 0.95 * bound < float(w.abs().max()) <= bound
        assert float(w.pow(2).mean()) == pytest.approx(beta**2 / d, rel=0.08)
    assert deep.blocks[0].alpha == pytest.approx((2 * n) ** 0.25)
    assert post.blocks[0].alpha == 1.0


def test_qk_norm_logits_are_recorded_and_bounded():
    torch.manual_seed(0)
    cfg = GPTConfig(d_model=16, n_heads=2, n_layers=1, qk_norm=True)
    attn = Block(cfg).double().attn
    with torch.no_grad():
        attn.qk_norm.q_weight.copy_(torch.linspace(-3, 2, 8))
        attn.qk_norm.k_weight.copy_(torch.linspace(4, 0.5, 8))
    x = 1000 * torch.randn(3, 7, 16, dtype=torch.float64)
    attn.record_logits = True
    y = attn(x)
    # independent: project, RMS-normalize each head with F.rms_norm, softmax by hand
    q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).split(16, dim=-1)
    q, k, v = (z.view(3, 7, 2, 8).transpose(1, 2) for z in (q, k, v))
    q = F.rms_norm(q, (8,), attn.qk_norm.q_weight, attn.qk_norm.eps)
    k = F.rms_norm(k, (8,), attn.qk_norm.k_weight, attn.qk_norm.eps)
    logits = q @ k.transpose(-2, -1) / math.sqrt(8)
    mask = torch.ones(7, 7, dtype=torch.bool).triu(1)
    expected_max = logits.masked_fill(mask, 0).abs().max().item()
    assert attn.max_logit == pytest.approx(expected_max, rel=1e-12)
    out = torch.softmax(logits.masked_fill(mask, -math.inf), -1) @ v
    expected = F.linear(out.transpose(1, 2).reshape(3, 7, 16), attn.proj.weight, attn.proj.bias)
    torch.testing.assert_close(y, expected, rtol=1e-10, atol=1e-10)
    bound = P.qk_logit_bound(8, attn.qk_norm.q_weight, attn.qk_norm.k_weight)
    assert bound == pytest.approx(math.sqrt(8) * 3 * 4)
    assert expected_max <= bound
    # the bound is tight: a query and a key along axis 0, where both largest gains sit
    e = torch.zeros(1, 1, 1, 8, dtype=torch.float64)
    e[..., 0] = 1.0
    with torch.no_grad():
        qe, ke = attn.qk_norm(e, e)
    reached = float((qe * ke).sum().abs()) / math.sqrt(8)
    assert reached == pytest.approx(bound, rel=1e-4)  # eps keeps it a hair below


def test_logits_not_recorded_unless_asked():
    model = TinyGPT(GPTConfig(n_layers=2))
    model(torch.randint(0, 32, (1, 5)))
    assert all(math.isnan(v) for v in model.max_logits())


@pytest.mark.parametrize(
    "kwargs",
    [{"placement": "bogus"}, {"placement": "Pre"}, {"qk_norm": 1}, {"qk_norm": "yes"}],
)
def test_switches_are_validated(kwargs):
    with pytest.raises(ValueError):
        GPTConfig(**kwargs)


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_deepnorm_needs_positive_integer_depth(bad):
    with pytest.raises(ValueError):
        P.deepnorm_alpha(bad)
    with pytest.raises(ValueError):
        P.deepnorm_beta(bad)


# --------------------------------------------------------------------------- half precision


def _row(mean: float, dtype, n: int = 1024) -> torch.Tensor:
    z = torch.randn(n, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    return (mean + z).to(dtype)


def _truth(x: torch.Tensor) -> float:
    return float(np.var(x.double().numpy()))  # NumPy, float64, same rounded numbers


@pytest.mark.parametrize("algo", list(H.ALGORITHMS))
def test_variance_algorithms_are_exact_in_float64(algo):
    x = _row(3.0, torch.float64)
    assert float(H.ALGORITHMS[algo](x)) == pytest.approx(_truth(x), rel=1e-12)


def test_one_pass_loses_every_digit_where_two_pass_keeps_them():
    for dtype, mean in ((torch.float16, 200.0), (torch.bfloat16, 64.0), (torch.float32, 2.0**18)):
        x = _row(mean, dtype)
        t = _truth(x)
        assert abs(float(H.one_pass(x)) - t) / t > 0.5, dtype
        assert abs(float(H.two_pass(x)) - t) / t < 1e-2, dtype
        if dtype != torch.float32:  # half-precision row, float32 statistics
            assert abs(float(H.two_pass(x.float())) - t) / t < 1e-5, dtype
    x = _row(0.0, torch.float32)
    for f in H.ALGORITHMS.values():
        assert float(f(x)) == pytest.approx(_truth(x), rel=1e-5)


def test_where_the_sums_are_kept_decides_the_half_precision_error():
    x = _row(200.0, torch.float16, n=4096)  # 128 numbers per chunk, as on the page
    t = _truth(x)

    def err(v):
        return abs(float(v) - t) / t

    # two-pass with float16 running sums: far worse than torch's float32-accumulating reductions
    assert err(H.two_pass_chunked(x)) > 10 * err(H.two_pass(x))
    # float32 state: two-pass and Welford/Chan to float32 accuracy on the same rounded numbers
    assert err(H.two_pass(x.float())) < 1e-6 and err(H.welford_chan(x.float())) < 1e-6
    # near mean 0 Welford's bfloat16 error is its M2's: in float32, only the result's rounding
    y = _row(0.0, torch.bfloat16, n=4096)
    ty = _truth(y)
    u = 2.0**-8  # bfloat16's unit roundoff: the final rounding of the returned variance
    assert abs(float(H.welford_chan(y, m2_dtype=torch.float32)) - ty) / ty <= u
    assert abs(float(H.welford_chan(y)) - ty) / ty > 2 * u


def test_the_rounding_floor_is_the_exact_variance_stored_in_the_dtype():
    res = H.precision_errors()
    for dtype, np_dtype in (("float16", np.float16), ("float32", np.float32)):
        x = H._row(0).to(H.DTYPES[dtype]).double().numpy()  # the first row, rounded
        t = float(np.var(x))
        floor = abs(float(np_dtype(t)) - t) / t  # NumPy's rounding of the float64 variance
        assert res.per_row[dtype]["0.0"][H.ROUNDING_FLOOR][0] == pytest.approx(floor, rel=1e-9)


def test_float16_sum_of_squares_overflows():
    x = (8 * torch.randn(4096, generator=torch.Generator().manual_seed(0))).half()
    exact = float(np.sum(x.double().numpy() ** 2))
    assert exact > 65504  # the true sum is beyond float16's range ...
    assert math.isinf(float(H.sum_of_squares(x)))  # ... so float16 gives inf
    assert float(H.sum_of_squares(x.float())) == pytest.approx(exact, rel=1e-5)


def test_welford_chan_checks_its_chunks():
    with pytest.raises(ValueError):
        H.welford_chan(torch.ones(12), chunks=3)
    with pytest.raises(ValueError):
        H.one_pass(torch.ones(4, dtype=torch.int64))


# --------------------------------------------------------------------------- page sentences


def _run(label, final, trained, lr=1e-2, logits=(1.0,), bounds=()):
    return SimpleNamespace(
        label=label,
        lr=lr,
        final_loss=final,
        trained=trained,
        diverged=False,
        peak_logit=max(logits),
        max_logits=list(logits),
        logit_bounds=list(bounds),
    )


def _record(n=3, **fields):
    """A stand-in for the committed multi-seed record (SeedRecord's fields the words use)."""
    return SimpleNamespace(n=n, seeds=list(range(n)), measured="test", **fields)


def _sweep_record(qk_trains_at_high: bool, n=3):
    def runs(k):
        hi_qk = 1.0 + 0.01 * k if qk_trains_at_high else 2.6 + 0.01 * k  # plain's: 2.6
        return [
            {"label": "plain", "lr": 1e-3, "final_loss": 0.01, "peak_logit": 5.0 + k},
            {"label": "plain", "lr": 1e-1, "final_loss": 2.6, "peak_logit": 5000.0 + k},
            {"label": "qk_norm", "lr": 1e-3, "final_loss": 0.01, "peak_logit": 4.0,
             "worst_over_bound": 0.4},
            {"label": "qk_norm", "lr": 1e-1, "final_loss": hi_qk, "peak_logit": 9.0,
             "worst_over_bound": 0.95},
        ]  # fmt: skip

    sweep = [{"runs": runs(k), "lrs": [1e-3, 1e-1], "depth": 2, "d_model": 64, "steps": 150,
              "chance_loss": 2.64} for k in range(n)]  # fmt: skip
    return _record(n, sweep=sweep)


def test_sweep_sentence_both_branches():
    from normedu.claims import since2020_placement as C

    yes, no = C.describe_sweep(_sweep_record(True)), C.describe_sweep(_sweep_record(False))
    assert "**QK-norm lowers the loss where the plain stack fails.**" in yes
    # whether the QK-norm runs learn is counted against half of chance (1.32), not claimed
    assert "3 of 3 QK-norm runs end below half of chance at 0.1" in yes
    partly = _sweep_record(True)
    partly.sweep[0]["runs"][3]["final_loss"] = 1.33  # seed 0 stays above half of chance
    assert C.qk_learned(partly, 0.1) == (2, 3)
    assert "less than Wortsman et al.'s wider range of usable learning rates" in yes
    assert "not reproduced" not in yes
    assert "not reproduced" in no and "lowers the loss where" not in no
    assert C.qk_bounded(_sweep_record(True)) and C.logits_grow(_sweep_record(True))


def test_update_sentence_both_branches():
    from normedu.claims import since2020_placement as C
    from normedu.experiments.since2020_placement import UpdateSizes

    def upd(matrices, k):
        groups = {
            p: {"block matrices": [m * (1 + 0.01 * k) for m in matrices]}
            | {"norm gains and biases": [0.4, 7.0], "block biases": [0.3, 0.5]}
            | {"embeddings": [0.2, 0.2]}
            for p in ("post", "deepnorm")
        }
        change = {"post": [10, 80], "pre": [9, 70], "deepnorm": [1, 8 + k]}
        return UpdateSizes([4, 64], 0.01, change, groups)

    flat = C.describe_updates(_record(update=[upd([0.08, 0.07], k) for k in range(3)]))
    grows = C.describe_updates(_record(update=[upd([0.08, 0.8], k) for k in range(3)]))
    assert "**For the parameters the theorem bounds, the change grows less than ×2" in flat
    assert "norm gains and biases, whose change grows most on all 3 seeds" in flat
    assert "**not** shown independent" in grows and "grows less than" not in grows


def test_update_groups_split_the_parameters_that_move_the_output():
    from normedu.experiments.since2020_placement import UPDATE_GROUPS

    for placement in ("post", "pre", "sandwich", "deepnorm"):
        model = TinyGPT(GPTConfig(n_layers=2, placement=placement, qk_norm=True))
        for name, p in model.named_parameters():
            owners = [g for g, member in UPDATE_GROUPS.items() if member(name, p)]
            assert len(owners) == (0 if name.startswith("head.") else 1), (name, owners)


def test_training_sentence_both_branches():
    from normedu.claims import since2020_placement as C

    def record(post_trains: bool):
        def one(k):
            runs = {
                p: {
                    "final_loss": 0.01 + 0.001 * k,
                    "before_loss": 0.02,
                    "diverged": False,
                    "trained": True,
                }
                for p in ("pre", "sandwich", "olmo2", "deepnorm")
            }
            post = 0.1 + 0.01 * k if post_trains else 2.6 + 0.01 * k
            runs["post"] = {
                "final_loss": post,
                "before_loss": post,
                "diverged": False,
                "trained": post_trains,
            }
            return {"runs": runs, "depth": 8, "lr": 5e-3, "steps": 90, "chance_loss": 2.64}

        return _record(train=[one(k) for k in range(3)])  # fmt: skip

    no_post = C.describe_training(record(False))
    assert "**Post-LN fails; Pre-LN, the sandwich and DeepNorm learn**" in no_post
    assert "OLMo 2's output norm learns too" in no_post
    assert "was still falling" in no_post and "Post-LN was still" not in no_post
    assert "**not** the expected pattern" in C.describe_training(record(True))


def _init(depth=3, seeds=3, grads=None):
    from normedu.experiments.since2020_placement import PLACEMENTS, InitProfiles

    line = [[1.0 + 0.1 * b for b in range(depth)] for _ in range(seeds)]
    grads = grads or {p: line for p in PLACEMENTS}
    return InitProfiles(depth, 8, seeds, {p: line for p in PLACEMENTS}, grads,
                        {p: line for p in PLACEMENTS}, {p: line for p in PLACEMENTS},
                        {p: line for p in PLACEMENTS})  # fmt: skip


def test_figures_are_drawn():
    from matplotlib.figure import Figure

    from normedu.experiments.since2020_placement import PLACEMENTS, SweepResult, TrainResult
    from normedu.plots import since2020_placement as PL

    runs = [_run(p, 0.5, True) for p in PLACEMENTS]
    for r in runs:
        r.losses = [2.0, 1.0, 0.5]
    sweep = [_run("plain", 0.01, True, 1e-3, (5.0,)), _run("qk_norm", 0.01, True, 1e-3, (4.0,))]
    for r in sweep:
        r.losses = [2.0, 1.0, 0.5]
    figs = [
        PL.dataflow_figure(),
        PL.init_figure(_init()),
        PL.training_figure(TrainResult(runs, 3, 8, 1e-3, 3, 2.6)),
        PL.sweep_figure(SweepResult(sweep, [1e-3], 2, 64, 32, 3, 2.64)),
    ]
    assert all(isinstance(f, Figure) for f in figs)


def test_trend_and_near_rules_word_what_every_seed_shows():
    """The trend rule fits every block (not only the two ends) and says "no trend" only when
    the seeds are clearly inside ×1.5; the near rule says "within" only when clearly inside."""
    from normedu.claims import since2020_placement_words as W

    depth = 8
    rising = [[math.exp(0.2 * b + 0.01 * k) for b in range(depth)] for k in range(3)]
    # flat ends but a large dip in the middle: last/first is 1, the fitted line is not level
    dip = [[1.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 1.0 + 0.01 * k] for k in range(3)]
    level = [[1.0 + 0.01 * ((b + k) % 2) for b in range(depth)] for k in range(3)]
    init = _init(depth, 3, {"post": rising, "deepnorm": level, "pre": dip, "sandwich": level,
                            "olmo2": level})  # fmt: skip
    fits = {p: init.fitted_last_over_first(p) for p in ("post", "deepnorm")}
    assert fits["post"] == pytest.approx([math.exp(0.2 * 7)] * 3)  # exp(slope · (L − 1))
    assert W.trend(fits["post"]) == "rises" and W.trend(fits["deepnorm"]) == "flat"
    # seeds that disagree: one rises, one falls, one level
    assert W.trend([3.0, 1 / 3.0, 1.0]) == "unclear"
    assert W.near([1.0, 1.02, 0.98], 1.0) == "within"
    assert W.near([0.5, 0.55, 0.52], 1.0) == "below"
    assert W.near([0.7, 1.3, 1.0], 1.0) == "unclear"  # straddles both edges


def test_gelu_factor_matches_a_monte_carlo_estimate():
    from normedu.claims.since2020_placement_words import gelu_factor

    z = torch.randn(400_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = z * math.sqrt(0.4)
    mc = float(F.gelu(0.25 * z).pow(2).mean().sqrt() / F.gelu(z).pow(2).mean().sqrt())
    assert gelu_factor(0.25, 0.4) == pytest.approx(mc, rel=5e-3)
    assert gelu_factor(1.0, 0.4) == pytest.approx(1.0)
    assert gelu_factor(0.25, 0.4) < 0.25  # GELU is flatter near 0: less than beta


def test_live_in_record_widens_the_range_by_half_its_width():
    from normedu.claims.since2020_placement_words import live_in_record

    inside, outside = live_in_record({"a": (1.24, [1.0, 1.1, 1.2]), "b": (1.35, [1.0, 1.2])})
    assert (inside, outside) == (1, ["b"])  # a: 1.0-1.2 widened to 0.9-1.3; b the same, 1.35 beyond


def test_the_committed_seed_record_is_current_and_words_hold_on_it():
    """The record the page's verdicts rest on was measured with today's sizes, over at least
    three seeds, and its verdicts are the ones the page's prose expects."""
    from dataclasses import asdict

    from normedu import records
    from normedu.claims import since2020_placement as C
    from normedu.experiments import since2020_placement as E
    from normedu.experiments.since2020_seeds import RECORD, seed_record

    assert RECORD not in records.stale()
    stored = records.read(RECORD)["data"]
    today = json.loads(json.dumps(asdict(E.SIZES["cpu"])))  # tuples stored as lists
    assert stored["size"] == today and stored["offset"] == 0
    rec = seed_record()
    assert rec.n >= 3 and len(rec.train) == len(rec.sweep) == len(rec.update) == rec.n
    assert C.expected_training(rec) and C.deepnorm_bounded(rec)
    assert C.logits_grow(rec) and C.qk_bounded(rec) and C.qk_rescues(rec)
