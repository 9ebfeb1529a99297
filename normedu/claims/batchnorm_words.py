"""The sentences the BatchNorm chapter words from several seeds, and the ledger's verdicts.

Every function takes per-seed values (lists in seed order, as the record
:mod:`normedu.experiments.batchnorm_seeds` stores them) and words them with the course's one
rule, :func:`normedu.seeding.compare`: a difference is stated only when every seed agrees in
sign or the mean exceeds twice its standard error. A tie is one test image (``tie``), the
resolution of a test error. Pure Python on plain lists, so every branch is unit-tested without
training anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..seeding import SeedComparison
from ..seeding import compare as _compare

__all__ = [
    "compare",
    "pct",
    "spread",
    "points",
    "worse_than_both",
    "better_than_both",
    "describe_eval_mode",
    "describe_sweep",
    "describe_shift",
    "describe_calibration",
    "describe_ddp",
    "describe_replay",
]

NORM_NAMES = {"batchnorm": "BatchNorm", "groupnorm": "GroupNorm", "layernorm": "LayerNorm"}


def compare(a: Sequence[float], b: Sequence[float] | float, tie: float) -> SeedComparison:
    """:func:`normedu.seeding.compare` on fractions (test errors, accuracies) read in percentage
    points: ``a``, ``b`` and ``tie`` times 100, so that the rule's words state the mean and its
    standard error in points. A difference of exactly ``tie`` stays a tie after the scaling's
    rounding (the tie is widened by one part in a million)."""
    b100 = b * 100 if isinstance(b, (int, float)) else [100 * v for v in b]
    return _compare([100 * v for v in a], b100, tie=100 * tie * (1 + 1e-6))


def pct(x: float) -> str:
    """A fraction as a percentage with one decimal: ``0.125 -> "12.5%"``."""
    return f"{100 * x:.1f}%"


def spread(values: Sequence[float]) -> str:
    """The per-seed values as a range of percentages, ``"5.8% to 11.8%"`` (one value if all
    round alike)."""
    lo, hi = pct(min(values)), pct(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def points(values: Sequence[float]) -> str:
    """Per-seed differences of fractions in percentage points: ``"+3.6, -14.0, -7.6"``."""
    return ", ".join(f"{100 * v:+.1f}" for v in values)


def _diff(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=True)]


def worse_than_both(sweep: dict, b_index: int, tie: float) -> bool:
    """Whether BatchNorm's test error at ``sweep["batch_sizes"][b_index]`` is above both
    GroupNorm's and LayerNorm's by the rule (``sweep[norm]``: per batch size, per seed)."""
    bn = sweep["batchnorm"][b_index]
    return all(
        (c := compare(bn, sweep[other][b_index], tie=tie)).clear and c.sign > 0
        for other in ("groupnorm", "layernorm")
    )


def describe_eval_mode(ev: dict, tie: float) -> str:
    """The eval-mode demo over seeds (``ev[key]``: per-seed accuracies)."""
    n = len(ev["eval_full"])
    same = sum(a == b for a, b in zip(ev["eval_full"], ev["eval_batch1"], strict=True))
    b1 = compare(ev["train_batch1"], ev["eval_full"], tie=tie)
    srt = compare(ev["train_sorted8"], ev["eval_full"], tie=tie)
    words = ("above its eval-mode accuracy", "below its eval-mode accuracy")
    return (
        f"Over {n} seeds of this experiment: eval mode reaches {spread(ev['eval_full'])}, "
        + (
            "with the same accuracy one image at a time on every seed"
            if same == n
            else f"one image at a time the same accuracy on {same} of {n} seeds"
        )
        + f"; left in training mode, one image at a time gives {spread(ev['train_batch1'])}, "
        f"{b1.words(*words)}, and digit-sorted batches of 8 give "
        f"{spread(ev['train_sorted8'])}, {srt.words(*words)}."
    )


def better_than_both(sweep: dict, b_index: int, tie: float) -> bool:
    """Whether BatchNorm's test error at ``sweep["batch_sizes"][b_index]`` is below both
    GroupNorm's and LayerNorm's by the rule."""
    bn = sweep["batchnorm"][b_index]
    return all(
        (c := compare(bn, sweep[other][b_index], tie=tie)).clear and c.sign < 0
        for other in ("groupnorm", "layernorm")
    )


def _against_both(sweep: dict, i: int, tie: float) -> str:
    """BatchNorm against both batch-free norms at batch index ``i``, in the rule's words."""
    if worse_than_both(sweep, i, tie):
        return "above both GroupNorm's and LayerNorm's"
    if better_than_both(sweep, i, tie):
        return "below both GroupNorm's and LayerNorm's"
    return "; ".join(
        f"against {NORM_NAMES[o]}, "
        + compare(sweep["batchnorm"][i], sweep[o][i], tie=tie).words("higher", "lower")
        for o in ("groupnorm", "layernorm")
    )


