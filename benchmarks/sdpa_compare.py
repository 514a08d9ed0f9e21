#!/usr/bin/env python3
"""flashattn::gpu against PyTorch's SDPA backends (flash, cuDNN, efficient) on the same GPU, same run.

Cases: bf16, head dim 64 and 128, hidden 2048 (heads = 2048 / d), batch x seqlen = 16K
tokens, seqlen 512 .. 16384, causal and not, forward and backward. Throughput uses docs/benchmarks.md's
convention: fwd FLOPs = 4 B H N^2 d (halved when causal), bwd = 2.5 x fwd.

Every case is checked before it is timed: flashattn's out, dq, dk, dv against PyTorch's flash
backend (or the first available backend) within a bf16 tolerance; a mismatch exits non-zero.
Timing: CUDA events, warm-up first, median and min of the repetitions.

Usage: sdpa_compare.py --lib build/gpu/libflashattn_gpu_capi.so [--quick] [--markdown out.md]
"""
import argparse
import ctypes
import datetime
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # PyTorch < 2.3
    SDPBackend = None

HIDDEN = 2048
TOKENS = 16384
DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}


def load(lib_path):
    lib = ctypes.CDLL(lib_path)
    p, i, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p
    lib.flashattn_gpu_forward.argtypes = [p, p, p, p, f] + [i] * 8 + [p]
    lib.flashattn_gpu_backward.argtypes = [p] * 5 + [p, p, p, p] + [i] * 9 + [p]
    lib.flashattn_gpu_last_error.restype = ctypes.c_char_p
    return lib


class Flashattn:
    """Our kernels on contiguous bshd tensors owned by PyTorch."""

    def __init__(self, lib, q, k, v, causal, deterministic=False):
        self.lib, self.q, self.k, self.v, self.causal = lib, q, k, v, causal
        self.deterministic = deterministic
        B, N, H, d = q.shape
        self.dims = (B, N, k.shape[1], H, k.shape[2], d, DTYPE_CODE[q.dtype], int(causal))
        self.out = torch.empty_like(q)
        self.lse = torch.empty(B, H, N, device=q.device, dtype=torch.float32)
        self.dq, self.dk, self.dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def _ok(self, rc):
        if rc != 0:
            raise RuntimeError(self.lib.flashattn_gpu_last_error().decode())

    def forward(self):
        s = torch.cuda.current_stream().cuda_stream
        self._ok(self.lib.flashattn_gpu_forward(self.q.data_ptr(), self.k.data_ptr(), self.v.data_ptr(),
                                                self.out.data_ptr(), self.lse.data_ptr(), *self.dims, s))

    def backward(self, dout):
        s = torch.cuda.current_stream().cuda_stream
        B, Nq, Nk, Hq, Hk, d, code, causal = self.dims
        self._ok(self.lib.flashattn_gpu_backward(
            self.q.data_ptr(), self.k.data_ptr(), self.v.data_ptr(), self.out.data_ptr(), self.lse.data_ptr(),
            dout.data_ptr(), self.dq.data_ptr(), self.dk.data_ptr(), self.dv.data_ptr(),
            B, Nq, Nk, Hq, Hk, d, code, causal, int(self.deterministic), s))


def time_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times)


def sdpa_backends():
    if SDPBackend is None:
        return {"sdpa-default": None}
    return {"torch-flash": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
            "torch-efficient": SDPBackend.EFFICIENT_ATTENTION}


def run_sdpa(backend, q, k, v, causal):
    """Returns (forward closure, backward closure, out, grads) for one SDPA backend, or None."""
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_(True) for x in (q, k, v))

    def fwd():
        if backend is None:
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    try:
        out = fwd()
    except RuntimeError:
        return None
    dout = torch.randn_like(out)
    out.backward(dout, retain_graph=True)
    grads = [x.grad.transpose(1, 2).clone() for x in (qt, kt, vt)]

    def bwd():
        for x in (qt, kt, vt):
            x.grad = None
        out.backward(dout, retain_graph=True)

    return fwd, bwd, out.transpose(1, 2), dout.transpose(1, 2).contiguous(), grads


