#!/usr/bin/env python3
"""Times PyTorch's CPU scaled_dot_product_attention, flash and math backends, on flashattn-bench's
cases, with its FLOP convention and JSON record fields, so the two programs' outputs merge into one
table (benchmarks/peers.sh, benchmarks/peers_table.py).

PyTorch is not a dependency of flashattn: peers.sh installs it from the Python package index into a
virtual environment of its own. Run this script with that environment's python.

  torch_cpu_sdpa.py --seqlen 1024,4096 --head-dim 64,128 --causal 0,1 --dtype f32,bf16 \\
      --threads 2 --machine-from bench.json --json torch.json

What is timed, per case (minimum and median of --reps calls after one warm-up call):
- fwd: F.scaled_dot_product_attention(q, k, v) under torch.no_grad(), the backend forced with
  torch.nn.attention.sdpa_kernel (SDPBackend.FLASH_ATTENTION: PyTorch's fused CPU flash kernel;
  SDPBackend.MATH: the materialised composite of matmul, softmax, matmul).
- bwd: the backward only, torch.autograd.grad(out, (q, k, v), dout) on a graph whose forward ran
  once, untimed (retain_graph), as flashattn-bench's bwd rows time flashattn's backward alone.
Inputs: standard normal q, k, v, dout in the [batch, seqlen, heads, d] memory layout flashattn-bench
uses, passed to PyTorch as the [batch, heads, seqlen, d] views PyTorch expects (what a model's
projections produce). Causal masks: PyTorch's is_causal is top-left aligned, flashattn's
bottom-right; they agree when Nq = Nk, the only causal case this script runs.

Check (reported, and a case fails when it is too far off): the outputs (fwd) or dq, dk, dv (bwd) of
the first two heads are compared with PyTorch's math backend in float64 on the same inputs, the
error max|x - x64| over those tensors, against the bound flashattn-bench uses for a check against
another fp32 implementation (docs/benchmarks.md, "Checks"; stated, not derived):
c * (4 u(dtype) [dtype != f32] + (16 + sqrt(Nq + Nk)) u(f32)) * max|x64|, c = 2 fwd, 3 bwd.
flashattn-bench's check_max_err for the same case (against its own reference, on its own N(0, 1)
inputs) is shown beside it by peers_table.py: the two libraries' errors on like inputs.

Peaks: --machine-from reads the "machine" object of a flashattn-bench JSON of the same run (its fp32
FMA and bf16 dot peaks, CPU name, caches) and fills peak_gflops / efficiency as flashattn-bench does.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from sdpa_cases import cases, flops

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
UNIT_ROUNDOFF = {"f32": 2.0**-24, "bf16": 2.0**-8}  # u(dtype): half an ulp at 1
CHECK_HEADS = 2


def time_ms(fn, reps):
    """Returns the sorted times of `reps` calls in ms, after one untimed warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)


def median(xs):
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def make_inputs(p, dtype, gen):
    """q, k, v, dout: standard normal in bshd memory, returned as bhsd views."""
    def one(seq, heads):
        x = torch.randn(p["batch"], seq, heads, p["head_dim"], generator=gen).to(dtype)
        return x.transpose(1, 2)
    return (one(p["seqlen_q"], p["heads_q"]), one(p["seqlen_k"], p["heads_k"]), one(p["seqlen_k"], p["heads_k"]),
            one(p["seqlen_q"], p["heads_q"]))