def _range_points(diffs: Sequence[float]) -> str:
    """Differences of fractions as a range in percentage points, ``"from -6.3 to +2.4"``
    (``"+0.0"`` for a rounded zero; one value if both ends round alike)."""

    def one(v: float) -> str:
        t = f"{100 * v:+.1f}"
        return "+0.0" if t == "-0.0" else t

    lo, hi = one(min(diffs)), one(max(diffs))
    return lo if lo == hi else f"from {lo} to {hi}"


def describe_sweep(sweep: dict, tie: float) -> str:
    """The batch-size sweep over seeds: BatchNorm against both batch-free norms at the smallest
    and the largest batch, and between them only what holds at every seed offset tried.

    Between the ends, a verdict per batch size and norm is not worded: with five seeds those
    verdicts changed when the seeds were shifted (offsets 1 and 2 of :mod:`normedu.seeding`),
    so the sentence names the sizes where BatchNorm is above both batch-free norms (none, at
    every offset tried) and gives the range of the mean differences instead."""
    sizes = sweep["batch_sizes"]
    n = len(sweep["batchnorm"][0])
    means = {k: [sum(v) / len(v) for v in sweep[k]] for k in NORM_NAMES}
    ranges = "; ".join(
        f"{NORM_NAMES[k]}'s from {pct(min(m))} to {pct(max(m))}" for k, m in means.items()
    )
    text = (
        f"Over {n} seeds, the mean test error across these batch sizes runs: {ranges}. By the "
        "course's rule (every seed agrees, or the mean differs by more than twice its standard "
        f"error), at batch {sizes[0]} BatchNorm's error is {_against_both(sweep, 0, tie)}"
    )
    if len(sizes) == 1:
        return text + "."
    text += f"; at batch {sizes[-1]} it is {_against_both(sweep, len(sizes) - 1, tie)}."
    mid = range(1, len(sizes) - 1)
    if not mid:
        return text
    worse = [sizes[i] for i in mid if worse_than_both(sweep, i, tie)]
    between = f"{sizes[1]} to {sizes[-2]}" if len(mid) > 1 else f"{sizes[1]}"
    text += (
        f" At the sizes between ({between}) it is above both at "
        + (f"batch {', '.join(map(str, worse))}" if worse else "none of them")
        + "; its mean difference from each batch-free norm there runs "
    )
    text += " and ".join(
        f"{_range_points([means['batchnorm'][i] - means[o][i] for i in mid])} points "
        f"({NORM_NAMES[o]})"
        for o in ("groupnorm", "layernorm")
    )
    return (
        text + ", and the rule's verdict at each of these sizes, one norm at a time, is not "
        f"stated: with {n} seeds it changed when other seeds were drawn."
    )


def recal_clean(sh: dict) -> list[float]:
    """Per seed, the clean test accuracy of the BN model recalibrated on the clean test set:
    ``bn_recal_clean`` where measured, else ``bn_recalibrated`` (the model recalibrated on the
    shifted set, on the shifted set), which is the same up to the logits' difference
    ``recal_logit_diff`` (float rounding)."""
    return list(sh.get("bn_recal_clean", sh["bn_recalibrated"]))


