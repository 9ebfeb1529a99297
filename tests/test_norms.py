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
    with guard.library_blocked(), pytest.raises(GradingError):
        getattr(torch.nn.functional, spec.function)(torch.ones(2, 16), (16,))


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