def attend(p, q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"])


def results_of(p, q, k, v, dout):
    """Returns the checked tensors of one call on leaf tensors: [out] or [dq, dk, dv]."""
    if p["pass"] == "fwd":
        with torch.no_grad():
            return [attend(p, q, k, v)]
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attend(p, q, k, v)
    return list(torch.autograd.grad(out, (q, k, v), dout))


def check(p, backend, q, k, v, dout):
    """Max error of the backend on the first CHECK_HEADS heads against the float64 math backend."""
    h = slice(0, CHECK_HEADS)
    sub = [t[:, h] for t in (q, k, v, dout)]
    with sdpa_kernel([BACKENDS[backend]]):
        got = results_of(p, *sub)
    with sdpa_kernel([SDPBackend.MATH]):
        ref = results_of(p, *(t.double() for t in sub))
    err = max((g.double() - r).abs().max().item() for g, r in zip(got, ref))
    scale = max(r.abs().max().item() for r in ref)
    u32 = UNIT_ROUNDOFF["f32"]
    own = 4 * UNIT_ROUNDOFF[p["dtype"]] if p["dtype"] != "f32" else 0
    c = 2 if p["pass"] == "fwd" else 3
    bound = c * (own + (16 + math.sqrt(p["seqlen_q"] + p["seqlen_k"])) * u32) * scale
    return err, bound


def run_case(backend, p, reps, machine):
    dt = DTYPES[p["dtype"]]
    gen = torch.Generator().manual_seed(0)
    q, k, v, dout = make_inputs(p, dt, gen)
    err, bound = check(p, backend, q, k, v, dout)
    with sdpa_kernel([BACKENDS[backend]]):
        if p["pass"] == "fwd":
            def call():
                with torch.no_grad():
                    attend(p, q, k, v)
        else:
            ql, kl, vl = (t.detach().requires_grad_() for t in (q, k, v))
            out = attend(p, ql, kl, vl)

            def call():
                torch.autograd.grad(out, (ql, kl, vl), dout, retain_graph=True)
        times = time_ms(call, reps)
    f = flops(p)
    gflops = f / (times[0] * 1e-3) * 1e-9
    fp32_peak = machine.get("peak_gflops", 0)
    bf16_peak = machine.get("bf16_peak_gflops", 0)
    use_bf16 = p["dtype"] == "bf16" and bf16_peak > 0
    peak = bf16_peak if use_bf16 else fp32_peak
    return dict(impl="torch-" + backend, **p, block_q=0, block_k=0, threads=torch.get_num_threads(), status="ok",
                reps=len(times), ms_min=times[0], ms_median=median(times), flops=f, gflops=gflops,
                peak_kind="bf16 dot" if use_bf16 else "fp32 fma", peak_gflops=peak,
                efficiency=gflops / peak if peak else 0, fp32_peak_gflops=fp32_peak,
                fp32_efficiency=gflops / fp32_peak if fp32_peak else 0,
                extra_bytes=None, extra_bytes_measured=None, extra_bytes_declared=None,
                check_against=f"torch-math-f64 (heads 0-{CHECK_HEADS - 1})", check_max_err=err, check_bound=bound,
                check_passed=err <= bound, check_note="" if err <= bound else "error above the stated bound",
                cpu=machine.get("cpu_model", ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="flash,math")
    ap.add_argument("--pass", dest="passes", default="fwd,bwd")
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--batch", default="1")
    ap.add_argument("--heads", default="16")
    ap.add_argument("--seqlen", default="1024,4096")
    ap.add_argument("--head-dim", default="64,128")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--machine-from", default="", help="flashattn-bench JSON whose machine facts and peaks to use")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    machine = {}
    if a.machine_from:
        with open(a.machine_from) as f:
            machine = json.load(f)["machine"]
    machine = dict(machine, torch_version=torch.__version__, torch_cpu_capability=torch.backends.cpu.get_cpu_capability())
    print(f"torch {torch.__version__} ({machine['torch_cpu_capability']}), {torch.get_num_threads()} threads, "
          f"CPU {machine.get('cpu_model', 'unknown (no --machine-from)')}")
    print(f"{'impl':12} {'pass':4} {'dtype':5} {'B':>3} {'H':>4} {'N':>6} {'d':>4} {'mask':6} "
          f"{'min ms':>10} {'GFLOP/s':>9} {'%peak':>6}  check")
    records, failed = [], 0
    for backend, p in cases(a):
        ps, dtype, b, h, n, d = (p[x] for x in ("pass", "dtype", "batch", "heads_q", "seqlen_q", "head_dim"))
        r = run_case(backend, p, a.reps, machine)
        records.append(r)
        failed += not r["check_passed"]
        verdict = "PASS" if r["check_passed"] else "FAIL"
        print(f"{r['impl']:12} {ps:4} {dtype:5} {b:3} {h:4} {n:6} {d:4} {'causal' if p['causal'] else 'none':6} "
              f"{r['ms_min']:10.3f} {r['gflops']:9.1f} {100 * r['efficiency']:6.1f}  "
              f"{verdict} err {r['check_max_err']:.1e} <= {r['check_bound']:.1e}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine, "results": records}, f, indent=2)
    print(f"{len(records)} cases: {failed} check failures")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
