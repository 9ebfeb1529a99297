"""TinyGPT and its blocks against independent reference computations."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normedu.conventions import DEFAULT_EPS
from normedu.transformer import (
    MLP,
    Block,
    CausalSelfAttention,
    GPTConfig,
    TinyGPT,
    count_norms,
)


def test_attention_matches_torch_multihead_attention_with_causal_mask():
    torch.manual_seed(0)
    d, h, t = 16, 4, 7
    ours = CausalSelfAttention(d, h).double()
    ref = torch.nn.MultiheadAttention(d, h, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv.weight)
        ref.in_proj_bias.copy_(ours.qkv.bias)
        ref.out_proj.weight.copy_(ours.proj.weight)
        ref.out_proj.bias.copy_(ours.proj.bias)
    x = torch.randn(3, t, d, dtype=torch.float64)
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    expected, _ = ref(x, x, x, attn_mask=mask, need_weights=False)
    torch.testing.assert_close(ours(x), expected, rtol=1e-10, atol=1e-12)


def test_attention_is_causal():
    torch.manual_seed(1)
    attn = CausalSelfAttention(8, 2)
    x = torch.randn(2, 6, 8)
    y = attn(x)
    x2 = x.clone()
    x2[:, 4:] = torch.randn(2, 2, 8)  # change the future only
    y2 = attn(x2)
    torch.testing.assert_close(y[:, :4], y2[:, :4])
    assert not torch.allclose(y[:, 4:], y2[:, 4:])


def _ref_block(block: Block, x: torch.Tensor, placement: str, residual: bool) -> torch.Tensor:
    """The block written out with torch.nn.functional ops (independent of Block._sub)."""

    def ln(m, z):
        return F.layer_norm(z, (z.shape[-1],), m.weight, m.bias, m.eps)

    def attn(z):
        return block.attn(z)

    def mlp(z):
        return F.linear(
            F.gelu(F.linear(z, block.mlp.fc1.weight, block.mlp.fc1.bias)),
            block.mlp.fc2.weight,
            block.mlp.fc2.bias,
        )

    r = 1.0 if residual else 0.0
    if placement == "pre":
        x = r * x + attn(ln(block.norm1, x))
        return r * x + mlp(ln(block.norm2, x))
    x = ln(block.norm1, r * x + attn(x))
    return ln(block.norm2, r * x + mlp(x))


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("residual", [True, False])
def test_block_matches_reference(placement, residual):
    cfg = GPTConfig(d_model=16, n_heads=2, placement=placement, residual=residual, seed=3)
    block = TinyGPT(cfg).blocks[0].double()
    with torch.no_grad():  # non-trivial gamma/beta so the affine part is tested too
        for m in (block.norm1, block.norm2):
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-0.3, 0.3)
    x = torch.randn(2, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(block(x), _ref_block(block, x, placement, residual))


def test_rmsnorm_and_none_blocks():
    x = torch.randn(2, 4, 16)
    b = Block(GPTConfig(d_model=16, n_heads=2, norm="rmsnorm"))
    assert type(b.norm1).__name__ == "RMSNorm" and not hasattr(b.norm1, "bias")
    expected = x + b.attn(F.rms_norm(x, (16,), b.norm1.weight, DEFAULT_EPS))
    expected = expected + b.mlp(F.rms_norm(expected, (16,), b.norm2.weight, DEFAULT_EPS))
    torch.testing.assert_close(b(x), expected)
    b0 = Block(GPTConfig(d_model=16, n_heads=2, norm="none"))
    h = x + b0.attn(x)
    torch.testing.assert_close(b0(x), h + b0.mlp(h))


def test_mlp_shapes():
    m = MLP(8, 32)
    assert m(torch.randn(3, 5, 8)).shape == (3, 5, 8)


def test_gpt_forward_matches_manual_composition():
    cfg = GPTConfig(vocab=11, d_model=16, n_heads=4, n_layers=3, max_len=9, seed=5)
    model = TinyGPT(cfg)
    idx = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(0))
    x = model.tok.weight[idx] + model.pos.weight[:9]
    for blk in model.blocks:
        x = blk(x)
    x = F.layer_norm(x, (16,), model.final.weight, model.final.bias, DEFAULT_EPS)
    expected = x @ model.head.weight.T + model.head.bias
    torch.testing.assert_close(model(idx), expected)
    assert model(idx).shape == (2, 9, 11)


def test_final_norm_only_for_pre_norm():
    assert count_norms(TinyGPT(GPTConfig(n_layers=12, placement="pre"))) == 25
    assert count_norms(TinyGPT(GPTConfig(n_layers=12, placement="post"))) == 24
    assert count_norms(TinyGPT(GPTConfig(n_layers=3, norm="none"))) == 0
    assert count_norms(TinyGPT(GPTConfig(n_layers=2, placement="post", final_norm=True))) == 5
    assert isinstance(TinyGPT(GPTConfig(placement="post")).final, torch.nn.Identity)


@pytest.mark.parametrize("init", ["xavier", "gpt2"])
def test_init_is_deterministic_and_seeded(init):
    a = TinyGPT(GPTConfig(seed=7, init=init))
    b = TinyGPT(GPTConfig(seed=7, init=init))
    c = TinyGPT(GPTConfig(seed=8, init=init))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["blocks.0.attn.qkv.weight"], sc["blocks.0.attn.qkv.weight"])
    assert torch.all(sa["blocks.0.norm1.weight"] == 1) and torch.all(sa["blocks.0.norm1.bias"] == 0)
    assert torch.all(sa["blocks.0.mlp.fc1.bias"] == 0)


def test_xavier_bounds_and_gpt2_scaled_projection():
    m = TinyGPT(GPTConfig(d_model=32, n_heads=4, n_layers=8, init="xavier"))
    w = m.blocks[0].mlp.fc1.weight
    bound = (6 / (32 + 128)) ** 0.5
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    g = TinyGPT(GPTConfig(d_model=64, n_heads=4, n_layers=8, init="gpt2"))
    std_fc1 = g.blocks[0].mlp.fc1.weight.std().item()
    std_fc2 = g.blocks[0].mlp.fc2.weight.std().item()
    assert abs(std_fc1 - 0.02) < 0.002
    assert abs(std_fc2 - 0.02 / 4) < 0.0005  # 1/sqrt(2 * 8) = 1/4


def test_layers_names_blocks_in_order():
    m = TinyGPT(GPTConfig(n_layers=3))
    layers = m.layers()
    assert list(layers) == ["block0", "block1", "block2"]
    assert layers["block2"] is m.blocks[2]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"placement": "middle"}, "placement"),
        ({"norm": "batchnorm"}, "norm"),
        ({"d_model": 10, "n_heads": 4}, "divisible"),
        ({"n_layers": 0}, "n_layers"),
        ({"init": "he"}, "init"),
    ],
)
def test_config_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**kw)


def test_input_validation():
    m = TinyGPT(GPTConfig(max_len=4))
    with pytest.raises(ValueError, match="max_len"):
        m(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        m(torch.zeros(5, dtype=torch.long))
    with pytest.raises(TypeError, match="integer"):
        m(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"\(B, T, 8\)"):
        CausalSelfAttention(8, 2)(torch.zeros(2, 3, 6))


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_switched_tinygpt_is_torch_encoder_layer_stack(placement):
    """With every switch of the Pre/Post-Norm cross-check flipped (no mask, ReLU, no final
    norm), TinyGPT's blocks compute what torch.nn.TransformerEncoderLayer computes."""
    cfg = GPTConfig(
        vocab=7,
        d_model=16,
        n_heads=4,
        n_layers=2,
        max_len=5,
        placement=placement,
        seed=3,
        causal=False,
        activation="relu",
        embed_std=2**-0.5,
        final_norm=False,
    )
    model = TinyGPT(cfg)
    ref = []
    for blk in model.blocks:
        layer = torch.nn.TransformerEncoderLayer(
            16,
            4,
            cfg.ff,
            dropout=0.0,
            activation="relu",
            batch_first=True,
            norm_first=placement == "pre",
        )
        with torch.no_grad():
            layer.self_attn.in_proj_weight.copy_(blk.attn.qkv.weight)
            layer.self_attn.in_proj_bias.copy_(torch.randn(48))
            blk.attn.qkv.bias.copy_(layer.self_attn.in_proj_bias)
            for a, b in (
                (layer.self_attn.out_proj, blk.attn.proj),
                (layer.linear1, blk.mlp.fc1),
                (layer.linear2, blk.mlp.fc2),
                (layer.norm1, blk.norm1),
                (layer.norm2, blk.norm2),
            ):
                a.weight.copy_(b.weight)
                a.bias.copy_(b.bias)
        ref.append(layer.eval())
    idx = torch.randint(0, 7, (3, 5), generator=torch.Generator().manual_seed(0))
    x = model.tok(idx) + model.pos(torch.arange(5))
    assert x.std().item() == pytest.approx(1.0, abs=0.35)  # unit-variance embeddings
    want = x
    for layer in ref:
        want = layer(want)
    torch.testing.assert_close(model.hidden(idx), want, rtol=1e-4, atol=1e-5)


def test_switch_validation_and_relu_mlp():
    with pytest.raises(ValueError, match="activation"):
        GPTConfig(activation="tanh")
    with pytest.raises(ValueError, match="embed_std"):
        GPTConfig(embed_std=0.0)
    mlp = MLP(4, 8, activation="relu")
    x = torch.randn(2, 4)
    torch.testing.assert_close(mlp(x), mlp.fc2(torch.relu(mlp.fc1(x))))
