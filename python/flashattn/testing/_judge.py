"""The fp64 oracle and the tolerance rule, bound from C++ (one implementation: tolerance/judge.hpp)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import _flashattn
from .._core import ATTENTION_OPTIONS, Gradients, _attention_options, _call_args, _empty, _is_torch
from .._core import forward as _forward

# Keywords of the options shared by both passes (flashattn.forward's declared list).
OPTION_NAMES = tuple(o.name for o in ATTENTION_OPTIONS)


def to_host(x: Any) -> Any:
    """Returns x on the host as numpy (torch tensors zero-copy where they already are on the CPU;
    bfloat16 as ml_dtypes.bfloat16); other values unchanged."""
    if x is None or not _is_torch(x):
        return x
    import torch

    t = x.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _options(options: dict[str, Any]) -> dict[str, Any]:
    """The C++ fields of the options (flashattn.forward's keywords), arrays on the host."""
    o = _attention_options(options, "flashattn.testing")
    if o["block_mask"] is not None:
        m = o["block_mask"]
        o["block_mask"] = m._replace(**{f: to_host(getattr(m, f)) for f in m._fields[2:]})
    return {k: to_host(v) for k, v in o.items() if v is not None}


class _Reference:
    """flashattn.testing.reference: the fp64 oracle (C++ flashattn::reference), on host arrays."""

    @staticmethod
    def forward(q, k, v, *, precision: str = "fp64", **options) -> tuple[np.ndarray, np.ndarray]:
        """Returns (out, lse) as float64 numpy arrays before any rounding: out [B, Nq, Hq, dv] (rank-3
        q: B = 1), lse [B, Hq, Nq]. precision: "fp64" (the oracle), "same_as_input" (the naive
        algorithm in the inputs' precision, which sets the tolerance), "fp32", ... as
        flashattn::reference::Precision."""
        args, bf16 = _call_args(dict(q=to_host(q), k=to_host(k), v=to_host(v), **_options(options)))
        r = _flashattn.reference_forward(args, bf16, precision)
        return r["out"], r["lse"]

    @staticmethod
    def forward_rounded(q, k, v, **options) -> tuple[Any, Any]:
        """Returns (out, lse) as a backend returns them: out rounded to the inputs' dtype (nearest
        even), lse float32 — what a backward is given."""
        return _forward(to_host(q), to_host(k), to_host(v), return_lse=True, backend="reference",
                        **{k_: to_host(v_) for k_, v_ in options.items()})

    @staticmethod
    def backward(dout, q, k, v, out=None, lse=None, *, precision: str = "fp64", return_dbias: bool = True,
                 **options) -> Gradients:
        """Returns the fp64 gradients Gradients(dq, dk, dv, dsinks, dbias) as float64 numpy arrays,
        dense with q's, k's, v's (and bias's) sizes. out and lse: the forward's results the
        backward is given (default: forward_rounded's); they matter only for precision
        "fp64_given" / "fp64_given_out"."""
        q, k, v, dout = to_host(q), to_host(k), to_host(v), to_host(dout)
        if out is None or lse is None:
            out, lse = _Reference.forward_rounded(q, k, v, **options)
        o = _options(options)
        scratch = dict(dq=_empty(q, q.shape, "same"), dk=_empty(k, k.shape, "same"), dv=_empty(v, v.shape, "same"))
        if o.get("bias") is not None and return_dbias:
            scratch["dbias"] = _empty(o["bias"], o["bias"].shape, "same")
        args, bf16 = _call_args(dict(q=q, k=k, v=v, out=to_host(out), lse=to_host(lse), dout=dout, **scratch, **o))
        r = _flashattn.reference_backward(args, bf16, precision)
        return Gradients(r["dq"], r["dk"], r["dv"], r.get("dsinks"), r.get("dbias"))


reference = _Reference()


class AttentionMismatch(AssertionError):
    """An implementation's result is outside the tolerance rule; .verdicts holds every output's."""

    def __init__(self, message: str, verdicts: list[dict[str, Any]]):
        super().__init__(message)
        self.verdicts = verdicts


def _format(v: dict[str, Any]) -> str:
    lines = [
        f"  {v['output']}: max |impl - oracle| = {v['max_error']:.6g} > bound {v['bound']:.6g}"
        if np.isfinite(v["max_error"]) and v["max_error"] > v["bound"]
        else f"  {v['output']}: {v['reason'] or 'failed'} (max |impl - oracle| = {v['max_error']:.6g}, bound {v['bound']:.6g})",
        f"    bound = max(c * naive, fp32_terms) + contract + floor = max({v['c']:g} * {v['naive_error']:.6g}, "
        f"{v['fp32_terms']:.6g}) + {v['contract']:.6g} + {v['floor']:.6g}",
    ]
    if v.get("where"):
        at = f"    worst element {v['where']} (dense index {v['worst_index']})"
        if "impl_at_worst" in v:
            at += f": impl = {v['impl_at_worst']!r}, oracle = {v['oracle_at_worst']!r}"
        lines.append(at)
    return "\n".join(lines)


def _result_tuple(result: Any, names: tuple[str, ...]) -> dict[str, Any]:
    if isinstance(result, dict):
        return {n: result.get(n) for n in names}
    if not isinstance(result, (tuple, list)):
        result = (result,)
    return {n: (result[i] if i < len(result) else None) for i, n in enumerate(names)}


def _like(x: Any, ref: np.ndarray) -> Any:
    """x (an implementation's output) on the host in ref's dtype (rounded to nearest even)."""
    x = to_host(x)
    if x is None:
        return None
    x = np.asarray(x)
    if x.dtype != ref.dtype:
        x = x.astype(np.float32).astype(ref.dtype) if ref.dtype != np.float32 else x.astype(np.float32)
    return x


def judge(result: Any, q, k, v, *, dout=None, out=None, lse=None, **options) -> list[dict[str, Any]]:
    """Applies the tolerance rule of docs/semantics.md ("How the tests judge a backend") to an
    implementation's result for the call (q, k, v, options) and returns one verdict per output
    (dicts: output, passed, max_error, bound, naive_error, c, fp32_terms, contract, floor, where,
    impl_at_worst, oracle_at_worst, message). The rule is the C++ one (props::judge_forward /
    judge_backward, library flashattn_tolerance), not a re-implementation.

    Forward (dout None): result is out, (out, lse) or {"out", "lse"}; lse may be None (not judged).
    Backward (dout given): result is (dq, dk, dv[, dsinks[, dbias]]) or a dict; `out` and `lse` must be
    what the implementation's backward was given (the rule's contract term depends on them).
    Results in another dtype than q are rounded to q's first (as a backend's outputs are)."""
    q, k, v = to_host(q), to_host(k), to_host(v)
    o = _options(options)
    if dout is None:
        r = _result_tuple(result, ("out", "lse"))
        res_out = _like(r["out"], q)
        res_lse = None if r["lse"] is None else np.ascontiguousarray(to_host(r["lse"]), dtype=np.float32)
        args, bf16 = _call_args(dict(q=q, k=k, v=v, out=np.ascontiguousarray(res_out), lse=res_lse, **o))
        return _flashattn.judge_forward(args, bf16)
    if out is None or lse is None:
        raise TypeError("flashattn.testing: judging a backward needs the out and lse its backward was given")
    r = _result_tuple(result, ("dq", "dk", "dv", "dsinks", "dbias"))
    res = {n: _like(r[n], q) for n in ("dq", "dk", "dv")}
    if r["dsinks"] is not None:
        res["dsinks"] = np.ascontiguousarray(to_host(r["dsinks"]), dtype=np.float32)
    if r["dbias"] is not None:
        res["dbias"] = _like(r["dbias"], o["bias"])
    args, bf16 = _call_args(dict(q=q, k=k, v=v, out=_like(out, q), lse=np.ascontiguousarray(to_host(lse), np.float32),
                                 dout=to_host(dout), **res, **o))
    return _flashattn.judge_backward(args, bf16)


def assert_close(result: Any, q, k, v, *, dout=None, out=None, lse=None, **options) -> list[dict[str, Any]]:
    """Raises AttentionMismatch (an AssertionError) if any output of `result` is outside the
    tolerance rule (see judge(), same arguments); the message names the output, its maximum error,
    the bound and its terms, and the worst element. Returns the verdicts when every output passes."""
    verdicts = judge(result, q, k, v, dout=dout, out=out, lse=lse, **options)
    failed = [x for x in verdicts if not x["passed"]]
    if failed:
        what = "backward" if dout is not None else "forward"
        msg = "\n".join([f"flashattn.testing: {what} result disagrees with the fp64 oracle beyond the tolerance rule "
                         f"(docs/semantics.md, 'How the tests judge a backend'):"] + [_format(x) for x in failed])
        raise AttentionMismatch(msg, verdicts)
    return verdicts
