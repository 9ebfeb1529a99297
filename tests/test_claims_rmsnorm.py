"""The RMSNorm chapter's ablation sentences (every branch, on made-up per-seed accuracies) and
its model list."""

from __future__ import annotations

from normedu.claims import rmsnorm as C
from normedu.experiments import rmsnorm as R
from normedu.ledger import VERDICTS

GOOD, BAD = 2**0.5, 3.0
SIZE = R.AblationSize(seeds=(0, 1, 2))


def _res(center_bad, rms_good=(0.93, 0.92, 0.94), loss=None) -> R.AblationResult:
    """Made-up accuracies of three seeds per cell (LayerNorm's fixed)."""
    acc = {
        GOOD: {
            "layernorm": [0.93, 0.93, 0.93],
            "rmsnorm": list(rms_good),
            "center": [0.88, 0.89, 0.90],
            "none": [0.89, 0.90, 0.88],
        },
        BAD: {
            "layernorm": [0.87, 0.86, 0.88],
            "rmsnorm": [0.88, 0.85, 0.87],
            "center": list(center_bad),
            "none": [0.55, 0.60, 0.58],
        },
    }
    hist = loss or [2.0, 1.0, 0.5]
    losses = {g: {k: [hist] * 3 for k in acc[g]} for g in acc}
    return R.AblationResult(acc, SIZE, losses, steps=110)


def test_ablation_sentence_when_rescaling_matters():
    res = _res([0.60, 0.62, 0.64])
    v = C.ablation_verdicts(res)
    assert v["recentre_harmless"] and v["rescale_needed"]
    # the smaller mean shortfall, against RMSNorm: 0.8667 - 0.62
    assert abs(v["center_gap"] - (0.8667 - 0.62)) < 1e-3
    text = C.describe_ablation(res)
    assert "costs nothing here" in text and "Dropping the re-scaling is what hurts" in text
    assert "with 3 seeds" in text and "by at least 24.7 points" in text
    assert "twice its standard error" in text
    assert "still falling" in text and "after 110 steps, not at convergence" in text


def test_ablation_sentence_when_it_does_not():
    # RMSNorm below LayerNorm on every seed at the good gain; the re-centring norm as good as
    # the re-scaling ones at the bad gain.
    res = _res([0.86, 0.85, 0.87], rms_good=(0.80, 0.81, 0.79), loss=[2.0, 1.0, 0.999])
    v = C.ablation_verdicts(res)
    assert not v["recentre_harmless"] and not v["rescale_needed"]
    text = C.describe_ablation(res)
    assert "**does** cost accuracy" in text and "at gain 1.4 RMSNorm" in text
    assert "does **not** hurt clearly" in text
    assert "had stopped falling" in text


def test_a_gap_that_seeds_disagree_on_is_no_verdict():
    # RMSNorm below on two seeds and above on one, the mean within twice its standard error:
    # not a cost by the seed rule.
    res = _res([0.60, 0.62, 0.64], rms_good=(0.90, 0.95, 0.91))
    assert C.ablation_verdicts(res)["recentre_harmless"]


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
    assert set(C.MODEL_QUOTES) <= set(by)
