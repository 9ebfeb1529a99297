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
#: was read). eps is the released configuration's value where the course could read it, else
#: UNVERIFIED (a code default is not a configuration).
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
        cite("touvron2023llama2") + "; " + cite("meta_llama_code", where="llama/model.py"),
        "the paper keeps LLaMA's pre-normalization with RMSNorm; no released params.json read",
    ),
    (
        "llama3",
        "LLaMA 3",
        "RMSNorm",
        "pre",
        "no",
        "1e-5",
        cite("grattafiori2024llama3") + "; " + cite("llama3_params", where="params.json"),
        "eps from a params.json of Meta-Llama-3-8B-Instruct (norm_eps 1e-05) stored with the "
        "repository in the index this course searched; placement as LLaMA's",
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
        "1e-6; attention logits soft-capped at 50 instead of a QK-norm",
    ),
    (
        "gemma3",
        "Gemma 3",
        "RMSNorm",
        "pre and post (sandwich)",
        "yes, per head",
        UNVERIFIED,
        cite("gemma3_2025"),
        "the report: QK-norm replaces Gemma 2's soft-capping, pre- and post-norms kept; no "
        "configuration read",
    ),
    (
        "olmo2",
        "OLMo 2",
        "RMSNorm",
        "on the sub-layer output, x + Norm(F(x))",
        "yes, over the full width",
        "1e-6",
        cite("olmo2024olmo2") + "; " + cite("olmo_core_config", where="config.py"),
        "OLMo-core's olmo2_7B: block reordered_norm, qk_norm True (the model's RMSNorm over all "
        "heads' features), layer_norm_eps 1e-6",
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
        "yes, per head",
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
        "no (RMSNorm on MLA's compressed latents)",
        UNVERIFIED,
        cite("deepseek2024v3") + "; " + cite("deepseek_v3_code", where="inference/model.py"),
        "attn_norm and ffn_norm before the sub-layers, norm at the end; every RMSNorm is built "
        "with the code's default eps, no configuration value read",
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
