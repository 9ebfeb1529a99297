"""normedu.convnet (the digits CNN) and normedu.experiments.convnet (its experiments)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch import nn

from normedu import functional as Fn
from normedu.convnet import conv_net, conv_norm, norm_modules
from normedu.experiments import convnet as CN


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _inputs_of(model: nn.Module, layer: nn.Module, x: torch.Tensor) -> tuple:
    """(input, output) of ``layer`` during ``model(x)``, recorded by a forward hook."""
    seen = {}
    h = layer.register_forward_hook(lambda _m, i, o: seen.update(x=i[0], y=o))
    try:
        with torch.no_grad():
            model(x)
    finally:
        h.remove()
    return seen["x"], seen["y"]


def test_groupnorm_layer_matches_the_numpy_reference():
    model = conv_net("groupnorm", groups=4, seed=0)
    gn = norm_modules(model)[1]
    assert isinstance(gn, nn.GroupNorm) and gn.num_groups == 4
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # non-trivial gamma and beta, so that their per-channel use is tested
        gn.weight.copy_(torch.randn(16, generator=gen))
        gn.bias.copy_(torch.randn(16, generator=gen))
    x = torch.randn(3, 1, 8, 8, generator=gen)
    inp, out = _inputs_of(model, gn, x)
    ref = Fn.group_norm(
        inp.double().numpy(),
        gn.weight.double().detach().numpy(),
        gn.bias.double().detach().numpy(),
        4,
    )
    np.testing.assert_allclose(out.numpy(), ref, atol=2e-5, rtol=0)


def test_batchnorm_layer_takes_statistics_over_batch_and_positions():
    model = conv_net("batchnorm", seed=0).train()
    bn = norm_modules(model)[0]
    assert isinstance(bn, nn.BatchNorm2d)
    inp, out = _inputs_of(
        model, bn, torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    )
    ref, _, _ = Fn.batch_norm(inp.double().numpy())  # stats over axes (0, 2, 3), biased var
    np.testing.assert_allclose(out.numpy(), ref, atol=2e-5, rtol=0)


@pytest.mark.parametrize("position", ["before", "after"])
def test_norm_position_orders_the_block(position):
    model = conv_net("batchnorm", norm_position=position, seed=0).eval()
    order: list[str] = []
    hooks = [
        m.register_forward_hook(lambda m, _i, _o: order.append(type(m).__name__))
        for m in model
        if isinstance(m, (nn.Conv2d, nn.ReLU, nn.BatchNorm2d))
    ]
    bn = norm_modules(model)[0]
    inp, _ = _inputs_of(
        model, bn, torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    )
    for h in hooks:
        h.remove()
    block = (
        ["Conv2d", "BatchNorm2d", "ReLU"]
        if position == "before"
        else ["Conv2d", "ReLU", "BatchNorm2d"]
    )
    assert order == block * 2
    # After the ReLU the norm sees only non-negative values; before it, the conv's raw output.
    assert (inp.min() >= 0) == (position == "after")
    # A conv directly followed by a norm has no bias; one followed by the ReLU keeps it.
    convs = [m for m in model if isinstance(m, nn.Conv2d)]
    assert all((c.bias is not None) == (position == "after") for c in convs)


def test_switch_errors_and_none():
    with pytest.raises(ValueError, match="per token"):
        conv_norm("layernorm", 16)
    with pytest.raises(ValueError, match="must divide"):
        conv_norm("groupnorm", 16, groups=3)
    with pytest.raises(ValueError, match="norm_position"):
        conv_net(norm_position="middle")
    plain = conv_net("none", seed=0)
    assert norm_modules(plain) == [] and plain(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_groupnorm_backward_is_layernorm_backward_per_group_row():
    """The chapter's walk: (B, C, H, W) -> (B, G, C/G*H*W) rows, gamma applied before."""
    rng = np.random.default_rng(0)
    B, C, H, W, G = 3, 6, 4, 4, 3
    x, dout = rng.normal(1.0, 2.0, (B, C, H, W)), rng.normal(size=(B, C, H, W))
    gamma, beta = rng.normal(size=C), rng.normal(size=C)
    g4 = gamma[None, :, None, None]
    rows = (B, G, C // G * H * W)
    dx_rows = Fn.layer_norm_backward((dout * g4).reshape(rows), x.reshape(rows))[0].reshape(x.shape)
    xhat = Fn.group_norm(x, None, None, G)
    xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
    TF.group_norm(xt, G, gt, bt).backward(torch.tensor(dout))
    np.testing.assert_allclose(dx_rows, xt.grad.numpy(), atol=1e-10)
    np.testing.assert_allclose((dout * xhat).sum((0, 2, 3)), gt.grad.numpy(), atol=1e-10)
    np.testing.assert_allclose(dout.sum((0, 2, 3)), bt.grad.numpy(), atol=1e-10)
    # gamma applied after the per-row backward is wrong when gamma varies within a group.
    gamma_after = Fn.layer_norm_backward(dout.reshape(rows), x.reshape(rows))[0].reshape(x.shape)
    assert np.abs(gamma_after * g4 - xt.grad.numpy()).max() > 1e-2


def test_a_short_training_run_reduces_the_loss():
    from normedu.data import digits
    from normedu.training import train_epoch

    d = digits()
    x, y = d.x_train[:256].reshape(-1, 1, 8, 8), d.y_train[:256]
    model = conv_net("groupnorm", groups=2, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with torch.no_grad():
        before = float(TF.cross_entropy(model(x), y))
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        train_epoch(model, opt, x, y, 16, gen)
    with torch.no_grad():
        after = float(TF.cross_entropy(model(x), y))
    assert before > 2.0 and after < 0.5 * before


def test_difference_and_crossover_rules():
    # Two seeds per side: diff = mean(a) - mean(b), se from the sample variances.
    d = CN.difference([0.10, 0.12], [0.20, 0.22])
    assert d["diff"] == pytest.approx(-0.10)
    assert d["se"] == pytest.approx(math.sqrt(0.0002 / 2 + 0.0002 / 2))
    assert d["clear"]
    # Paired: the spread of the per-seed differences (0.02 and 0.04 here), not of each side.
    p = CN.difference([0.12, 0.30], [0.10, 0.26], paired=True)
    assert p["se"] == pytest.approx(np.std([0.02, 0.04], ddof=1) / math.sqrt(2))
    assert p["clear"] and not CN.difference([0.12, 0.30], [0.10, 0.26])["clear"]
    assert not CN.difference([0.1], [0.2])["clear"]  # one seed: no spread, never clear
    # Seeds that agree exactly: the standard error falls back to the resolution, not to zero.
    tied = CN.difference([0.036, 0.036], [0.033, 0.033], resolution=1 / 450)
    assert tied["se"] == pytest.approx(1 / 450) and not tied["clear"]
    clear_gn, noise = {"diff": -0.1, "clear": True}, {"diff": -0.01, "clear": False}
    sweep = {"batch_sizes": [2, 4, 8], "gn_minus_bn": [clear_gn, clear_gn, noise]}
    assert CN.crossover(sweep) == 4
    sweep["gn_minus_bn"] = [noise, clear_gn, clear_gn]  # must hold from the smallest size up
    assert CN.crossover(sweep) is None
    sweep["gn_minus_bn"] = [{"diff": 0.1, "clear": True}] * 3  # BatchNorm clearly better
    assert CN.crossover(sweep) is None


def test_judged_pairs_by_seed_and_ignores_one_image():
    one = 1 / len(CN.digits().y_test)
    # Every seed 2 images worse: a difference, with the standard error floored at one image.
    d = CN.judged([0.10 + 2 * one, 0.20 + 2 * one, 0.05 + 2 * one], [0.10, 0.20, 0.05])
    assert d["clear"] and d["diff"] == pytest.approx(2 * one) and d["se"] == pytest.approx(one)
    # Each seed exactly one image apart counts for neither side, and the mean is within 2 SE.
    tied = CN.judged([one, -one, one], [0.0, 0.0, 0.0])
    assert not tied["clear"] and tied["comparison"].positive == 0


def test_group_errors_plot_draws_means_and_seeds():
    from normedu.plots import groupnorm as P

    gs = {"groups": [1, 4, 16], "errors": [0.1, 0.05, 0.2], "all": [[0.1, 0.1]] * 3, "channels": 16}
    ax = P.group_errors(gs).axes[0]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [10, 5, 20])
    assert len(ax.collections) == 3
    assert "InstanceNorm" in ax.get_xticklabels()[-1].get_text()


def test_stacked_training_matches_training_each_network_alone():
    # The reference: each network trained on its own by the plain loop (train_epoch). Five
    # steps: rounding differences stay near 1e-7 (over a whole epoch they can grow to 1e-3).
    from normedu.data import digits
    from normedu.experiments.convnet_stack import train_stacked
    from normedu.training import train_epoch

    data, batch, lr = digits(), 64, 0.1
    x, y = data.x_train[: 5 * batch], data.y_train[: 5 * batch]
    runs = (("batchnorm", None, 0), ("groupnorm", 2, 1), ("groupnorm", 4, 1))
    for position in ("before", "after"):
        stacked = train_stacked(runs, batch, x, y, lr=lr, width=8, norm_position=position)
        for (norm, g, seed), got in zip(runs, stacked, strict=True):
            ref = conv_net(norm, groups=g, norm_position=position, channels=(8, 8), seed=seed)
            opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=0.9)
            gen = torch.Generator().manual_seed(seed + 1)
            train_epoch(ref, opt, x.reshape(-1, 1, 8, 8), y, batch, gen, drop_last=True)
            want, have = ref.state_dict(), got.state_dict()
            assert want.keys() == have.keys()
            for k in want:
                torch.testing.assert_close(have[k], want[k], atol=1e-5, rtol=1e-4)
