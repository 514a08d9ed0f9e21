#!/usr/bin/env python3
"""Where the GPU time goes: per-kernel device time of flashattn::gpu's forward and backward beside
PyTorch's flash backend (torch.profiler), and a single-call mode for Nsight Compute.

  gpu_profile.py --lib build/gpu/libflashattn_gpu_capi.so            # kernel table, bf16, N = 8192
  ncu --clock-control none -k regex:'forward_kernel|backward_kernel|dot_kernel|dq_convert|flash_' \
      python3 gpu_profile.py --lib ... --once --d 128 --causal 0       # counters of one fwd + bwd

The shapes are benchmarks/sdpa_compare.py's (hidden 2048, 16K tokens). The table gives, per kernel,
the mean device time per call and its share of the pass, so a slow pass can be split into its
kernels (e.g. the backward's D pass, dK/dV kernel and dQ conversion) before reading counters.
"""
import argparse
import collections
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_compare import HIDDEN, TOKENS, Flashattn, load, run_sdpa, sdpa_backends  # noqa: E402


def kernel_times(fn, reps):
    """Mean device microseconds per call of each kernel fn launches (name -> (us, launches/call))."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    acc = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            a = acc[e.name]
            a[0] += e.device_time
            a[1] += 1
    return {k: (v[0] / reps, v[1] / reps) for k, v in acc.items()}


def short(name, width=96):
    name = name.replace("flashattn::gpu::", "").replace("flashattn::", "")
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--n", type=int, default=8192, help="sequence length (batch = 16384 / n)")
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--causal", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--once", action="store_true", help="one forward and backward call each, ours and torch-flash (for ncu)")
    args = ap.parse_args()
    lib = load(args.lib)
    torch.manual_seed(0)
    for d in args.d:
        for causal in args.causal:
            n, B, H = args.n, TOKENS // args.n, HIDDEN // d
            q, k, v = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            ours = Flashattn(lib, q, k, v, bool(causal))
            dout = torch.randn_like(q)
            if args.once:  # one call of each pass, ours and torch-flash's (ncu replays each kernel itself)
                ours.forward()
                ours.backward(dout)
                flash = run_sdpa(sdpa_backends().get("torch-flash"), q, k, v, bool(causal))
                torch.cuda.synchronize()
                del ours, q, k, v, dout, flash
                continue
            flops_f = 4 * B * H * n * n * d / (2 if causal else 1)
            print(f"\n## d={d} causal={causal} B={B} H={H} N={n} bf16 ({torch.cuda.get_device_name()})")
            ours_det = Flashattn(lib, q, k, v, bool(causal), deterministic=True)
            ours_det.forward()
            passes = {"flashattn fwd": (ours.forward, flops_f), "flashattn bwd": (lambda: ours.backward(dout), 2.5 * flops_f),
                      "flashattn bwd deterministic": (lambda: ours_det.backward(dout), 2.5 * flops_f)}
            flash = run_sdpa(sdpa_backends().get("torch-flash"), q, k, v, bool(causal))
            if flash is not None:
                passes["torch-flash fwd"] = (flash[0], flops_f)
                passes["torch-flash bwd"] = (flash[1], 2.5 * flops_f)
            print(f"| pass | kernel | us/call | launches/call | share | pass TFLOP/s |")
            print("|---|---|---|---|---|---|")
            for label, (fn, flops) in passes.items():
                t = kernel_times(fn, args.reps)
                total = sum(us for us, _ in t.values())
                for name, (us, launches) in sorted(t.items(), key=lambda kv: -kv[1][0]):
                    print(f"| {label} | `{short(name)}` | {us:.1f} | {launches:g} | {us / total:.0%} | "
                          f"{flops / (total * 1e-6) / 1e12:.1f} |")
            del ours, ours_det, q, k, v, dout, flash
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
