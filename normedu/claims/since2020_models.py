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
        "reference code: RMSNorm before attention and before the feed-forward layer, one after "
        "the last block; eps comes from params.json, which is not in the repository",
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
        + cite("llama_models_skus", where="models/sku_list.py"),
        "the paper keeps LLaMA's pre-normalization with RMSNorm; no released params.json read. "
        "meta-llama/llama-models' models/sku_list.py lists norm_eps 1e-05 for the Llama 2 "
        "models, but those entries carry Llama 3's values (n_kv_heads 8, vocab_size 128256, "
        "rope_theta 500000), so they are not taken as Llama 2's",
    ),
    (
        "llama3",
        "LLaMA 3",
        "RMSNorm",
        "pre",
        "no",
        "1e-5",
        cite("grattafiori2024llama3") + "; " + cite("llama3_params", where="params.json"),
        "eps from a released configuration file, the params.json of Meta-Llama-3-8B-Instruct "
        "(norm_eps 1e-05); placement as LLaMA's",
    ),
    (
        "mistral",
        "Mistral 7B",
        "RMSNorm",
        "pre",
        "no",
        UNVERIFIED,
        cite("jiang2023mistral") + "; " + cite("mistral_inference", where="one_file_ref.py"),
        "reference code: attention_norm, ffn_norm before the sub-layers, norm at the end; "
        "eps from params.json, not read",
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
        cite("qwen2024qwen25") + "; " + cite("hf_qwen3_code", where="modular_qwen3.py"),
        "the report: pre-normalization with RMSNorm; Qwen3's code adds q_norm and k_norm to "
        "the Qwen2 attention, which has none; no config.json read",
    ),
    (
        "qwen3",
        "Qwen3",
        "RMSNorm",
        "pre",
        "yes, over each head's features",
        UNVERIFIED,
        cite("qwen2025qwen3") + "; " + cite("hf_qwen3_code", where="modular_qwen3.py"),
        "q_norm and k_norm are RMSNorms over head_dim ('unlike olmo, only on the head dim'); "
        "their eps is config.rms_norm_eps, whose released value was not read",
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
        "config files fill, has no eps field: the reference code fixes the value",
    ),
)


def model_row(row) -> Claim:
    key, model, norm, where, qk, eps, source, how = row
    return Claim(
        id=f"since2020_placement.model_{key}",
        chapter=CHAPTER,
        claim=f"{model}: {norm}, {where}; QK-norm {qk}; ε {eps}",
        source=source,
        measured=how,
        verdict="cited",
        device="—",
        note="ε not read from a released configuration" if eps == UNVERIFIED else "",
    )
