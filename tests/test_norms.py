"""normedu.norms: every registered norm reaches every consumer of the registry."""

from __future__ import annotations

import pytest
import torch

from normedu import nn as nnu
from normedu import norms
from normedu.grading import GradingError, guard
from normedu.mlp import deep_mlp, norm_layers
from normedu.transformer import GPTConfig, TinyGPT, count_norms


@pytest.mark.parametrize("spec", norms.NORMS, ids=lambda s: s.kind)
def test_a_registered_norm_is_built_counted_and_guarded(spec):
    module = nnu.make_norm(spec.kind.upper(), 16)
    assert type(module).__name__ == spec.class_name
    assert isinstance(module, nnu.norm_classes())
    assert module(torch.randn(4, 16)).shape == (4, 16)
    assert len(norm_layers(deep_mlp(8, 16, 2, depth=2, norm=spec.kind))) == 2
    cfg = dict(vocab=8, d_model=16, n_heads=2, n_layers=1, max_len=4, norm=spec.kind)
    if spec.per_token:
        assert count_norms(TinyGPT(GPTConfig(**cfg))) == 3  # two per block and the final one
    else:
        with pytest.raises(ValueError, match="norm must be one of"):
            GPTConfig(**cfg)
    assert {spec.function, spec.class_name} <= guard.NORM_ATTRS
    # torch's entry point is blocked; a norm torch lacks (DyT) is blocked in normedu.nn.
    home = torch.nn.functional if hasattr(torch.nn.functional, spec.function) else nnu
    with guard.library_blocked(), pytest.raises(GradingError):
        getattr(home, spec.function)(torch.ones(2, 16), (16,))


@pytest.mark.parametrize("spec", norms.NORMS, ids=lambda s: s.kind)
def test_make_norm_passes_eps_only_to_a_norm_that_has_one(spec):
    module = nnu.make_norm(spec.kind, 16, eps=1e-3)
    assert (getattr(module, "eps", None) == 1e-3) == spec.has_eps


def test_unknown_kinds_name_the_choices():
    with pytest.raises(ValueError, match=r"unknown norm 'whitening'.*'layernorm'.*'none'"):
        norms.get("whitening")


def test_every_norm_is_drawn_in_its_own_okabe_ito_colour_with_a_second_cue():
    """A registered norm is plotted without an edit in normedu.plots: its colour (one of the
    colour-blind-safe Okabe-Ito set, none shared with another norm or 'none'), line style and
    marker come from the registry."""
    from normedu import plots

    colours = [spec.color for spec in norms.NORMS]
    assert set(colours) <= set(plots.OKABE_ITO) and len(set(colours)) == len(colours)
    assert plots.COLORS["none"] not in colours
    for spec in norms.NORMS:
        assert plots.COLORS[spec.kind] == spec.color
        assert plots.LINESTYLES[spec.kind] == spec.linestyle
        assert plots.MARKERS[spec.kind] == spec.marker
    styles = [(spec.linestyle, spec.marker) for spec in norms.NORMS]
    assert len(set(map(str, styles))) == len(styles)  # told apart without colour too


@pytest.mark.parametrize("spec", norms.NORMS, ids=lambda s: s.kind)
def test_a_registered_module_computes_its_numpy_reference_forward_and_backward(spec):
    """The torch module that make_norm builds (training mode, fresh γ = 1, β = 0) against the
    NumPy reference ``functional.<spec.function>`` and its backward, float64 in both: a new
    norm's module is checked without an edit here. An int argument of the reference is the
    group count the module was built with; a scalar the module holds under the argument's
    name (DyT's ``alpha``) is passed as it is."""
    import inspect

    import numpy as np

    from normedu import functional as F

    if not hasattr(F, spec.function):
        pytest.skip(f"normedu.functional has no {spec.function} reference yet")
    module = nnu.make_norm(spec.kind, 16).double()
    x = torch.randn(4, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 2
    x.requires_grad_(True)
    dout = torch.randn(4, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    module(x).backward(dout)
    forward, backward = getattr(F, spec.function), getattr(F, spec.function + "_backward")
    params = list(inspect.signature(forward, eval_str=True).parameters.values())[1:]
    ints = {p.name: norms.groups_for(16) for p in params if p.annotation is int}
    # A fresh module's scale is 1 and its shift 0: the reference gets the same (β by name).
    scalar = [
        p.name
        for p in params
        if isinstance(t := getattr(module, p.name, None), torch.Tensor) and t.dim() == 0
    ]
    held = {name: float(getattr(module, name)) for name in scalar}
    affine = {
        p.name: (np.zeros if p.name == "beta" else np.ones)(16)
        for p in params
        if p.annotation not in (int, float, bool)
        and not p.name.startswith("running")
        and p.name not in held
    }
    out = forward(x.detach().numpy(), **affine, **held, **ints)
    out = out[0] if isinstance(out, tuple) else out
    np.testing.assert_allclose(module(x).detach().numpy(), out, rtol=1e-10, atol=1e-10)
    back_params = inspect.signature(backward).parameters
    gamma = {"gamma": np.ones(16)} if "gamma" in back_params else {}
    gamma |= {k: v for k, v in held.items() if k in back_params}
    dx = backward(dout.numpy(), x.detach().numpy(), **gamma, **ints)[0]
    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-8, atol=1e-10)
