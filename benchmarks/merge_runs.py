#!/usr/bin/env python3
"""Merges repeated flashattn-bench runs (--json files) into one table: per case, the fastest run.

The development hosts are shared: another guest can slow a whole case down, and the minimum over
repetitions inside one run cannot undo that. Running the same command several times and keeping,
per case and implementation, the run with the smallest ms_min gives numbers that reflect the
implementation rather than the neighbours. Efficiency is taken against the highest FMA peak any of
the runs measured (the machine's ceiling). A case whose check failed in any run is reported as
failed. Ratios between implementations in the output compare their best runs.

Usage: merge_runs.py RUN1.json RUN2.json ... [--markdown]
"""
import json
import sys


def key(r):
    return (r["pass"], r["dtype"], r["batch"], r["heads_q"], r["heads_k"], r["seqlen_q"], r["seqlen_k"],
            r["head_dim"], r["causal"], r["block_q"], r["block_k"], r["impl"])


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024.0
    return f"{n:.1f} GiB"


def main(argv):
    files = [a for a in argv if not a.startswith("--")]
    markdown = "--markdown" in argv
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    best, failed, runs = {}, set(), {}
    peak = 0.0
    for f in files:
        data = json.load(open(f))
        peak = max(peak, data["machine"]["peak_gflops_before"], data["machine"]["peak_gflops_after"])
        for r in data["results"]:
            k = key(r)
            runs[k] = runs.get(k, 0) + 1
            if r.get("check_passed") is False:
                failed.add(k)
            if r["status"] != "ok":
                continue
            if k not in best or r["ms_min"] < best[k]["ms_min"]:
                best[k] = r
    cols = ["impl", "pass", "dtype", "B", "Hq", "Nq", "Nk", "d", "mask", "min ms", "GFLOP/s", "%peak", "extra mem", "runs", "check"]
    rows = []
    for k in sorted(best, key=lambda k: (k[0], k[1], k[7], k[5], k[8], k[11])):
        r = best[k]
        gflops = r["flops"] / (r["ms_min"] * 1e-3) * 1e-9
        rows.append([r["impl"], r["pass"], r["dtype"], str(r["batch"]), str(r["heads_q"]), str(r["seqlen_q"]),
                     str(r["seqlen_k"]), str(r["head_dim"]), "causal" if r["causal"] else "none", f"{r['ms_min']:.3f}",
                     f"{gflops:.1f}", f"{100 * gflops / peak:.1f}", human_bytes(r["extra_bytes"]), str(runs[k]),
                     "FAIL" if k in failed else ("PASS " + r["check_against"] if r.get("check_passed") else "unchecked")])
    print(f"# {len(files)} runs merged; FMA peak (max of the runs' before/after checks): {peak:.0f} GFLOP/s")
    if markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
        for row in rows:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
