#!/usr/bin/env python3
"""One table of a decode run: flashattn's CPU decode (flashattn-bench --decode --csv) beside PyTorch's
CPU SDPA (benchmarks/torch_cpu_decode.py --csv) on the same shapes, same machine, same run.

  decode_table.py FLASHATTN.csv TORCH.csv [--markdown OUT.md]

Per (dtype, B, Nk): flashattn contiguous GB/s with its share of the read bandwidth the run measured
before its timings, tokens/s per sequence, the paged layout's GB/s (each page size in the CSV), then
PyTorch's flash backend on the same [B, Nk, Hk, d] memory and on its preferred contiguous
[B, Hk, Nk, d] copy, its math backend (best layout), and flashattn's tokens/s over the faster of
PyTorch's flash rows. GB/s = K and V bytes over the fastest call.
"""
import csv
import sys


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def merge(flash_rows, torch_rows):
    """Returns (read bandwidth before, after, page layouts, rows of dicts per (dtype, B, Nk, Nq))."""
    cases = {}
    for r in flash_rows:
        c = cases.setdefault((r["dtype"], int(r["batch"]), int(r["nk"]), int(r.get("new_rows") or 1)), {})
        if r["impl"] == "cpu":
            c[r["layout"]] = r
    for r in torch_rows:
        key = (r["dtype"], int(r["batch"]), int(r["nk"]), int(r["new_rows"]))
        if key in cases:
            cases[key][f"{r['impl']}-{r['layout']}"] = r
    first = flash_rows[0]
    pages = sorted({r["layout"] for r in flash_rows if r["layout"].startswith("paged-")}, key=lambda s: int(s[6:]))
    return float(first["read_bw_before"]), float(first["read_bw_after"]), pages, cases


def gbps(c, key):
    return float(c[key]["gbps"]) if key in c else None


def render(flash_csv, torch_csv):
    bw, bw_after, pages, cases = merge(read_csv(flash_csv), read_csv(torch_csv))
    head = ["dtype", "B", "Nk", "flashattn GB/s (% of read BW)", "tokens/s per sequence"] + \
           [f"{p} GB/s" for p in pages] + ["torch-flash bshd GB/s", "torch-flash bhsd GB/s", "torch-math GB/s",
                                           "flashattn / torch-flash tokens/s"]
    out = [f"Read bandwidth {bw:.1f} GB/s before the timings, {bw_after:.1f} after; % against the before value.", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (dt, b, nk, nq), c in sorted(cases.items(), key=lambda kv: (kv[0][0] != "f32", kv[0][1], kv[0][2])):
        if "contiguous" not in c:
            continue
        own = c["contiguous"]
        flash = [float(c[k]["tokens_per_s_per_seq"]) for k in ("torch-flash-bshd", "torch-flash-bhsd") if k in c]
        maths = [g for g in (gbps(c, "torch-math-bshd"), gbps(c, "torch-math-bhsd")) if g is not None]
        cells = [dt, b, nk, f"{float(own['gbps']):.1f} ({float(own['percent_of_read_bw']):.0f} %)",
                 f"{float(own['tokens_per_s_per_seq']):.0f}"]
        cells += [f"{gbps(c, p):.1f}" if gbps(c, p) is not None else "-" for p in pages]
        cells += [f"{g:.1f}" if g is not None else "-" for g in (gbps(c, "torch-flash-bshd"), gbps(c, "torch-flash-bhsd"))]
        cells += [f"{max(maths):.1f}" if maths else "skipped",
                  f"{float(own['tokens_per_s_per_seq']) / max(flash):.2f}x" if flash else "-"]
        out.append("| " + " | ".join(str(x) for x in cells) + " |")
    return "\n".join(out)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    text = render(args[0], args[1])
    if "--markdown" in argv:
        with open(args[2], "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
