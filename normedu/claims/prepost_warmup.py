"""The learning-rate x warm-up grid of the Pre-Norm vs Post-Norm chapter, judged over seeds.

Every cell of the grid (:class:`~normedu.experiments.prepost.WarmupSweep`) is trained on
``sweep.seeds`` seeds. A run *trained* when its final loss is below half of the chance loss; a
cell is summed up as "trained on k of n seeds". Every verdict here compares per-seed final
losses by the course's rule (:func:`normedu.seeding.compare`: every seed agrees in sign, or the
mean exceeds twice its standard error), so a sentence says a difference only where the seeds
show one. The words branch on those verdicts only; counts and losses are numbers, so another
set of seeds changes the numbers of a sentence and, unless a verdict changes, not its words.

A diverged run (NaN loss) counts as a loss at the chance level in the comparisons: no better
than guessing.
"""

from __future__ import annotations

import numpy as np

from ..seeding import compare

__all__ = [
    "NEAR_CHANCE",
    "WarmupFindings",
    "warmup_findings",
    "cell_losses",
    "trained_table",
    "describe_sweep",
    "describe_grid",
    "describe_stability",
    "still_learning",
    "learning_count",
    "pre_spreads",
]

#: A run whose final loss is above NEAR_CHANCE x the chance loss stayed on the plateau.
NEAR_CHANCE = 0.8


def cell_losses(sweep, placement: str, lr: float, warmup: int) -> list[float]:
    """The cell's final loss per seed, a diverged run counted at the chance loss."""
    return [
        float(x) if np.isfinite(x) else sweep.chance_loss
        for x in sweep.seed_losses(placement, lr, warmup)
    ]


def _half(sweep) -> float:
    return 0.5 * sweep.chance_loss


def _k(sweep, placement: str, lr: float, warmup: int) -> str:
    """'k of n' seeds of the cell that trained."""
    k = sum(r.trained for r in sweep.seed_runs(placement, lr, warmup))
    return f"{k} of {sweep.seeds}"


def _fails(sweep, placement: str, lr: float, warmup: int) -> bool:
    """The cell's final loss is above half of chance by the rule."""
    return compare(cell_losses(sweep, placement, lr, warmup), _half(sweep)).sign > 0


def _trains(sweep, placement: str, lr: float, warmup: int) -> bool:
    """The cell's final loss is below half of chance by the rule."""
    return compare(cell_losses(sweep, placement, lr, warmup), _half(sweep)).sign < 0


def _lowers(sweep, placement: str, lr: float, warmup: int, base: int = 0) -> bool:
    """``warmup`` steps of warm-up end lower than ``base`` steps, seed by seed, by the rule."""
    a = cell_losses(sweep, placement, lr, base)
    b = cell_losses(sweep, placement, lr, warmup)
    return compare(a, b).sign > 0


class WarmupFindings:
    """The headline cell's verdicts (learning rate ``sweep.lr``), each by the rule.

    - post_fails: Post-LN without warm-up ends above half of chance.
    - helped: Post-LN ends lower with ``warmup`` (the longest warm-up of the grid) than without.
    - post_trains_warm: Post-LN with ``warmup`` steps ends below half of chance.
    - pre_trains: Pre-LN without warm-up ends below half of chance.
    - pattern: post_fails, post_trains_warm and pre_trains: Xiong et al.'s claim at this
      learning rate (warm-up lowering the loss, ``helped``, is not enough: it must train).
    - trains_without: the learning rates of the grid at which Post-LN without warm-up ends
      below half of chance (the contrast "needs warm-up *at a high* rate" needs one).
    - gap: +1 if Post-LN with ``warmup`` still ends above Pre-LN without warm-up, seed by seed,
      -1 if below, 0 if the rule shows neither.
    """

    def __init__(self, sweep):
        self.lr = sweep.lr
        self.warmup = max(sweep.warmups)
        self.post_fails = _fails(sweep, "post", sweep.lr, 0)
        self.helped = _lowers(sweep, "post", sweep.lr, self.warmup)
        self.post_trains_warm = _trains(sweep, "post", sweep.lr, self.warmup)
        self.pre_trains = _trains(sweep, "pre", sweep.lr, 0)
        self.pattern = self.post_fails and self.post_trains_warm and self.pre_trains
        self.trains_without = [lr for lr in sweep.lrs if _trains(sweep, "post", lr, 0)]
        post_w = cell_losses(sweep, "post", sweep.lr, self.warmup)
        self.gap = compare(post_w, cell_losses(sweep, "pre", sweep.lr, 0)).sign


def warmup_findings(sweep) -> WarmupFindings:
    """:class:`WarmupFindings` of ``sweep``."""
    return WarmupFindings(sweep)


