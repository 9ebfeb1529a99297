"""The summary page's comparison table, each cell checked in code (book/summary.md).

:func:`comparison_checks` runs small, exact experiments on the torch modules
(``torch.nn.BatchNorm1d``, ``LayerNorm``, ``RMSNorm``) and returns their outcomes;
:func:`comparison_markdown` renders the table with the outcome beside each cell, and
:func:`check` files the same outcomes in the claims ledger.
"""

from __future__ import annotations

import functools
from typing import Any

from .. import seeding
from ..claim import Claim, claims_for, verdict

CHAPTER = "summary"
#: The comparison is this course's own summary: the ledger attributes it to the summary page.
NOTES = "this course (the comparison table of the norms)"
C = 64  # channels / features of the checks


def _modules(c: int = C):
    import torch

    seeding.manual_seed(0)
    bn = torch.nn.BatchNorm1d(c)
    ln = torch.nn.LayerNorm(c)
    rms = torch.nn.RMSNorm(c, eps=1e-5)
    with torch.no_grad():
        for m in (bn, ln, rms):
            m.weight.uniform_(0.5, 1.5)
        for m in (bn, ln):
            m.bias.uniform_(-0.5, 0.5)
    return {"batchnorm": bn, "layernorm": ln, "rmsnorm": rms}


@functools.lru_cache(maxsize=1)
def comparison_checks() -> dict[str, dict[str, Any]]:
    """Outcome of every checkable cell, per norm: ``batch1``, ``varseq``, ``modes``,
    ``params``, ``buffers`` (all exact, CPU, float32)."""
    import torch

    mods = _modules()
    gen = seeding.generator(1)
    x = torch.randn(16, C, generator=gen) * 3 + 1
    out: dict[str, dict[str, Any]] = {k: {} for k in mods}
    for name, m in mods.items():
        # Batch size 1 in training mode.
        m.train()
        try:
            y1 = m(x[:1])
            out[name]["batch1"] = bool(torch.isfinite(y1).all())
        except ValueError:
            out[name]["batch1"] = False
        # Variable sequences: a token's output must not change when the sequence (here: the
        # rows it is normalized with) gets padding appended.
        seq = x[:5]
        padded = torch.cat([seq, torch.zeros(11, C)])
        with torch.no_grad():
            out[name]["varseq"] = bool(torch.allclose(m(seq), m(padded)[:5], atol=1e-6))
        # Train vs eval: same input, same output?
        with torch.no_grad():
            m.train()
            yt = m(x)
            m.eval()
            ye = m(x)
        out[name]["modes"] = not bool(torch.allclose(yt, ye, atol=1e-6))
        out[name]["params"] = sum(p.numel() for p in m.parameters())
        out[name]["buffers"] = {
            k: v.numel() for k, v in m.named_buffers() if v.dtype.is_floating_point
        }
    return out


def comparison_markdown() -> str:
    """The comparison table with a ✓ (check agrees) or ✗ (disagrees) after each checked cell."""
    res = comparison_checks()

    def mark(ok: bool) -> str:
        return "✓" if ok else "✗ (check disagrees)"

    def yn(name: str, key: str, expected: bool) -> str:
        got = res[name][key]
        return f"{'Yes' if got else 'No'} {mark(got == expected)}"

    bn_buf = sum(res["batchnorm"]["buffers"].values())
    rows = [
        ("Normalizes over", "Batch (per channel)", "Features (per sample)", "Features (no mean)"),
        (
            "Batch size 1 (training)?",
            yn("batchnorm", "batch1", False),
            yn("layernorm", "batch1", True),
            yn("rmsnorm", "batch1", True),
        ),
        (
            "Variable sequences (padding changes nothing)?",
            yn("batchnorm", "varseq", False),
            yn("layernorm", "varseq", True),
            yn("rmsnorm", "varseq", True),
        ),
        (
            "Separate train/inference modes?",
            yn("batchnorm", "modes", True),
            yn("layernorm", "modes", False),
            yn("rmsnorm", "modes", False),
        ),
        (
            "Compute",
            "Moderate",
            "Moderate: 2 reductions",
            "Lowest: 1 reduction (its speed depends on the kernel: see below)",
        ),
        (
            f"Parameters per layer (C = D = {C})",
            f"2C = {res['batchnorm']['params']} + 2C buffers = {bn_buf} "
            f"{mark(res['batchnorm']['params'] == 2 * C and bn_buf == 2 * C)}",
            f"2D = {res['layernorm']['params']} {mark(res['layernorm']['params'] == 2 * C)}",
            f"D = {res['rmsnorm']['params']} {mark(res['rmsnorm']['params'] == C)}",
        ),
        (
            "Standard for",
            "CNNs {cite}`he2016deep`",
            "BERT {cite}`devlin2019bert`, GPT-2 {cite}`radford2019language`",
            "Modern LLMs: LLaMA {cite}`touvron2023llama`, Mistral {cite}`jiang2023mistral`",
        ),
    ]
    lines = ["| | BatchNorm | LayerNorm | RMSNorm |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


@claims_for(CHAPTER)
def check() -> list[Claim]:
    import torch

    res = comparison_checks()
    dev = f"CPU, torch {torch.__version__}"
    bn, ln, rms = res["batchnorm"], res["layernorm"], res["rmsnorm"]
    bn_buf = sum(bn["buffers"].values())
    return [
        Claim(
            id="summary.batch1",
            chapter=CHAPTER,
            claim="BatchNorm cannot train on a batch of 1; LayerNorm and RMSNorm can",
            source=NOTES,
            measured=f"train-mode forward on 1 row: BatchNorm {'ok' if bn['batch1'] else 'error'}"
            f", LayerNorm {'ok' if ln['batch1'] else 'error'}, RMSNorm "
            f"{'ok' if rms['batch1'] else 'error'}",
            verdict=verdict(not bn["batch1"] and ln["batch1"] and rms["batch1"]),
            device=dev,
        ),
        Claim(
            id="summary.varseq",
            chapter=CHAPTER,
            claim="LayerNorm/RMSNorm handle variable-length sequences; BatchNorm does not "
            "(padding changes its statistics)",
            source=NOTES,
            measured=f"outputs unchanged by padding: BatchNorm {bn['varseq']}, LayerNorm "
            f"{ln['varseq']}, RMSNorm {rms['varseq']}",
            verdict=verdict(not bn["varseq"] and ln["varseq"] and rms["varseq"]),
            device=dev,
        ),
        Claim(
            id="summary.modes",
            chapter=CHAPTER,
            claim="Only BatchNorm behaves differently in training and inference (running stats)",
            source=NOTES,
            measured=f"train ≠ eval output: BatchNorm {bn['modes']}, LayerNorm {ln['modes']}, "
            f"RMSNorm {rms['modes']}",
            verdict=verdict(bn["modes"] and not ln["modes"] and not rms["modes"]),
            device=dev,
        ),
        Claim(
            id="summary.params",
            chapter=CHAPTER,
            claim="Parameters per layer: BatchNorm 2C + 2C buffers, LayerNorm 2D, RMSNorm D",
            source=NOTES,
            measured=f"C = D = {C}: BatchNorm {bn['params']} + {bn_buf} float buffers, "
            f"LayerNorm {ln['params']}, RMSNorm {rms['params']}",
            verdict=verdict(
                (bn["params"], bn_buf, ln["params"], rms["params"]) == (2 * C, 2 * C, 2 * C, C)
            ),
            device=dev,
            note="torch also keeps an integer num_batches_tracked buffer in BatchNorm",
        ),
    ]
