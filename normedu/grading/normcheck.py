"""One checker for every norm assignment: a norm is a :class:`NormTable`, not a module of code.

A table says what is particular to one norm: the student functions' inputs and outputs by
name and order, the reference forward and backward (:mod:`normedu.functional`, tested
against PyTorch), and its known causes of a wrong result, one ``(message, variant)`` line
each, where ``variant(probe)`` recomputes what that mistake outputs (:mod:`.causes` builds
the common ones). The checker does the rest the same way for every norm:

- calls the student's function on copies of a :class:`Probe` (warnings silenced, the norm
  libraries blocked) and says when it modified an input, returned the wrong number of
  results, a result of the wrong shape or dtype, or the right results in the wrong order;
- compares with the reference; a backward also against central finite differences of the
  reference forward, always with a random upstream gradient (with an all-ones one, dx of
  any normalization is about zero and a broken backward would pass);
- on a mismatch names, most specific first: the first matching cause of the table; eps
  ignored (``eps_ignored``: a result near the reference with some eps that does not move with
  eps); right to float32's precision only (:mod:`.agreement`); a generic relation
  (``relations``); a relation between the arrays (:func:`.diagnose.describe_difference`); a
  re-run with γ = 1 and β = 0 (:func:`.diagnose.explained_by_rerun`).

Nothing assumes ``(dx, dgamma, dbeta)`` or an eps argument: outputs and gradients are named
by the table (DyT's ``(dx, dalpha, dgamma, dbeta)``), options are whatever keywords the call
passes (eps, momentum, causal ...). Diagnosis runs on float64 probes only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from normedu.conventions import DEFAULT_EPS
from normedu.grading.agreement import near_any, precision_cause, wrong_order
from normedu.grading.compare import GradingError, assert_array, call, unchanged
from normedu.grading.diagnose import (
    Hypothesis,
    check_against,
    diagnose,
    explained_by_rerun,
    matches,
)
from normedu.grading.dx_terms import describe_dx_difference
from normedu.grading.gradcheck import numerical_gradient
from normedu.grading.guard import assert_no_shortcut

__all__ = ["Cause", "Probe", "NormTable", "OTHER_EPS", "backward_on"]

#: A known cause of a wrong result: ``(message, variant, ...)``; ``variant(probe)`` is what
#: the mistake outputs on the probe (several variants: several ways to make it).
Cause = tuple[Any, ...]

#: The eps values a function that ignores its eps argument may use instead (0: none at all).
OTHER_EPS = (0.0, DEFAULT_EPS, 1e-6, 1e-8)


class Probe:
    """The named inputs of one call: ``args`` (arrays and integers such as GroupNorm's G)
    and ``options`` (keywords: eps, momentum ...). ``p.x`` and ``p.eps`` read either."""

    def __init__(self, args: dict[str, Any], options: dict[str, Any] | None = None):
        self.args = dict(args)
        self.options = dict(options or {})

    def __getattr__(self, name: str) -> Any:
        for values in (self.__dict__.get("args", {}), self.__dict__.get("options", {})):
            if name in values:
                return values[name]
        raise AttributeError(name)

    def replace(self, **changes: Any) -> Probe:
        """A copy with some inputs or options changed (``p.replace(gamma=None, eps=0.0)``)."""
        args, options = dict(self.args), dict(self.options)
        for name, value in changes.items():
            (options if name in options else args)[name] = value
        return Probe(args, options)

    def float64(self) -> Probe:
        """The same probe with every floating-point array in float64 (for finite differences)."""
        return Probe({k: _as64(v) for k, v in self.args.items()}, self.options)

    def label(self, main: str) -> str:
        """``for x of shape (4, 5) (float32), G=2, eps=1e-05``: what a message names."""
        x = np.asarray(self.args[main])
        dtype = "" if x.dtype == np.float64 else f" ({x.dtype})"
        scalars = {k: v for k, v in self.args.items() if np.ndim(v) == 0 and v is not None}
        extra = "".join(f", {k}={v}" for k, v in {**scalars, **self.options}.items())
        return f"for {main} of shape {x.shape}{dtype}{extra}"


def _as64(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return value.astype(np.float64)
    return value


def _pick(values: Any, index: Sequence[int]) -> Any:
    """One element of a tuple, or a tuple of several."""
    return values[index[0]] if len(index) == 1 else tuple(values[i] for i in index)


@dataclass(frozen=True)
class NormTable:
    """What one norm assignment checks. Only ``inputs`` and ``reference`` are needed for a
    forward; ``backward_inputs``, ``backward_reference``, ``grads`` and ``grad_checks``
    for a backward.

    - inputs: the student forward's positional inputs in order, e.g. ("x", "gamma", "beta");
      the first is the main input (its dtype decides float64 diagnosis, its name the labels).
    - reference: ``reference(**args, **options)``, returning what the forward returns.
    - outputs: the forward's results as (name, input it is shaped like).
    - causes: the forward's known mistakes.
    - backward_inputs, backward_reference: likewise for the backward (a probe holds ``dout``).
    - grads: the backward's results as (name, input it is the gradient of).
    - grad_checks: groups of gradient names, each compared (and diagnosed with its causes)
      in turn; parameter gradients first, their mistakes being the simpler ones.
    - relations: generic relations of a forward probe to the reference (see
      :func:`.diagnose.norm_relations`).
    - eps_ignored: message for a result that equals the reference with another eps.
    - affine: the (scale, shift) inputs re-run with ones/zeros when nothing else explains a
      wrong forward (shift None: no shift); None: no re-run.
    - grad_shape_hint: appended when a gradient of a parameter has the wrong shape; a mapping
      gives one hint per gradient name (DyT's dalpha is one number, its dgamma one per feature).
    - keep_dtype: message when a result's dtype differs from a floating-point main input's
      (None: not checked).
    - call_hint: ``call_hint(probe)``, appended to a failing call's message (None: nothing).
    - dx_layout: ``dx_layout(probe) -> (to_rows, g, axes, center)``: how dx's terms are laid
      out (``to_rows`` maps an array shaped like x to rows normalized over ``axes``; ``g`` is
      γ·dout shaped like x; ``center`` False: no mean term). With it, a wrong dx that no cause
      names is described in the terms of its formula (:func:`.dx_terms.describe_dx_difference`).
    - nonfinite: for a forward finite for any finite input (QK-norm's softmax, DyT's tanh): a
      NaN/inf result is diagnosed against the causes (NaN in the same places is evidence too),
      and this message explains one none names. None: the generic message (a division by zero).
    """

    inputs: tuple[str, ...]
    reference: Callable[..., Any]
    outputs: tuple[tuple[str, str], ...] = (("out", "x"),)
    causes: Sequence[Cause] = ()
    backward_inputs: tuple[str, ...] = ()
    backward_reference: Callable[..., Any] | None = None
    grads: tuple[tuple[str, str], ...] = ()
    grad_checks: Sequence[tuple[tuple[str, ...], Sequence[Cause]]] = ()
    relations: Callable[[Probe], list[Hypothesis]] | None = None
    eps_ignored: str | None = None
    affine: tuple[str, str | None] | None = None
    grad_shape_hint: str | Mapping[str, str] = ""
    keep_dtype: str | None = None
    call_hint: Callable[[Probe], str | None] | None = None
    dx_layout: Callable[[Probe], tuple[Callable, Any, Any, bool]] | None = None
    nonfinite: str | None = None

    # ------------------------------------------------------------------ calling
    @property
    def main(self) -> str:
        return self.inputs[0]

    def run(self, fn: Callable, probe: Probe, backward: bool = False) -> Any:
        """``fn(*inputs, **options)`` on copies of the probe's arrays; its result checked
        (inputs unchanged, tuple arity, shapes, dtype) and returned."""
        names = self.backward_inputs if backward else self.inputs
        fn_name = getattr(fn, "__name__", "your function")
        given = [probe.args[n] for n in names]
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in given]
        try:
            res = call(fn, *copies, name=fn_name, **probe.options)
        except GradingError as e:
            if "NotImplementedError" in str(e):
                raise
            # Say on which input it failed (a backward that crashes only at G = 1, say).
            hint = self.call_hint(probe) if self.call_hint else None
            where = f" (it failed {probe.label(self.main)})"
            raise GradingError(f"{e}{where}" + (f". {hint}" if hint else "")) from e
        for name, before, after in zip(names, given, copies, strict=True):
            if isinstance(before, np.ndarray):
                unchanged(before, after, name, fn_name)
        outputs = self.grads if backward else self.outputs
        hint = self.grad_shape_hint if backward else ""
        finite = backward or self.nonfinite is None
        try:
            return self.validate(res, probe, outputs, fn_name, hint, finite=finite)
        except GradingError:
            self.check_order(res, probe, backward, fn_name)
            raise

    def reference_value(self, probe: Probe, backward: bool = False) -> Any:
        """The reference forward's (or backward's) full result on ``probe``."""
        names = self.backward_inputs if backward else self.inputs
        args = {n: probe.args[n] for n in names if n in probe.args}
        return (self.backward_reference if backward else self.reference)(**args, **probe.options)

    def check_order(self, res: Any, probe: Probe, backward: bool, fn_name: str) -> None:
        """Raise when ``res`` is the reference's tuple in another order (dalpha returned last,
        dgamma and dbeta swapped): the values are right, only their places are not."""
        names = [n for n, _ in (self.grads if backward else self.outputs)]
        loose = np.asarray(probe.args[self.main]).dtype != np.float64
        message = None
        with contextlib.suppress(Exception), np.errstate(all="ignore"):  # no reference: no order
            message = wrong_order(res, self.reference_value(probe, backward), names, fn_name, loose)
        if message is not None:
            raise GradingError(message)

    def validate(
        self,
        res: Any,
        probe: Probe,
        outputs: tuple,
        fn_name: str,
        hint: str | Mapping[str, str] = "",
        where: str = "",
        finite: bool = True,
    ) -> Any:
        """Check a result's arity, shapes and dtypes against ``outputs`` ((name, like) pairs);
        ``where`` is appended to each name (e.g. " of process 2"); ``finite=False`` lets
        NaN/inf through to the diagnosis."""
        names = ", ".join(name for name, _ in outputs)
        if len(outputs) > 1 and (not isinstance(res, tuple) or len(res) != len(outputs)):
            size = f" of length {len(res)}" if isinstance(res, tuple) else ""
            raise GradingError(
                f"{fn_name} must return a tuple ({names}), got {type(res).__name__}{size}"
            )
        x = np.asarray(probe.args[self.main])
        checked = []
        for (name, like), value in zip(outputs, res if len(outputs) > 1 else (res,), strict=True):
            shape, what = np.shape(probe.args[like]), name + where
            own = hint.get(name, "") if isinstance(hint, Mapping) else hint
            got = np.shape(value)
            if like != self.main and got != shape and tuple(d for d in got if d != 1) == shape:
                # The right numbers with an axis kept: `keepdims=True`, not a wrong axis.
                raise GradingError(
                    f"{what} has shape {got}, expected {shape}: the right number of values with "
                    f"an extra axis of length 1 (a sum with keepdims=True?); drop that axis, or "
                    f"reshape the result to {shape}"
                )
            if own and like != self.main and got != shape:
                raise GradingError(f"{what} has shape {got}, expected {shape}: {own}")
            value = value if like == self.main else np.asarray(value)
            arr = assert_array(value, shape, what, finite=finite)
            if self.keep_dtype and x.dtype.kind == "f" and arr.dtype != x.dtype:
                raise GradingError(
                    f"{what} has dtype {arr.dtype} for {x.dtype} input: {self.keep_dtype}"
                )
            checked.append(arr)
        return tuple(checked) if len(outputs) > 1 else checked[0]

    def check_shapes(self, fn: Callable, probes: Sequence[Probe], backward: bool = False) -> None:
        """Run ``fn`` on each probe; only its results' types, shapes and dtypes are checked."""
        assert_no_shortcut(fn)
        for probe in probes:
            self.run(fn, probe, backward)

    # ------------------------------------------------------------------ diagnosis
    def diagnosable(self, probe: Probe) -> bool:
        return np.asarray(probe.args[self.main]).dtype == np.float64

    def hypotheses(
        self, causes: Sequence[Cause], probe: Probe, reference: Callable[[Probe], Any]
    ) -> list[Hypothesis]:
        """The causes on this probe, then "eps ignored": ``reference`` with other eps values."""
        if not self.diagnosable(probe):
            return []
        hyps = [
            (message, lambda v=variant: v(probe))
            for message, *variants in causes
            for variant in variants
        ]
        if self.eps_ignored and "eps" in probe.options:
            hyps += [
                (self.eps_ignored, lambda e=e: reference(probe.replace(eps=e)))
                for e in OTHER_EPS
                if e != probe.eps
            ]
        return hyps

    def forward_value(self, probe: Probe, item: int | None = None) -> Any:
        args = {n: probe.args[n] for n in self.inputs if n in probe.args}
        res = self.reference(**args, **probe.options)
        return res if item is None else res[item]

    # ------------------------------------------------------------------ the checks
    def check_forward(
        self,
        f: Callable,
        probe: Probe,
        *,
        rtol: float = 1e-6,
        atol: float = 1e-8,
        what: str | None = None,
        item: int | None = None,
        causes: Sequence[Cause] | None = None,
    ) -> None:
        """The forward on ``probe`` against the reference; ``item`` compares one result only
        (BatchNorm's out of (out, running_mean, running_var)); ``causes`` replace the table's
        (for another mode of the same function)."""
        assert_no_shortcut(f)
        out = self.run(f, probe)
        out = out if item is None else out[item]
        what = what or f"{self.outputs[item or 0][0]} {probe.label(self.main)}"

        def student(p: Probe) -> Any:
            res = self.run(f, p)
            return res if item is None else res[item]

        with self._rerun(f, probe, item):
            try:
                self._nonfinite(out, probe, what, causes, item)
                check_against(
                    out,
                    self.forward_value(probe, item),
                    what,
                    self.hypotheses(
                        self.causes if causes is None else causes,
                        probe,
                        lambda p: self.forward_value(p, item),
                    ),
                    rtol=rtol,
                    atol=atol,
                    relations=self.relations(probe) if self.relations else (),
                )
            except GradingError as err:
                self._eps_fixed(err, what, student, lambda p: self.forward_value(p, item), probe)
                self._precision(err, what, out, self.forward_value(probe, item), probe)
                raise

    def _nonfinite(
        self, out: Any, probe: Probe, what: str, causes: Sequence[Cause] | None, item: int | None
    ) -> None:
        """A result with NaN/inf (only a table with ``nonfinite`` lets one through): the cause
        that gives NaN/inf in the same places, else the table's ``nonfinite`` message."""
        bad = int(np.sum(~np.isfinite(out)))
        if not bad:
            return
        expected = self.forward_value(probe, item)
        hyps = self.hypotheses(
            self.causes if causes is None else causes,
            probe,
            lambda p: self.forward_value(p, item),
        )
        found = diagnose(out, hyps, expected)
        head = f"{what} contains {bad} NaN/inf values"
        if found is not None:
            raise GradingError(f"{head}. Likely cause: {found}")
        raise GradingError(f"{head}: {self.nonfinite}")

    def _eps_fixed(
        self, err: GradingError, what: str, student: Callable, reference: Callable, probe: Probe
    ) -> None:
        """Raise "eps ignored" when the student's result does not change with eps while the
        reference's does: an eps fixed inside the function (1e-6, 1e-7 ...) whatever its value,
        found by behaviour rather than from a list of values."""
        if "Likely cause" in str(err) or not self.eps_ignored or "eps" not in probe.options:
            return
        if not self.diagnosable(probe):
            return
        other = probe.replace(eps=probe.eps + 0.5)
        try:
            with np.errstate(all="ignore"):
                got = student(probe)
                same = matches(student(other), got, 1e-12, 1e-14)
                moves = not matches(reference(other), reference(probe), 1e-9, 1e-12)
        except Exception:  # noqa: BLE001 - a failing re-run tells nothing
            return
        # Only a result near the reference with some eps is an eps mistake (not "no norm").
        eps = [lambda e=e: reference(probe.replace(eps=e)) for e in (probe.eps, *OTHER_EPS)]
        if same and moves and near_any(got, eps):
            raise GradingError(
                f"{what} is wrong. Likely cause: {self.eps_ignored} (your result does not "
                f"change when eps goes from {probe.eps:g} to {other.eps:g})"
            ) from None

    def _precision(
        self, err: GradingError, what: str, actual: Any, expected: Any, probe: Probe
    ) -> None:
        """For a float64 probe, raise the cause :func:`.agreement.precision_cause` finds (the
        right result rounded to a few decimals, or right to float32's precision only)."""
        if "Likely cause" in str(err) or not self.diagnosable(probe):
            return
        cause = precision_cause(actual, expected)
        if cause is not None:
            raise GradingError(f"{what} is wrong. Likely cause: {cause}") from None

    def _rerun(self, f: Callable, probe: Probe, item: int | None):
        if self.affine is None:
            return contextlib.nullcontext()
        scale, shift = self.affine

        def changed(g: Any, b: Any) -> Probe:
            return probe.replace(**{scale: g, **({shift: b} if shift else {})})

        def student(g: Any, b: Any) -> Any:
            out = self.run(f, changed(g, b))
            return out if item is None else out[item]

        return explained_by_rerun(
            student,
            lambda g, b: self.forward_value(changed(g, b), item),
            probe.args[scale],
            probe.args[shift] if shift else None,
        )

    def numeric_gradients(self, probe: Probe) -> tuple:
        """Central finite differences of the reference forward's (first) output contracted
        with ``probe.dout``, with respect to each input the table has a gradient of."""
        p = probe.float64()
        item = 0 if len(self.outputs) > 1 else None

        def along(like: str) -> Callable[[np.ndarray], np.ndarray]:
            return lambda z: self.forward_value(p.replace(**{like: z}), item)

        return tuple(
            numerical_gradient(along(like), p.args[like], p.dout) for _, like in self.grads
        )

    def check_backward(
        self,
        b: Callable,
        probe: Probe,
        *,
        numeric: bool = False,
        rtol: float = 1e-6,
        atol: float = 1e-8,
    ) -> None:
        """The backward on ``probe`` (the forward's inputs and ``dout``) against the reference
        backward, or with ``numeric=True`` against finite differences of the forward."""
        assert_no_shortcut(b)
        grads = self.run(b, probe, backward=True)
        grads = grads if len(self.grads) > 1 else (grads,)

        def reference(p: Probe) -> tuple:
            res = self.reference_value(p, backward=True)
            return res if len(self.grads) > 1 else (res,)

        expected = self.numeric_gradients(probe) if numeric else reference(probe)
        if len(self.grads) > 1 and not matches(grads, expected, rtol, atol):
            self.check_order(grads, probe, True, getattr(b, "__name__", "your function"))
        label = probe.label(self.main) + (" (vs finite differences)" if numeric else "")
        names = [name for name, _ in self.grads]
        for group, causes in self.grad_checks:
            index = [names.index(n) for n in group]
            what = group[0] if len(group) == 1 else f"({', '.join(group)})"
            try:
                check_against(
                    _pick(grads, index),
                    _pick(expected, index),
                    f"{what} {label}",
                    self.hypotheses(
                        causes, probe, lambda p, index=index: _pick(reference(p), index)
                    ),
                    rtol=rtol,
                    atol=atol,
                )
            except GradingError as err:
                self._eps_fixed(
                    err,
                    f"{what} {label}",
                    lambda p, index=index: _pick(self._grads(b, p), index),
                    lambda p, index=index: _pick(reference(p), index),
                    probe,
                )
                self._precision(err, f"{what} {label}", _pick(grads, index),
                                _pick(expected, index), probe)  # fmt: skip
                how = None
                if group == ("dx",) and "Likely cause" not in str(err):
                    how = self._describe_dx(probe, grads[index[0]], expected[index[0]])
                if how is None:
                    raise
                intro = "In the terms of dx" if "How it differs" in str(err) else "How it differs"
                raise GradingError(f"{err} {intro}: {how}.") from None

    def _grads(self, b: Callable, probe: Probe) -> tuple:
        grads = self.run(b, probe, backward=True)
        return grads if len(self.grads) > 1 else (grads,)

    def _describe_dx(self, probe: Probe, dx: Any, expected: Any) -> str | None:
        """A wrong dx in the terms of its formula, on a float64 probe (None: no description)."""
        if self.dx_layout is None or not self.diagnosable(probe) or "eps" not in probe.options:
            return None
        try:
            to_rows, g, axes, center = self.dx_layout(probe)
            rows = [to_rows(np.asarray(a, dtype=np.float64)) for a in (dx, expected, probe.x, g)]
        except Exception:  # noqa: BLE001 - a layout that cannot be made describes nothing
            return None
        return describe_dx_difference(*rows, axes, probe.eps, center)


def backward_on(table: NormTable, doc: str) -> Callable:
    """The public ``check_backward_on(b, dout, x, gamma, eps, *, rtol, atol)`` of a norm
    whose backward takes ``(dout, x, gamma, eps=eps)`` (BatchNorm, LayerNorm, RMSNorm)."""

    def check_backward_on(b, dout, x, gamma, eps=DEFAULT_EPS, *, rtol=1e-6, atol=1e-8) -> None:
        # beta is no input of the backward; it gives dbeta its shape (and its value no gradient)
        zeros = np.zeros_like(np.asarray(gamma))
        probe = Probe({"dout": dout, "x": x, "gamma": gamma, "beta": zeros}, {"eps": eps})
        table.check_backward(b, probe, rtol=rtol, atol=atol)

    check_backward_on.__doc__ = doc
    return check_backward_on
