"""The stacked trainer against its reference: each model trained alone with train_epoch."""

import torch

from normedu.data import digits
from normedu.experiments.rmsnorm import ABLATION_NORMS, AblationSize, _ablation_model
from normedu.stacked import StackedMLP, stacked_accuracy, train_stacked
from normedu.training import accuracy, adam, train_epoch


def test_stacked_models_train_as_if_alone():
    """Every norm, two batch orders, one epoch: the stacked logits and accuracies are those of
    the models trained one by one (same weights, batches and Adam), to float32 rounding."""
    size = AblationSize(depth=2, width=8, gains=(3.0,))
    data = digits()
    runs = [(n, s) for n in ABLATION_NORMS for s in (0, 1)]
    net = StackedMLP([_ablation_model(n, 3.0, s, size) for n, s in runs], [n for n, _ in runs])
    train_stacked(
        net, data.x_train, data.y_train, [s + 1 for _, s in runs], batch=64, epochs=1, lr=1e-2
    )
    with torch.no_grad():
        stacked = net(data.x_test.expand(len(runs), *data.x_test.shape))
    accs = stacked_accuracy(net, data.x_test, data.y_test)
    for k, (norm, seed) in enumerate(runs):
        model = _ablation_model(norm, 3.0, seed, size)
        opt = adam(model.parameters(), lr=1e-2)
        train_epoch(
            model, opt, data.x_train, data.y_train, 64, torch.Generator().manual_seed(seed + 1)
        )
        with torch.no_grad():
            alone = model(data.x_test)
        torch.testing.assert_close(stacked[k], alone, rtol=1e-4, atol=1e-5)
        assert accs[k] == accuracy(alone, data.y_test)


def test_padding_a_narrower_model_changes_nothing():
    """Widths 3 and 8 in one stack (the narrower one zero-padded and masked) train exactly as
    each width in a stack of its own, unpadded (the path checked against training alone above):
    the padding neither enters the narrow models' statistics nor learns."""
    from normedu.experiments.layernorm import small_width_model

    data = digits()

    def trained(runs):
        net = StackedMLP([small_width_model(w, n, 0) for n, w in runs], [n for n, _ in runs])
        train_stacked(
            net, data.x_train, data.y_train, [0] * len(runs), batch=128, epochs=1, lr=2e-2
        )
        with torch.no_grad():
            return net, net(data.x_test.expand(len(runs), *data.x_test.shape))

    runs = [(n, w) for n in ("layernorm", "none") for w in (3, 8)]
    net, mixed = trained(runs)
    for k, run in enumerate(runs):
        # A LayerNorm of 3 features amplifies float32 rounding (mean vs sum / 3) to ~1e-4 in an
        # epoch; padding that entered its mean or variance would move the logits by ~0.1.
        torch.testing.assert_close(mixed[k], trained([run])[1][0], rtol=1e-3, atol=1e-3)
    assert not net.weights[0][0, :, 3:].any() and not net.weights[1][0, 3:].any()


def test_written_out_adam_is_torchs():
    """The written-out Adam against torch.optim.Adam: five steps, float32 rounding."""
    from normedu.training import WrittenAdam

    gen = torch.Generator().manual_seed(0)
    ours = [torch.randn(3, 4, generator=gen), torch.randn(5, generator=gen)]
    theirs = [p.clone().requires_grad_() for p in ours]
    ours = [p.requires_grad_() for p in ours]
    mine, opt = WrittenAdam(ours, lr=0.1), torch.optim.Adam(theirs, lr=0.1)
    for _ in range(5):
        grads = [torch.randn(p.shape, generator=gen) for p in ours]
        for p, q, g in zip(ours, theirs, grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        mine.step()
        opt.step()
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
