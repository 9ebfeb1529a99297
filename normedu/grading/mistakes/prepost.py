# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``prepost`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import edit as _m

_PP, _PO, _PG = "pre_norm_residual", "post_norm_residual", "block_input_grad_norms"
MISTAKES = [
    _m("prepost", _PP, "pre-norm block computes post-norm", "computed the Post-Norm block", ("return x + sublayer(norm(x))", "return norm(x + sublayer(x))")),
    _m("prepost", _PP, "pre-norm without the residual", "residual connection is missing", ("return x + sublayer(norm(x))", "return sublayer(norm(x))")),
    _m("prepost", _PP, "residual carries norm(x)", "raw x", ("return x + sublayer(norm(x))", "h = norm(x)\n    return h + sublayer(h)")),
    _m("prepost", _PP, "pre-norm normalizes twice", "apply the norm once", ("return x + sublayer(norm(x))", "return norm(x + sublayer(norm(x)))")),
    _m("prepost", _PP, "pre-norm forgets the norm", "the norm is missing", ("return x + sublayer(norm(x))", "return x + sublayer(x)")),
    _m("prepost", _PO, "post-norm block computes pre-norm", "computed the Pre-Norm block", ("return norm(x + sublayer(x))", "return x + sublayer(norm(x))")),
    _m("prepost", _PO, "post-norm without the residual", "residual connection is missing", ("return norm(x + sublayer(x))", "return norm(sublayer(x))")),
    _m("prepost", _PO, "post-norm normalizes the sublayer input too", "sublayer sees the raw x", ("return norm(x + sublayer(x))", "return norm(x + sublayer(norm(x)))")),
    _m("prepost", _PO, "post-norm normalizes x only", "not x alone", ("return norm(x + sublayer(x))", "return norm(x) + sublayer(x)")),
    _m("prepost", _PO, "post-norm forgets the norm", "the norm is missing", ("return norm(x + sublayer(x))", "return x + sublayer(x)")),
    _m("prepost", _PG, "gradient norms reversed", "block order", ("return [g.norm().item() for g in grads]", "return [g.norm().item() for g in grads][::-1]")),
    _m("prepost", _PG, "squared norms", "not its square", ("g.norm().item() for g", "g.norm().item() ** 2 for g")),
    _m("prepost", _PG, "upstream gradient ignored", "upstream gradient", ("torch.autograd.grad(h, inputs, upstream)", "torch.autograd.grad(h.sum(), inputs)")),
    _m("prepost", _PG, "loss is the mean of the output", "upstream gradient", ("torch.autograd.grad(h, inputs, upstream)", "torch.autograd.grad(h.mean(), inputs)")),
    _m("prepost", _PG, "gradients at the block outputs", "INPUT", ("inputs.append(h)\n        h = block(h)", "h = block(h)\n        inputs.append(h)")),
    _m("prepost", "answers", "wrong answer to question 1", "g_pre[0]", ('answer_q1 = "a"', 'answer_q1 = "c"')),
]  # fmt: skip

SHORTCUTS: list = []
