"""The RMSNorm chapter's ablation sentence (both branches) and its model list."""

from __future__ import annotations

from normedu.claims import rmsnorm as C
from normedu.experiments import rmsnorm as R
from normedu.ledger import VERDICTS


def _res(center_bad: float, rms_good: float = 0.92) -> R.AblationResult:
    acc = {
        2**0.5: {"layernorm": [0.93], "rmsnorm": [rms_good], "center": [0.88], "none": [0.89]},
        3.0: {"layernorm": [0.87], "rmsnorm": [0.87], "center": [center_bad], "none": [0.55]},
    }
    return R.AblationResult(acc, R.ABLATION)


def test_ablation_sentence_when_rescaling_matters():
    v = C.ablation_verdicts(_res(0.60))
    assert v["recentre_harmless"] and v["rescale_needed"]
    text = C.describe_ablation(_res(0.60))
    assert "costs nothing here that" in text and "Dropping the re-scaling is what hurts" in text
    assert "60.0% with the norm that only re-centres" in text


def test_ablation_sentence_when_it_does_not():
    text = C.describe_ablation(_res(0.86, rms_good=0.80))
    assert "**does** cost accuracy" in text
    assert "trails LayerNorm by up to 13.0 percentage points" in text
    assert "does **not** hurt clearly" in text


def test_model_list_verdicts():
    by = {key: verdict for key, _, _, verdict, _ in C.MODELS}
    assert set(by) == {"llama", "llama2", "t5", "palm", "gemma", "mistral", "deepseek"}
    assert set(by.values()) <= set(VERDICTS)
    # T5 and Mistral name it only in their reference code, which the rows cite; PaLM's paper
    # never says it.
    assert by["t5"] == by["mistral"] == "cited"
    assert by["palm"] == "not reproduced"
    sources = {key: source for key, _, source, _, _ in C.MODELS}
    assert "mesh_tensorflow" in sources["t5"] and "mistral_inference" in sources["mistral"]
    assert {"gemma_pytorch", "gemma2_2024"} <= set(sources["gemma"].split("`")[1].split(","))