def describe_shift(sh: dict, tie: float) -> str:
    """The distribution shift over seeds (``sh[key]``: per-seed accuracies, and
    ``recal_logit_diff``)."""
    n = len(sh["bn_clean"])
    bn = compare(sh["bn_shift"], sh["bn_clean"], tie=tie)
    ln = compare(sh["ln_shift"], sh["ln_clean"], tie=tie)
    words = ("the shifted accuracy is higher", "the shifted accuracy is lower")
    return (
        f"Over {n} seeds: with its running statistics BatchNorm's accuracy changes by "
        f"{points(_diff(sh['bn_shift'], sh['bn_clean']))} points under the shift "
        f"({bn.words(*words)}); recalibrated on the shifted inputs its logits equal those of "
        "the model recalibrated on the clean test inputs to "
        f"{max(sh['recal_logit_diff']):.0e} or better on every seed. LayerNorm's accuracy "
        f"changes by {points(_diff(sh['ln_shift'], sh['ln_clean']))} points "
        f"({ln.words(*words)}). The match is with the model recalibrated on the clean test "
        "set, not with the trained model: on the clean digits the recalibrated model's accuracy "
        f"differs from the trained one's by {points(_diff(recal_clean(sh), sh['bn_clean']))} "
        "points. Re-estimation uses the test set's own statistics: a transductive step, the "
        "whole test set is seen before any prediction."
    )


def calibration_comparison(cal: dict, i: int, tie: float) -> SeedComparison:
    """Running-statistics error minus calibrated error at ``cal["momenta"][i]``, per seed."""
    return compare(cal["error_running"][i], cal["error_calibrated"][i], tie=tie)


def describe_calibration(cal: dict, tie: float) -> str:
    """Calibration over seeds, per BN momentum."""
    n = len(cal["error_running"][0])
    parts = []
    for i, mom in enumerate(cal["momenta"]):
        c = calibration_comparison(cal, i, tie)
        parts.append(
            f"with momentum {mom:g}, running statistics {spread(cal['error_running'][i])} "
            f"and calibrated {spread(cal['error_calibrated'][i])} test error: "
            + c.words("calibration lowers the error", "calibration raises the error")
        )
    return f"Over {n} seeds (batch {cal['batch']}, one epoch): " + "; ".join(parts) + "."


def ddp_comparison(errors: dict, setting: str, tie: float) -> SeedComparison:
    """Local BN's test error minus SyncBN's at ``setting`` ("P,m"), per seed."""
    return compare(errors[f"{setting},local"], errors[f"{setting},sync"], tie=tie)


def describe_ddp(ddp: dict, tie: float) -> str:
    """The DDP table's test errors over seeds: local BN against SyncBN per setting."""
    errors = ddp["errors"]
    settings = sorted({k.rsplit(",", 1)[0] for k in errors}, key=lambda s: s.split(","))
    n = len(next(iter(errors.values())))
    parts = []
    for st in settings:
        p, m = st.split(",")
        c = ddp_comparison(errors, st, tie)
        parts.append(
            f"on {p} processes with {m} samples each, local BN {spread(errors[st + ',local'])} "
            f"against SyncBN {spread(errors[st + ',sync'])}: "
            + c.words("local BN's error is higher", "local BN's error is lower")
        )
    text = f"Over {n} seeds, {ddp['steps']} SGD steps each: " + "; ".join(parts) + "."
    if all(errors[f"{st},sync"] == errors[f"{st},global"] for st in settings):
        text += " SyncBN's error equals the one-process BatchNorm's on every seed and setting."
    return text


def describe_replay(replay: dict, sync: Sequence[float], tie: float) -> str:
    """Local BN at two samples per process over seeds: its training-mode error against SyncBN's,
    and what switching to the running statistics changes."""
    n = len(replay["error"])
    tm = compare(replay["error_train_mode"], sync, tie=tie)
    ev = compare(replay["error"], sync, tie=tie)
    # The change from training mode to the running statistics is given per seed, without a
    # verdict: its sign over five seeds changed when other seeds were drawn; what held at every
    # offset tried is where the error ends up against SyncBN's.
    text = (
        f"Over {n} seeds: evaluated the way it was trained, in pairs, the network misclassifies "
        f"{spread(replay['error_train_mode'])} of the test digits, against SyncBN's "
        f"{spread(sync)} on the same global batches ("
        + tm.words("local BN's error is higher", "local BN's error is lower")
        + "). Switching to the running statistics moves the error by "
        f"{points(_diff(replay['error'], replay['error_train_mode']))} points, and with them "
        + ev.words("it is still higher than SyncBN's", "it is lower than SyncBN's")
        + "."
    )
    if tm.clear and tm.sign > 0:
        text += (
            " The failure is already there in the mode the network was trained in: it learns "
            "from features that only say which of two digits is larger."
        )
    return text
