"""The chapter "Where the norm goes in today's large models": its table of today's models
(:data:`MODELS`, the one source of the page's table and of the ledger's rows) and the claim
each row makes (:func:`model_row`). Registers no checks of its own:
:mod:`.since2020_placement`'s ``check`` returns these rows.
"""

from __future__ import annotations

from ..claim import Claim, cite

CHAPTER = "since2020_placement"
UNVERIFIED = "unverified"

#: Today's models: (id, model, norm, placement, QK-norm, eps, sources (MyST), how each field
#: was read). eps is the value of a released configuration, or of released reference code
#: that fixes it with no configuration field to override it; else UNVERIFIED (a default that
#: a configuration may override is not the model's value).
MODELS: tuple[tuple[str, str, str, str, str, str, str, str], ...] = (
    (
        "llama1",
        "LLaMA 1",
        "RMSNorm",
        "pre",
        "no",
        UNVERIFIED,
        cite("touvron2023llama") + "; " + cite("meta_llama_code", where="llama/model.py"),
        "reference code of the LLaMA 1 release (branch llama_v1): RMSNorm before attention and "
        "before the feed-forward layer, one after the last block; eps comes from params.json, "
        "which is not in the repository",
    ),
    (
        "llama2",
        "LLaMA 2",
        "RMSNorm",
        "pre",
        "no",
        UNVERIFIED,
        cite("touvron2023llama2")
        + "; "
        + cite("meta_llama_code", where="llama/model.py")
        + "; "
        + cite("llama_models_skus", where="llama_models/sku_list.py"),
        "the paper keeps LLaMA's pre-normalization with RMSNorm; no released params.json read. "
        "The llama-models package (release 0.0.50) lists norm_eps 1e-05 for the Llama 2 "
        "models, but those entries carry Llama 3's n_kv_heads 8 and rope_theta 500000, so they "
        "are not taken as Llama 2's",
    ),
    (
        "llama3",
        "LLaMA 3",
        "RMSNorm",
        "pre",
        "no",
        "1e-5",
        cite("grattafiori2024llama3")
        + "; "
        + cite("llama3_params", where="llama_models/sku_list.py"),
        "eps from Meta's released model registry, the llama-models package (release 0.0.50 on "
        "PyPI): the Llama 3 8B and 70B entries set norm_eps 1e-05; placement as LLaMA's",
    ),
    (
        "mistral",
        "Mistral 7B",
        "RMSNorm",
        "pre",
        "no",
        UNVERIFIED,
        cite("jiang2023mistral")
        + "; "
        + cite("mistral_inference", where="mistral_inference/model.py"),
        "reference code (package release 1.0.4): attention_norm, ffn_norm before the "
        "sub-layers, norm at the end; eps from params.json (norm_eps, no default), not read",
    ),
    (
        "gemma1",
        "Gemma 1",
        "RMSNorm",
        "pre",
        "no",
        "1e-6",
        cite("gemma2024") + "; " + cite("gemma_pytorch_config", where="gemma/config.py"),
        "the 2B and 7B configurations keep rms_norm_eps = 1e-6; GemmaDecoderLayer normalizes the "
        "sub-layer inputs only",
    ),
    (
        "gemma2",
        "Gemma 2",
        "RMSNorm",
        "pre and post (sandwich)",
        "no",
        "1e-6",
        cite("gemma2_2024") + "; " + cite("gemma_pytorch_config", where="gemma/config.py"),
        "the 9B and 27B configurations: use_pre_ffw_norm and use_post_ffw_norm, rms_norm_eps "
        "1e-6; attention logits soft-capped at 50 (squashed as 50·tanh(s/50), so that none exceeds "
        "50) instead of a QK-norm",
    ),
    (
        "gemma3",
        "Gemma 3",
        "RMSNorm",
        "pre and post (sandwich)",
        "yes, over each head's features",
        "1e-6",
        cite("gemma3_2025")
        + "; "
        + cite("gemma_jax_transformer", where="gemma/transformer.py")
        + "; "
        + cite("gemma_jax_layers", where="gemma/gm/nn/_layers.py"),
        "the report: QK-norm replaces Gemma 2's soft-capping, pre- and post-norms kept. "
        "Google DeepMind's reference code: the gemma3 configurations set use_post_attn_norm, "
        "use_post_ffw_norm and use_qk_norm True and attn_logits_soft_cap None; its RMSNorm "
        "fixes eps at 1e-06 (rsqrt(var + 1e-06)), with no configuration field",
    ),
    (
        "olmo2",
        "OLMo 2",
        "RMSNorm",
        "on the sub-layer output, x + Norm(F(x))",
        "yes, over the full width",
        "1e-6",
        cite("olmo2024olmo2") + "; " + cite("olmo_core_config", where="config.py"),
        "OLMo-core's olmo2_7B configuration: the block type that normalizes the sub-layer's "
        "output (reordered_norm in the code), qk_norm True (the model's RMSNorm over all heads' "
        "features), layer_norm_eps 1e-6",
    ),
    (
        "qwen25",
        "Qwen2.5",
        "RMSNorm",
        "pre",
        "no (bias on q, k, v)",
        UNVERIFIED,
        cite("qwen2024qwen25") + "; " + cite("hf_qwen2_code", where="modeling_qwen2.py"),
        "the report: pre-normalization with RMSNorm. transformers' Qwen2 model (release "
        "v4.51.0), which Qwen2.5 uses: Qwen2Attention's q_proj, k_proj and v_proj have biases "
        "and no norm acts on queries or keys; input_layernorm and post_attention_layernorm "
        "before the two sub-layers. No config.json read",
    ),
    (
        "qwen3",
        "Qwen3",
        "RMSNorm",
        "pre",
        "yes, over each head's features",
        UNVERIFIED,
        cite("qwen2025qwen3") + "; " + cite("hf_qwen3_code", where="modular_qwen3.py"),
        "transformers' Qwen3 model (release v4.51.0): Qwen3Attention, built on the Llama "
        "attention, adds q_norm and k_norm, RMSNorms over head_dim ('unlike olmo, only on the "
        "head dim'); their eps is config.rms_norm_eps, whose released value was not read",
    ),
    (
        "deepseekv3",
        "DeepSeek-V3",
        "RMSNorm",
        "pre",
        "no (RMSNorms on the compressed queries and keys-values of its attention)",
        "1e-6 (reference code; no configuration field)",
        cite("deepseek2024v3") + "; " + cite("deepseek_v3_code", where="inference/model.py"),
        "attn_norm and ffn_norm before the sub-layers, norm at the end; the attention (MLA, "
        "multi-head latent attention) first compresses the stream to a short vector and "
        "normalizes that (q_norm, kv_norm), not each head's queries and keys. Every RMSNorm is "
        "built as RMSNorm(dim) with eps = 1e-6, and ModelArgs, the configuration the released "
        "config files fill, has no eps field: the reference code (as released with the weights "
        "on the Hugging Face Hub) fixes the value",
    ),
)


