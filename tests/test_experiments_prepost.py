"""The Pre/Post-Norm experiments at a tiny size, the presets, and the storing command."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from normedu.experiments import __main__ as cli
from normedu.experiments import prepost as E
from normedu.experiments import prepost_training as T
from normedu.experiments import prepost_width as W
from normedu.experiments import registered

TINY = E.PrePostSize(
    depths=(2, 4),
    d_model=16,
    n_heads=2,
    vocab=10,
    n_items=3,
    batch=4,
    seeds=1,
    train_depth=2,
    train_d_model=16,
    train_heads=2,
    train_batch=4,
    steps=6,
    lr=1e-3,
    warmup=3,
    threads=1,
    wide=E.WideSize(
        d_model=16,
        n_heads=2,
        n_layers=3,
        seq_len=4,
        batch=2,
        classes=4,
        seeds=2,
        one_at_a_time=True,
    ),
)


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(E.SIZES, "cpu", TINY)
    E.init_grad_norms.cache_clear()
    E.train_stability.cache_clear()
    yield TINY
    E.init_grad_norms.cache_clear()
    E.train_stability.cache_clear()


def test_lr_schedule():
    assert [E.lr_at(s, 1.0, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert E.lr_at(0, 0.3, 0) == 0.3
    with pytest.raises(ValueError):
        E.lr_at(0, 1.0, -1)


def test_presets_are_defined_and_cuda_is_bigger():
    cpu, cuda = E.SIZES["cpu"], E.SIZES["cuda"]
    assert cuda.d_model >= 8 * cpu.d_model and cuda.steps >= 10 * cpu.steps
    assert max(cuda.train_depth, *cuda.depths) >= 24
    assert cpu.warmup < cpu.steps and cuda.warmup < cuda.steps


def test_loglog_slope_recovers_a_known_exponent():
    x = np.array([6.0, 12.0, 24.0, 48.0])
    noise = np.exp(np.array([0.02, -0.03, 0.01, -0.02]))  # a few percent, as from two seeds
    # least squares on the logs: the exponent of 3 x^-0.5, moved by the noise's own slope
    want = -0.5 + np.polyfit(np.log(x), np.log(noise), 1)[0]
    assert E.loglog_slope(x, 3.0 * x**-0.5 * noise) == pytest.approx(want, abs=1e-12)
    assert E.loglog_slope([1, 2, 4], [5.0, 5.0, 5.0]) == pytest.approx(0.0, abs=1e-12)
    for bad in (([1, 2], [1.0]), ([1], [1.0]), ([0, 1], [1.0, 2.0]), ([1, 2], [1.0, -1.0])):
        with pytest.raises(ValueError):
            E.loglog_slope(*bad)


def test_init_grad_norms_tiny(tiny):
    res = E.init_grad_norms("cpu")
    assert res.depths == [2, 4]
    for placement in ("post", "pre"):
        for d in res.depths:
            prof = res.profile(placement, d)
            assert prof.shape == (d,) and (prof > 0).all()
            assert res.spread(placement, d) == pytest.approx(prof.max() / prof.min())
        last = [res.profile(placement, d)[-1] for d in res.depths]
        assert res.depth_slope(placement) == pytest.approx(np.log(last[1] / last[0]) / np.log(2))
    # Stream norms, against what a LayerNorm guarantees: a Post-LN block ends with a norm
    # (gain 1, shift 0 at init), whose every output row has length sqrt(d_model) ...
    post = res.stream_profile("post", 4)
    np.testing.assert_allclose(post, np.sqrt(TINY.d_model), rtol=1e-3)
    assert abs(res.stream_slope("post")) < 1e-3
    # ... while a Pre-LN stream only adds to itself: longer after every block.
    assert (np.diff(res.stream_profile("pre", 4)) > 0).all() and res.stream_slope("pre") > 0
    # Each seed's values are kept: with one seed they are the averaged ones, and each seed's
    # fits are the fits of its own profiles.
    assert res.has_seeds and res.seed_norms["post"]["4"] == [res.norms["post"]["4"]]
    for placement in ("post", "pre"):
        assert res.seed_slopes("batch", placement) == [pytest.approx(res.depth_slope(placement))]
        assert res.seed_slopes("stream", placement) == [
            pytest.approx(res.stream_slope(placement), abs=1e-9)
        ]
        assert res.seed_slopes("token", placement) == [pytest.approx(res.token_slope(placement))]
        assert res.seed_last_over_first(placement, 2) == [
            pytest.approx(res.last_over_first(placement, 2))
        ]
    with pytest.raises(ValueError, match="kind must be"):
        res.seed_slopes("depth", "pre")
    assert E.init_grad_norms("cpu") is res  # cached
    assert E.InitGradNorms.from_json(json.loads(json.dumps(res.to_json()))) == res


def test_per_token_gradient_against_one_backward_per_token(tiny):
    """The hook's per-token mean, against the per-token gradients taken one at a time: each
    scored token's own loss backpropagated alone, the norm of the last W2's gradient."""
    import torch.nn.functional as F

    from normedu.sequence_tasks import IGNORE, lm_loss, make_batch, seq_len
    from normedu.transformer import GPTConfig, TinyGPT

    cfg = GPTConfig(vocab=10, d_model=16, n_heads=2, n_layers=2, max_len=seq_len("reverse", 3))
    model = TinyGPT(cfg)
    b = make_batch("reverse", 3, 3, 10, seed=0)
    fc2 = model.blocks[-1].mlp.fc2
    with E._token_grads(fc2) as got:
        lm_loss(model(b.x), b).backward()
    batch = float(fc2.weight.grad.norm())
    one_at_a_time = []
    for i, t in (b.y != IGNORE).nonzero().tolist():
        model.zero_grad()
        F.cross_entropy(model(b.x)[i, t][None], b.y[i, t][None]).backward()
        one_at_a_time.append(float(fc2.weight.grad.norm()))
    assert got[0] == pytest.approx(np.mean(one_at_a_time), rel=1e-5)
    # the batch gradient is the mean of the per-token ones: never longer than their mean norm
    assert batch < got[0]
    res = E.init_grad_norms("cpu")
    assert res.has_tokens and ((res.alignment("pre") > 0) & (res.alignment("pre") <= 1)).all()
    tok = res.last_layer_token("post")
    assert res.token_slope("post") == pytest.approx(np.log(tok[1] / tok[0]) / np.log(2))


def test_train_stability_tiny(tiny):
    res = E.train_stability("cpu")
    assert [(r.placement, r.warmup) for r in res.runs] == [
        ("post", 0),
        ("post", 3),
        ("pre", 0),
        ("pre", 3),
    ]
    for r in res.runs:
        assert len(r.losses) == TINY.steps and not r.diverged
        assert r.final_loss == pytest.approx(sum(r.losses[-1:]) / 1)
        assert 0.0 <= r.accuracy <= 1.0 and len(r.grad_norms_end) == TINY.train_depth
        assert r.trained == (r.final_loss < 0.5 * math.log(TINY.vocab))
    assert res.run("pre", warmup=True).warmup == 3
    with pytest.raises(KeyError):
        res.run("middle", warmup=True)
    again = E.StabilityResult.from_json(json.loads(json.dumps(res.to_json())))
    assert again.runs[0] == res.runs[0] and again.chance_loss == res.chance_loss
    # same seeds, same data: deterministic
    E.train_stability.cache_clear()
    assert E.train_stability("cpu").runs[2].losses == res.runs[2].losses


def test_warmup_sweep_cells_and_a_learning_rate_of_zero(monkeypatch):
    """Every cell of the grid is run once per seed; at a peak rate of 0 nothing moves, whatever
    the warm-up, and training at a real rate ends below that untrained loss on the same batches.
    Each seed is its own initialization and batch stream."""
    size = dataclasses.replace(
        TINY, steps=8, lr=1e-2, warmup=3, lrs=(0.0, 1e-2), warmups=(0, 3), train_seeds=2
    )
    monkeypatch.setitem(E.SIZES, "cpu", size)
    E.warmup_sweep.cache_clear()
    try:
        sweep = E.warmup_sweep("cpu")
    finally:
        E.warmup_sweep.cache_clear()
    assert len(sweep.runs) == 16 and sweep.seeds == 2
    assert {(r.placement, r.lr, r.warmup, r.seed) for r in sweep.runs} == {
        (p, lr, w, s) for p in ("post", "pre") for lr in (0.0, 1e-2) for w in (0, 3) for s in (0, 1)
    }
    for placement in ("post", "pre"):
        losses = sweep.final_losses(placement)
        assert losses.shape == (2, 2) and sweep.trained_counts(placement).shape == (2, 2)
        for s in (0, 1):  # lr 0: the same untrained model either way, per seed
            assert (
                sweep.cell(placement, 0.0, 0, s).losses == sweep.cell(placement, 0.0, 3, s).losses
            )
        # two seeds: two initializations on two batch streams
        assert sweep.cell(placement, 0.0, 0, 0).losses != sweep.cell(placement, 0.0, 0, 1).losses
        assert (losses[1] < losses[0, 0]).all()  # lr 1e-2 learned something, with or without
        # the headline runs (lr 1e-2) carry their gradients after training, the others not
        assert len(sweep.cell(placement, 1e-2, 0).grad_norms_end) == size.train_depth
        assert sweep.cell(placement, 0.0, 0).grad_norms_end == []
    stab = sweep.stability()
    assert [(r.placement, r.warmup, r.lr, r.seed) for r in stab.runs] == [
        (p, w, 1e-2, s) for p in ("post", "pre") for w in (0, 3) for s in (0, 1)
    ]
    assert [r.seed for r in stab.seed_runs("pre", False)] == [0, 1]
    assert E.WarmupSweep.from_json(json.loads(json.dumps(sweep.to_json()))) == sweep
    with pytest.raises(ValueError):  # the grid must hold the headline cell
        T.sweep_grid(dataclasses.replace(size, lrs=(3e-3,)))


def test_registry_lists_both_scale_experiments():
    assert {"prepost", "gradflow"} <= set(registered())


def test_cli_refuses_to_store_cpu_runs(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_cuda_available", lambda: False)
    assert cli.main(["--store", "--only", "gradflow"]) == 2
    assert "refusing" in capsys.readouterr().err


def test_cli_list(capsys):
    assert cli.main(["--list"]) == 0
    assert "prepost" in capsys.readouterr().out.split()


def test_cli_stores_with_allow_cpu_into_out(tiny, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "_cuda_available", lambda: False)
    rc = cli.main(
        ["--store", "--allow-cpu", "--preset", "cpu", "--only", "prepost", "--out", str(tmp_path)]
    )
    assert rc == 0
    record = json.loads((tmp_path / "prepost.json").read_text())
    assert {"provenance", "data"} <= set(record)
    assert "CPU" in record["provenance"]["device"]
    assert "--store" in record["provenance"]["command"]
    assert record["data"]["preset"] == "cpu" and record["data"]["size"]["depths"] == [2, 4]
    stab = E.StabilityResult.from_json(record["data"]["training"])
    assert len(stab.runs) == 4


def test_cli_unknown_experiment():
    with pytest.raises(SystemExit):
        cli.main(["--only", "nope"])


def test_default_preset_shares_the_cache(tiny, monkeypatch):
    # The chapter calls the runners without a preset, its claim checks with the resolved one:
    # both must hit one cached run.
    monkeypatch.setenv("NORMEDU_PRESET", "cpu")
    assert E.init_grad_norms() is E.init_grad_norms("cpu")
    assert E.train_stability(progress=True) is E.train_stability("cpu")


def test_wide_check_tiny(tiny):
    res = E.wide_check("cpu")
    assert res.size == TINY.wide and E.wide_check("cpu") is res  # cached
    keys = [(p.model, p.placement, p.changes) for p in res.profiles]
    # by default only TinyGPT as is and with all switches
    default = E.wide_profiles(dataclasses.replace(TINY.wide, one_at_a_time=False))
    assert [p.changes for p in default.switch_rows("post")] == ["", "all switches"]
    post_switches = [c for m, pl, c in keys if m == "TinyGPT" and pl == "post"]
    # Post-LN has no final norm to remove: that switch is skipped there
    assert post_switches == [
        "",
        "no causal mask",
        "ReLU instead of GELU",
        "unit-variance embeddings",
        "all switches",
    ]
    pre = [c for m, pl, c in keys if m == "TinyGPT" and pl == "pre"]
    assert pre == ["", "no final norm", "all switches"]
    # a profile the check measured is remembered, not measured again
    n = len(W._TINY_PROFILES)
    again = E.tinygpt_grad_profile("pre", E.SWITCHES["no final norm"], 0, size=TINY.wide)
    assert len(W._TINY_PROFILES) == n and again.shape == (3,)
    for p in res.profiles:
        assert len(p.norms) == 3 and min(p.norms) > 0
        assert p.last_over_first == pytest.approx(p.norms[-1] / p.norms[0])
    # seeds are averaged: the mean of the per-seed profiles
    one = [E.encoder_grad_profile("pre", s, size=TINY.wide) for s in range(2)]
    np.testing.assert_allclose(
        res.get("nn.TransformerEncoderLayer", "pre").norms, (one[0] + one[1]) / 2, rtol=1e-6
    )


def test_only_grad_of_keeps_the_gradient():
    """Asking autograd for the fc2 weights only leaves their gradient unchanged."""
    import torch

    from normedu.transformer import GPTConfig, TinyGPT

    idx = torch.randint(0, 5, (2, 4), generator=torch.Generator().manual_seed(0))
    grads = []
    for only in (False, True):
        model = TinyGPT(GPTConfig(vocab=5, d_model=8, n_heads=2, n_layers=2, max_len=4))
        if only:
            W._only_grad_of(model, "mlp.fc2.weight")
            assert not model.blocks[0].attn.qkv.weight.requires_grad
        model(idx).square().mean().backward()
        grads.append([b.mlp.fc2.weight.grad for b in model.blocks])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


def test_stacked_forward_is_tinygpt_copy_by_copy():
    """Stacked copies with different weights give each copy's own TinyGPT logits; a
    configuration the stacked forward does not implement is refused."""
    import torch

    from normedu.experiments import prepost_stacked as S
    from normedu.sequence_tasks import make_batch
    from normedu.transformer import GPTConfig, TinyGPT

    b = make_batch("reverse", 3, 3, 10, seed=0)
    for placement in ("pre", "post"):
        cfg = GPTConfig(vocab=10, d_model=8, n_heads=2, n_layers=2, max_len=8, placement=placement)
        model = TinyGPT(cfg)
        params = S.stack_params(model, 3)
        with torch.no_grad():  # make the copies differ, norms' gains and shifts included
            gen = torch.Generator().manual_seed(1)
            for p in params.values():
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
            got = S.stacked_logits(cfg, params, b.x)
            for i in range(3):
                model.load_state_dict(S.unstack(params, i))
                torch.testing.assert_close(got[i], model(b.x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        S.check_stackable(GPTConfig(norm="rmsnorm"))
    with pytest.raises(ValueError):
        S.check_stackable(GPTConfig(placement="sandwich"))


def test_stacked_adam_is_torch_adam_per_copy():
    """Each copy follows torch.optim.Adam at its own learning rate, step after step."""
    import torch

    from normedu.experiments.prepost_stacked import StackedAdam

    gen = torch.Generator().manual_seed(0)
    start = torch.randn(3, 4, 5, generator=gen)
    grads = [torch.randn(3, 4, 5, generator=gen) for _ in range(4)]
    lrs = torch.tensor([1e-3, 1e-2, 0.0])
    stacked = {"w": start.clone().requires_grad_()}
    opt = StackedAdam(stacked, betas=(0.9, 0.98))
    for g in grads:
        stacked["w"].grad = g.clone()
        opt.step(lrs)
    for i, lr in enumerate(lrs.tolist()):
        w = start[i].clone().requires_grad_()
        ref = torch.optim.Adam([w], lr=lr, betas=(0.9, 0.98), foreach=False)
        for g in grads:
            w.grad = g[i].clone()
            ref.step()
        torch.testing.assert_close(stacked["w"][i].detach(), w.detach(), rtol=1e-6, atol=1e-7)


def test_tinygpt_at_init_is_tinygpt_bit_for_bit():
    """A model whose weights are copied from an earlier draw of its seed equals a fresh one,
    for every switch and both placements (the embeddings' scale included)."""
    import torch

    from normedu.transformer import GPTConfig, TinyGPT

    W._DRAWS.clear()
    base = GPTConfig(vocab=6, d_model=8, n_heads=2, n_layers=2, max_len=4, placement="post")
    W.tinygpt_at_init(base)  # draws seed 0's weights
    every = {k: v for ch in E.SWITCHES.values() for k, v in ch.items()}
    for cfg in (base.with_(placement="pre"), base.with_(**every), base.with_(seed=1)):
        got, fresh = W.tinygpt_at_init(cfg).state_dict(), TinyGPT(cfg).state_dict()
        assert got.keys() == fresh.keys()
        assert all(torch.equal(got[k], fresh[k]) for k in fresh)
    W._DRAWS.clear()


def test_encoder_profiles_share_one_stack():
    """Both placements measured on one reference stack equal stacks built for each."""
    import torch

    size = TINY.wide
    for seed in (0, 1):
        x, _, labels = W._wide_batch(size, seed)
        for placement in ("post", "pre"):
            layers, head = W.encoder_stack(seed, size, norm_first=placement == "pre")
            h = x
            for layer in layers:
                h = layer(h)
            torch.nn.functional.cross_entropy(head(h).flatten(0, 1), labels.flatten()).backward()
            want = [float(layer.linear2.weight.grad.norm()) for layer in layers]
            got = E.encoder_grad_profile(placement, seed, size=size)
            np.testing.assert_allclose(got, want, rtol=1e-6)