def close(x, ref, what, errors):
    """bf16/f16 tolerance against another same-precision implementation (a check, not the oracle)."""
    err = (x.float() - ref.float()).abs().max().item()
    bound = 2e-2 * ref.float().abs().max().item() + 2e-3
    if not (err <= bound):
        errors.append(f"{what}: max |flashattn - torch| = {err:.3g} > {bound:.3g}")
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libflashattn_gpu_capi.so")
    ap.add_argument("--quick", action="store_true", help="seqlen 1024, 4096, 16384 only; fewer repetitions")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--markdown", help="append a results table (with GPU, driver, date) to this file")
    args = ap.parse_args()

    lib = load(args.lib)
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip().splitlines()[:1]
    except OSError:
        driver = []
    header = f"{dev}, driver {driver[0] if driver else '?'}, torch {torch.__version__}, " \
             f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC"
    seqlens = [1024, 4096, 16384] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    reps = max(5, args.reps // 2) if args.quick else args.reps
    rows, failures = [], []
    for d in (64, 128):
        for causal in (False, True):
            for n in seqlens:
                B, H = TOKENS // n, HIDDEN // d
                q, k, v = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                flops_f = 4 * B * H * n * n * d / (2 if causal else 1)
                flops = {"fwd": flops_f, "bwd": 2.5 * flops_f}
                ours = Flashattn(lib, q, k, v, causal)
                ref = None
                timings = {}
                for name, backend in sdpa_backends().items():
                    r = run_sdpa(backend, q, k, v, causal)
                    if r is None:
                        continue
                    fwd, bwd, out, dout, grads = r
                    if ref is None:
                        ref = (out.detach(), dout, grads, name)
                    timings[name] = {"fwd": time_ms(fwd, reps), "bwd": time_ms(bwd, reps)}
                    del r, fwd, bwd
                case = f"d={d} causal={int(causal)} B={B} H={H} N={n}"
                ours.forward()
                if ref is not None:
                    out, dout, grads, name = ref
                    errs = []
                    close(ours.out, out, f"{case} out vs {name}", errs)
                    ours.backward(dout)
                    for g, r_, w in zip((ours.dq, ours.dk, ours.dv), grads, ("dq", "dk", "dv")):
                        close(g, r_, f"{case} {w} vs {name}", errs)
                    failures += errs
                    dout_ours = dout
                else:
                    dout_ours = torch.randn_like(q)
                timings["flashattn-gpu"] = {"fwd": time_ms(ours.forward, reps),
                                            "bwd": time_ms(lambda: ours.backward(dout_ours), reps)}
                for impl, t in timings.items():
                    for p in ("fwd", "bwd"):
                        med, mn = t[p]
                        rows.append((d, int(causal), n, B, H, p, impl, med, mn, flops[p] / (med * 1e-3) / 1e12))
                del ours, q, k, v, ref
                torch.cuda.empty_cache()

    lines = [f"### flashattn-gpu vs PyTorch SDPA — {header}", "",
             "| d | causal | N | B | H | pass | impl | median ms | min ms | TFLOP/s | vs torch-flash |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    flash = {(r[0], r[1], r[2], r[5]): r[9] for r in rows if r[6] == "torch-flash"}
    for r in rows:
        base = flash.get((r[0], r[1], r[2], r[5]))
        ratio = f"{r[9] / base:.2f}" if base else "-"
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]} | {r[7]:.3f} | {r[8]:.3f} | "
                     f"{r[9]:.1f} | {ratio} |")
    table = "\n".join(lines)
    if args.markdown:
        with open(args.markdown, "a") as fh:
            fh.write(table + "\n\n")
            if failures:
                fh.write("Correctness FAILURES:\n" + "\n".join(f"- {x}" for x in failures) + "\n\n")
    print(table)
    if failures:
        print("\nCORRECTNESS FAILURES (timings above are not valid for these cases):", file=sys.stderr)
        for x in failures:
            print("  " + x, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
