"""The chapter "Where the norm goes in today's large models": the change of a stack's output
after one SGD step at initialization (the quantity DeepNet bounds), per depth, with every
parameter moved and with each group of :data:`UPDATE_GROUPS` moved alone.

:mod:`normedu.experiments.since2020_placement` runs it (``update_sizes``, on its sizes and
models) and re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["UPDATE_GROUPS", "UpdateSizes", "one_step_changes"]


#: Parameter groups of :func:`update_sizes`, by name, each a test on a parameter's name and
#: shape: the block matrices (qkv, proj, fc1, fc2: what DeepNet's bound covers), the norms'
#: gains and biases (every block norm and the final one), the blocks' other biases, and the
#: token and position embeddings. The head does not move the stack's output.
UPDATE_GROUPS = {
    "block matrices": lambda name, p: name.startswith("blocks.") and p.dim() == 2,
    "norm gains and biases": lambda name, p: "norm" in name or name.startswith("final."),
    "block biases": lambda name, p: (
        name.startswith("blocks.") and p.dim() == 1 and "norm" not in name
    ),
    "embeddings": lambda name, p: name.startswith(("tok.", "pos.")),
}


@dataclass
class UpdateSizes:
    """``change[placement][i]``: RMS of the change of the head's input (the stack's output
    after its final norm, if any) after one SGD step of learning rate ``lr`` at
    initialization, for a stack of ``depths[i]`` layers, divided by ``lr``.
    ``groups[placement][group][i]``: the same change when the step moves only the parameters
    of one group of :data:`UPDATE_GROUPS` (same gradient, the others left at their init)."""

    depths: list[int]
    lr: float
    change: dict[str, list[float]]
    groups: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def ratio(self, placement: str, group: str | None = None) -> float:
        """Change at the deepest stack over the change at the shallowest (all parameters,
        or one ``group``)."""
        c = self.change[placement] if group is None else self.groups[placement][group]
        return c[-1] / c[0]


def one_step_changes(model, batch, lr: float, split: bool) -> dict[str, float]:
    """RMS change of ``model.final(model.hidden(batch.x))`` (the stack's output, (B, T,
    d_model)) after one SGD step of rate ``lr`` on the language-model loss of ``batch``,
    divided by ``lr``: under ``"all"`` with every parameter moved and, if ``split``, under
    each name of :data:`UPDATE_GROUPS` with only that group moved (the same gradient, every
    step taken from the initial weights, which are restored after it)."""
    import torch

    from ..sequence_tasks import lm_loss

    def output():
        return model.final(model.hidden(batch.x))

    before = output()
    lm_loss(model.head(before), batch).backward()
    before = before.detach()
    named = list(model.named_parameters())
    out: dict[str, float] = {}
    with torch.no_grad():
        for group, member in (("all", None), *(UPDATE_GROUPS.items() if split else ())):
            moved = [p for n, p in named if member is None or member(n, p)]
            saved = [p.detach().clone() for p in moved]
            for p in moved:
                p.sub_(lr * p.grad)
            out[group] = float((output() - before).pow(2).mean().sqrt()) / lr
            for p, s in zip(moved, saved, strict=True):
                p.copy_(s)
    return out
