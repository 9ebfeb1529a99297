"""normedu.training: the shared epoch loop, accuracy and Adam."""

import pytest
import torch
from torch import nn

from normedu.training import accuracy, adam, train_epoch


def test_accuracy_counts_argmax_matches():
    logits = torch.tensor([[0.1, 0.9], [2.0, -1.0], [0.0, 3.0], [5.0, 4.0]])
    assert accuracy(logits, torch.tensor([1, 0, 0, 1])) == pytest.approx(0.5)


@pytest.mark.parametrize("drop_last,steps", [(False, 4), (True, 3)])
def test_train_epoch_steps_over_a_random_permutation(drop_last, steps):
    x, y = torch.randn(10, 3), torch.randint(0, 2, (10,))
    model = nn.Linear(3, 2)
    seen = []
    model.register_forward_hook(lambda m, inp, out: seen.append(inp[0].clone()))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    train_epoch(model, opt, x, y, 3, torch.Generator().manual_seed(0), drop_last=drop_last)
    assert [len(b) for b in seen] == [3] * 3 + ([] if drop_last else [1])
    # the rows seen are the permutation the same seed draws, in order
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(torch.cat(seen), x[perm[: 3 * steps if drop_last else 10]])
    assert not torch.equal(model.weight, before)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        train_epoch(model, opt, x, y, 0, torch.Generator())


def test_adam_takes_the_steps_of_torch_adam():
    # Five steps on the same problem: the fused update against PyTorch's per-tensor loop.
    x, y = torch.randn(16, 3, generator=torch.Generator().manual_seed(0)), torch.arange(16) % 2
    models = [nn.Linear(3, 2), nn.Linear(3, 2)]
    models[1].load_state_dict(models[0].state_dict())
    start = models[0].weight.detach().clone()
    opts = [
        adam(models[0].parameters(), lr=0.05, betas=(0.9, 0.98)),
        torch.optim.Adam(models[1].parameters(), lr=0.05, betas=(0.9, 0.98), foreach=False),
    ]
    assert opts[0].defaults["fused"] and not opts[1].defaults["fused"]
    for _ in range(5):
        for model, opt in zip(models, opts, strict=True):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    for ours, ref in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    assert (models[0].weight - start).abs().max() > 0.1  # five steps of 0.05 moved it
