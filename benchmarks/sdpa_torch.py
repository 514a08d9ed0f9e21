#!/usr/bin/env python3
"""Times PyTorch scaled_dot_product_attention backends (flash, cuDNN, efficient) on a GPU, with
flashattn-bench's FLOP convention and JSON fields, for side-by-side comparison with `gpu` rows.

Needs a CUDA GPU and PyTorch >= 2.3 (torch.nn.attention.sdpa_kernel); not installed by
scripts/setup. Written without a GPU or PyTorch at hand: not yet run (see benchmarks/RESULTS.md).

  python3 benchmarks/sdpa_torch.py --seqlen 1024,4096 --heads 16 --head-dim 128 --causal 0,1 --json out.json

Causal masks: PyTorch's is_causal is top-left aligned, flashattn's bottom-right; they agree when
Nq = Nk, the only causal case this script runs. Checks: each backend's output (and gradients) are
compared with the math backend in fp32 on the same inputs; max errors are reported, not judged.
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from sdpa_cases import cases, flops

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def time_ms(fn, reps):
    """Returns sorted per-call times in ms (CUDA events), after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)


def run_case(backend, p, reps):
    dt = DTYPES[p["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape_q = (p["batch"], p["heads_q"], p["seqlen_q"], p["head_dim"])
    shape_k = (p["batch"], p["heads_k"], p["seqlen_k"], p["head_dim"])
    q, k, v = (torch.randn(s, device="cuda", generator=gen).to(dt).requires_grad_() for s in (shape_q, shape_k, shape_k))
    dout = torch.randn(shape_q, device="cuda", generator=gen).to(dt)
    gqa = p["heads_q"] != p["heads_k"]

    def attend(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, is_causal=p["causal"], enable_gqa=gqa)

    with sdpa_kernel([BACKENDS[backend]]):
        out = attend(q, k, v)
        if p["pass"] == "fwd":
            got = [out]
            times = time_ms(lambda: attend(q, k, v), reps)
        else:
            got = list(torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))  # graph reused by the timing
            times = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), reps)
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    with sdpa_kernel([SDPBackend.MATH]):
        ref_out = attend(qf, kf, vf)
        ref = [ref_out] if p["pass"] == "fwd" else list(torch.autograd.grad(ref_out, (qf, kf, vf), dout.float()))
    err = max((g.float() - r).abs().max().item() for g, r in zip(got, ref))
    ms_min, ms_med = times[0], times[len(times) // 2]
    f = flops(p)
    return dict(impl="torch-" + backend, **p, ms_min=ms_min, ms_median=ms_med, flops=f, gflops=f / (ms_min * 1e-3) * 1e-9,
                check_against="torch-math-f32", check_max_err=err)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="flash,cudnn,efficient")
    ap.add_argument("--pass", dest="passes", default="fwd,bwd")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--batch", default="1")
    ap.add_argument("--heads", default="16")
    ap.add_argument("--heads-k", default="")
    ap.add_argument("--seqlen", default="1024,4096")
    ap.add_argument("--head-dim", default="128")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    records = []
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'impl':16} {'pass':4} {'dtype':5} {'B':>3} {'Hq':>4} {'Hk':>4} {'N':>6} {'d':>4} {'mask':6} "
          f"{'min ms':>9} {'GFLOP/s':>9} {'max err vs math':>16}")
    for backend, p in cases(a, a.heads_k):
        ps, dtype, b, h, hk, n, d = (p[x] for x in ("pass", "dtype", "batch", "heads_q", "heads_k", "seqlen_q", "head_dim"))
        try:
            r = run_case(backend, p, a.reps)
        except RuntimeError as e:  # backend unavailable for this shape or GPU
            print(f"torch-{backend:10} {ps:4} {dtype:5} {b:3} {h:4} {hk:4} {n:6} {d:4} skipped: {str(e).splitlines()[0]}")
            continue
        records.append(r)
        print(f"{r['impl']:16} {ps:4} {dtype:5} {b:3} {h:4} {hk:4} {n:6} {d:4} {'causal' if p['causal'] else 'none':6} "
              f"{r['ms_min']:9.3f} {r['gflops']:9.1f} {r['check_max_err']:16.2e}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": records}, f, indent=2)


if __name__ == "__main__":
    main()