def still_learning(losses) -> bool:
    """The mean loss over the last tenth of the steps is below that of the tenth before."""
    n = max(1, len(losses) // 10)
    if len(losses) < 2 * n:
        return False
    return float(np.mean(losses[-n:])) < float(np.mean(losses[-2 * n : -n]))


def learning_count(runs) -> tuple[int, int]:
    """(k, m): of the m runs that did not diverge, k were still learning at the end."""
    live = [r for r in runs if not r.diverged]
    return sum(still_learning(r.losses) for r in live), len(live)


def trained_table(sweep) -> str:
    """A markdown table: for every learning rate and warm-up, on how many seeds each
    placement trained."""
    head = " | ".join(f"warm-up {w}" for w in sweep.warmups)
    rows = [
        f"Seeds (of {sweep.seeds}) on which each cell trained (final loss below "
        f"{_half(sweep):.2f}, half of chance), after {sweep.steps} steps:",
        "",
        f"| learning rate | placement | {head} |",
        "|---|---|" + "---|" * len(sweep.warmups),
    ]
    counts = {p: sweep.trained_counts(p) for p in ("post", "pre")}
    for i, lr in enumerate(sweep.lrs):
        for p, name in (("post", "Post-LN"), ("pre", "Pre-LN")):
            cells = " | ".join(f"{k}/{sweep.seeds}" for k in counts[p][i])
            rows.append(f"| {lr:g} | {name} | {cells} |")
    return "\n".join(rows)


def describe_sweep(sweep) -> str:
    """The headline learning rate of the grid, judged over the seeds, in words."""
    f = warmup_findings(sweep)
    lr, n, steps = sweep.lr, sweep.seeds, sweep.steps
    nw = cell_losses(sweep, "post", lr, 0)
    warm = [w for w in sweep.warmups if w]
    parts = [
        f"At learning rate {lr:g}, after {steps} steps, on {n} seeds (each its own "
        "initialization and batches): Post-LN without warm-up trained on "
        f"{_k(sweep, 'post', lr, 0)} (final losses {min(nw):.2f} to {max(nw):.2f}; "
        f"chance {sweep.chance_loss:.2f}), "
        + ", ".join(f"with {w} warm-up steps on {_k(sweep, 'post', lr, w)}" for w in warm)
        + f"; Pre-LN without warm-up trained on {_k(sweep, 'pre', lr, 0)}."
    ]
    rule = (
        "By the course's rule (a difference counts when every seed agrees, or when the mean "
        "exceeds twice its standard error), "
    )
    if f.pattern:
        parts.append(
            rule + f"Post-LN without warm-up ends above half of chance, with {f.warmup} warm-up "
            "steps it ends below, and Pre-LN without warm-up ends below half of chance: "
            "**at this learning rate Post-LN learns only with warm-up, and Pre-LN needs none**."
        )
    elif f.post_fails and f.helped and f.pre_trains:
        parts.append(
            rule + f"Post-LN without warm-up ends above half of chance, {f.warmup} warm-up "
            "steps lower its final loss, and Pre-LN without warm-up ends below half of chance; "
            f"but with {f.warmup} warm-up steps Post-LN does not end below half of chance by "
            "the rule. **At this learning rate warm-up lowers Post-LN's loss and Pre-LN needs "
            f"none; that warm-up makes Post-LN train within {steps} steps is not shown.**"
        )
    else:
        missing = [
            text
            for ok, text in (
                (f.post_fails, "Post-LN failing without warm-up"),
                (f.helped, f"{f.warmup} warm-up steps lowering Post-LN's final loss"),
                (f.post_trains_warm, f"Post-LN training with {f.warmup} warm-up steps"),
                (f.pre_trains, "Pre-LN training without warm-up"),
            )
            if not ok
        ]
        parts.append(
            rule + "these seeds do **not** show Post-LN needing warm-up where Pre-LN does not: "
            "missing is " + " and ".join(missing) + "."
        )
    if f.trains_without:
        parts.append(
            "Without warm-up Post-LN ends below half of chance by the rule at learning rate "
            + ", ".join(f"{x:g}" for x in f.trains_without)
            + ": the contrast that makes warm-up a need *at a high rate*."
        )
    else:
        parts.append(
            "Without warm-up Post-LN ends below half of chance by the rule at **none** of the "
            "grid's learning rates ("
            + ", ".join(f"{x:g}" for x in sweep.lrs)
            + f"): within {steps} steps the grid has no rate at which Post-LN trains without "
            "warm-up to set against this one, so it shows what warm-up does at a high rate, "
            "not that a high rate is where it becomes necessary."
        )
    parts.append(
        {
            1: f"Even with {f.warmup} warm-up steps Post-LN ends above Pre-LN without any, by "
            f"the rule: at this size warm-up narrows the gap, it does not close it within "
            f"{steps} steps.",
            -1: f"With {f.warmup} warm-up steps Post-LN ends below Pre-LN without any, by the "
            "rule.",
        }.get(
            f.gap,
            f"With {f.warmup} warm-up steps Post-LN ends level with Pre-LN without any: no "
            "difference the rule can detect.",
        )
    )
    k, m = learning_count([r for w in sweep.warmups for r in sweep.seed_runs("post", lr, w)])
    parts.append(
        f"The runs are short: at the end, the loss was still falling in {k} of the {m} "
        f"Post-LN runs at this rate, so *trained* means below half of chance after {steps} "
        "steps, not converged."
    )
    failed = [r for r in sweep.runs if r.placement == "post" and not r.trained]
    if any(r.diverged for r in failed):
        parts.append("Some Post-LN runs diverged (NaN).")
    elif failed:
        near = [r for r in failed if r.final_loss > NEAR_CHANCE * sweep.chance_loss]
        parts.append(
            f"Of the {len(failed)} Post-LN runs of the grid that did not train, {len(near)} "
            f"ended near chance (above {NEAR_CHANCE:g} of it): a plateau the optimizer does not "
            "leave, not a NaN; the others learned too slowly to reach half of chance in the "
            "steps given."
        )
    return " ".join(parts)


def describe_grid(sweep) -> str:
    """The corners of the grid in words: what "trained" means, the lowest learning rate (where
    warm-up costs steps at the peak rate) and the highest (where Post-LN fails and Pre-LN may
    still gain from warm-up), each verdict by the rule over the seeds."""
    chance, steps = sweep.chance_loss, sweep.steps
    vocab = round(float(np.exp(chance))) + 2
    longest = max(sweep.warmups)
    parts = [
        f"A run counts as trained when its final loss (the mean over the last tenth of its "
        f"steps) is below half of chance, {_half(sweep):.2f}."
    ]
    if abs(np.log(vocab - 2) - chance) < 1e-9:  # the tasks whose chance loss is ln(V - 2)
        parts.append(
            f"Chance is $\\ln(V-2) = {chance:.2f}$, with $V = {vocab}$ the vocabulary size: "
            "the separator and padding tokens are never targets."
        )
    lo, hi = min(sweep.lrs), max(sweep.lrs)
    higher = all(_lowers(sweep, p, lo, 0, base=longest) for p in ("post", "pre"))
    k, m = learning_count(
        [r for p in ("post", "pre") for w in sweep.warmups for r in sweep.seed_runs(p, lo, w)]
    )
    parts.append(
        f"At the lowest learning rate, {lo:g}, "
        + (
            f"{longest} warm-up steps make **both placements end higher** than none, by the "
            f"rule over the {sweep.seeds} seeds: in a {steps}-step run every warm-up step is a "
            "step below the peak rate"
            if higher
            else f"the seeds do not show {longest} warm-up steps raising both placements' "
            "final loss"
        )
        + f"; the loss was still falling at the end in {k} of the {m} runs there."
    )
    if _fails(sweep, "post", hi, longest):
        parts.append(
            f"At the highest, {hi:g}, Post-LN fails even with {longest} warm-up steps "
            f"(trained on {_k(sweep, 'post', hi, longest)} seeds): warm-up does not rescue it "
            "at that rate."
        )
    else:
        parts.append(
            f"At the highest, {hi:g}, Post-LN with {longest} warm-up steps trained on "
            f"{_k(sweep, 'post', hi, longest)} seeds, not above half of chance by the rule."
        )
    parts.append(
        f"Pre-LN without warm-up trained there on {_k(sweep, 'pre', hi, 0)} seeds; "
        + (
            f"{longest} warm-up steps lower its final loss by the rule: warm-up still helps it."
            if _lowers(sweep, "pre", hi, longest)
            else "warm-up made no difference the rule can detect."
        )
    )
    return " ".join(parts)


def pre_spreads(stab) -> list[float]:
    """Max/min over layers of the trained Pre-LN stack's FFN-W2 gradient norms, one per seed
    (the runs without warm-up at the headline learning rate; empty if none recorded them)."""
    runs = stab.seed_runs("pre", False)
    return [max(r.grad_norms_end) / min(r.grad_norms_end) for r in runs if r.grad_norms_end]


def describe_stability(stab) -> str:
    """The trained Pre-LN stack's per-layer gradient spread (:class:`StabilityResult`), over
    the seeds, against the common claim of "less than a factor of 2"."""
    spreads = pre_spreads(stab)
    if not spreads:
        return ""
    if len(spreads) > 1:
        c = compare(spreads, 2.0)
        verdict = {1: "more than", -1: "within"}.get(c.sign, "not distinguishable from")
    else:
        verdict = "within" if spreads[0] < 2 else "more than"
    return (
        "A common claim is that a trained Pre-LN stack's per-layer gradients differ by less "
        "than a factor of 2; the Pre-LN runs without warm-up test it. After training, the "
        "per-layer FFN-W2 gradient norm varies from its largest to its smallest layer by "
        + ", ".join(f"{s:.2f}×" for s in spreads)
        + f" on the {len(spreads)} seeds: {verdict} a factor of 2 by the rule."
    )