#: Per row of :data:`MODELS`, the source's own words behind it (code is quoted as written) and
#: where they stand; a row without an entry quotes nothing (its source was not read again here).
QUOTES: dict[str, tuple[str, str]] = {
    "llama1": (
        "self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)",
        "llama/model.py, TransformerBlock.__init__",
    ),
    "llama2": (
        '"norm_eps": 1e-05, "rope_theta": 500000.0, "use_scaled_rope": False,',
        "llama_models/sku_list.py, llama2_base_models, Llama 2 7b",
    ),
    "llama3": ('"norm_eps": 1e-05,', "llama_models/sku_list.py, llama3_base_models, Llama 3 8b"),
    "mistral": (
        "self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)",
        "mistral_inference/model.py, TransformerBlock.__init__",
    ),
    "gemma1": ("rms_norm_eps: float = 1e-6", "gemma/config.py, GemmaConfig"),
    "gemma2": (
        "use_pre_ffw_norm=True, use_post_ffw_norm=True, final_logit_softcapping=30.0, "
        "attn_logit_softcapping=50.0,",
        "gemma/config.py, get_config_for_9b",
    ),
    "gemma3": (
        "use_post_attn_norm=True, use_post_ffw_norm=True, use_qk_norm=True,",
        "gemma/transformer.py, TransformerConfig.gemma3_27b",
    ),
    "qwen25": (
        "self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * "
        "self.head_dim, bias=True)",
        "modeling_qwen2.py, Qwen2Attention.__init__",
    ),
    "qwen3": (
        "self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)  # unlike olmo, "
        "only on the head dim!",
        "modular_qwen3.py, Qwen3Attention.__init__",
    ),
    "deepseekv3": (
        "def __init__(self, dim: int, eps: float = 1e-6):",
        "inference/model.py, RMSNorm",
    ),
}


def model_row(row) -> Claim:
    key, model, norm, where, qk, eps, source, how = row
    quote, quote_where = QUOTES.get(key, ("", ""))
    return Claim(
        id=f"since2020_placement.model_{key}",
        chapter=CHAPTER,
        claim=f"{model}: {norm}, {where}; QK-norm {qk}; ε {eps}",
        source=source,
        measured=how,
        verdict="cited",
        device="—",
        note="ε not read from a released configuration" if eps == UNVERIFIED else "",
        quote=quote,
        quote_where=quote_where,
    )
