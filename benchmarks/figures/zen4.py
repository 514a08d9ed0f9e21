"""Zen 4 CPU figures of benchmarks/RESULTS.md (the Zen 4 guest, 2026-11-24/25): against PyTorch's CPU
SDPA, bf16 tile products on `vdpbf16ps`, bias and dropout, block-sparse masks, decode and ring attention.

Every number comes from the run's raw files under benchmarks/results/; the prose around a table stays
in RESULTS.md unless it quotes a number of the same file.
"""
import csv
import io
import re

from . import block, md_tables, read, span, table

PEERS = "benchmarks/results/2026-11-24/peers-zen4-bf16/peers.md"
BF16_DOT = "benchmarks/results/2026-11-24/zen4-bf16/bf16-dot-tile128.txt"
BIAS_DROPOUT = "benchmarks/results/2026-11-25/bias-dropout"
BLOCK_SPARSE = "benchmarks/results/2026-11-25/block-sparse"
DECODE = "benchmarks/results/2026-11-25/decode"
RING = "benchmarks/results/2026-11-25/ring-zen4.txt"


def load_csv(rel):
    """The rows of a CSV file with a header line, as dicts of strings."""
    return list(csv.DictReader(io.StringIO(read(rel))))


def sig3(x):
    """x to three significant figures, trailing zeros kept (94.0, 365, 7.40)."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


# ---- CPU vs PyTorch CPU SDPA (benchmarks/peers.sh) ---------------------------------------------------

def peers_cases():
    """{(pass, dtype, N, d, mask): row of peers.md's table as {column: cell}}."""
    header, body = md_tables(PEERS)[0]
    rows = [dict(zip(header, r)) for r in body]
    return {(r["pass"], r["dtype"], int(r["N"]), int(r["d"]), r["mask"]): r for r in rows}


def peers_outliers(cases):
    """The cases where PyTorch's flash kernel ran slower than its own math backend (which materialises the
    N x N scores): a reading that the flash kernel's design rules out, i.e. noise."""
    return [k for k, r in cases.items() if float(r["torch-flash ms"]) > float(r["torch-math ms"])]


@block("cpu-peers-zen4-bf16", PEERS)
def cpu_peers_zen4_bf16():
    cases = peers_cases()
    outliers = peers_outliers(cases)

    def ratio(p, dt, n, d, mask):
        key = (p, dt, n, d, mask)
        return cases[key]["torch-flash / cpu"].rstrip("x") + ("*" if key in outliers else "")

    body = []
    for p in ("fwd", "bwd"):
        for dt in ("f32", "bf16"):
            cells = [", ".join(" / ".join(ratio(p, dt, n, d, m) for m in ("none", "causal")) for n in (1024, 4096))
                     for d in (64, 128)]
            pk = [float(r["cpu %pk"]) for k, r in cases.items() if k[:2] == (p, dt)]
            body.append([p, dt] + cells + [span(pk, "{:.0f}") + " %"])
    # peers.md's first line: "CPU ..., 2 threads, SIMD AVX3; fp32 FMA peak ...; PyTorch ...; load average ..."
    clauses = read(PEERS).splitlines()[0].rstrip(".").split("; ")
    text = f"The run's `peers.md`: {', '.join(clauses[1:])}.\n\n" + table(["pass", "dtype",
                  "torch-flash / cpu, d = 64: N = 1024 none / causal, N = 4096 none / causal",
                  "d = 128: the same order",
                  "flashattn % of peak (fp32 FMA for f32, bf16 dot for bf16)"], body)
    for p, dt, n, d, mask in outliers:
        r = cases[(p, dt, n, d, mask)]
        text += (f"\n\n(* PyTorch's {dt} {'forward' if p == 'fwd' else 'backward'} at N = {n}, d = {d} "
                 f"{'non-causal' if mask == 'none' else 'causal'} read {float(r['torch-flash ms']):.0f} ms in this "
                 f"run, slower than its math backend ({float(r['torch-math ms']):.0f} ms): an outlier, kept as "
                 f"measured.)")
    return text


# ---- bf16 tile products (flashattn-bf16-dot) ---------------------------------------------------------

@block("cpu-bf16-dot-zen4", BF16_DOT)
def cpu_bf16_dot_zen4():
    # the tool's whole output: the peaks line and its table, verbatim
    return "```\n" + read(BF16_DOT).rstrip("\n") + "\n```"


# ---- bias and dropout (flashattn-bench --csv) --------------------------------------------------------

def bench_peaks(rel, name):
    """(before, after) of a flashattn-bench text output's peak line starting with NAME."""
    for line in read(rel).splitlines():
        m = re.match(rf"{re.escape(name)} \(.*\): (\d+) GFLOP/s before, (\d+) after", line)
        if m:
            return int(m.group(1)), int(m.group(2))
    raise ValueError(f"no '{name}' line in {rel}")


def bench_times(rel):
    """{(pass, dtype, N, causal, bias, dbias, dropout): fastest call in ms} of a flashattn-bench CSV;
    causal and dbias as bools, dropout as the probability (0.0 without)."""
    out = {}
    for r in load_csv(rel):
        key = (r["pass"], r["dtype"], int(r["seqlen_q"]), r["causal"] == "true", r["bias"], r["dbias"] == "true",
               round(float(r["dropout"]), 6))
        if key in out:
            raise ValueError(f"{rel}: two rows for {key}")
        out[key] = float(r["ms_min"])
    return out


def checked_combinations():
    """The sentence on the oracle-checked run at small N (checked.csv, checked.txt)."""
    rows = load_csv(f"{BIAS_DROPOUT}/checked.csv")
    summary = r"^(\d+) cases in .*: (\d+) check failures, (\d+) errors$"
    m = re.search(summary, read(f"{BIAS_DROPOUT}/checked.txt"), re.M)
    cases, failures = int(m.group(1)), int(m.group(2)) + int(m.group(3))
    if cases != len(rows):
        raise ValueError(f"checked.txt counts {cases} cases, checked.csv holds {len(rows)}")

    def values(col, order):
        return "/".join(v for v in order if any(r[col] == v for r in rows))

    def both(col):  # a flag the cases take both values of
        return {r[col] for r in rows} == {"false", "true"}

    dropouts = "/".join(f"{p:g}" for p in sorted({round(float(r["dropout"]), 6) for r in rows}))
    (shape,) = {f"N = {r['seqlen_q']}, Hq = {r['heads_q']}" for r in rows}
    combos = " x ".join(c for c in (values("pass", ("fwd", "bwd")), values("dtype", ("f32", "bf16", "f16")),
                                    "causal" if both("causal") else "",
                                    f"bias {values('bias', ('none', 'keys', 'rows', 'full'))}",
                                    "dbias" if both("dbias") else "", f"dropout {dropouts}") if c)
    return (f"The same code passed the oracle check on every combination at {shape} (`checked.txt`: "
            f"{cases} cases, {combos}, {failures} failures).")


@block("cpu-bias-dropout-zen4-runs", *(f"{BIAS_DROPOUT}/{f}" for f in ("dropout.txt", "bias.txt", "checked.csv",
                                                                       "checked.txt")))
def cpu_bias_dropout_zen4_runs():
    timed = [f"{BIAS_DROPOUT}/{f}.txt" for f in ("dropout", "bias")]
    fma = [p for r in timed for p in bench_peaks(r, "FMA peak")]
    dot = [p for r in timed for p in bench_peaks(r, "bf16 dot peak")]
    return (checked_combinations() + f" Peaks measured before and after each timed run: fp32 FMA "
            f"{span(fma, '{:.0f}')} GFLOP/s, bf16 dot {span(dot, '{:.0f}')} GFLOP/s.")


@block("cpu-dropout-zen4", f"{BIAS_DROPOUT}/dropout.csv")
def cpu_dropout_zen4():
    times = bench_times(f"{BIAS_DROPOUT}/dropout.csv")
    p = max(k[6] for k in times)
    ratios, body = {}, []
    for ps in ("fwd", "bwd"):
        for dt in ("f32", "bf16"):
            cells = []
            for causal in (False, True):
                for n in (2048, 4096):
                    with_, without = (times[(ps, dt, n, causal, "none", False, q)] for q in (p, 0.0))
                    ratios[(ps, dt, n, causal)] = with_ / without
                    cells.append(f"{with_ / without:.2f} ({sig3(with_)} / {sig3(without)} ms)")
            body.append([ps, dt] + cells)
    # the backward pair whose dropout run came out fastest against its plain run: noise, not a gain
    low = min((k for k in ratios if k[0] == "bwd"), key=ratios.get)
    head = f"**Dropout (p = {p:g}), time with / without** (target: <= 1.10 for the forward at d = 128):"
    tail = (f"Single backward runs on this host vary by several percent (the {low[1]} N = {low[2]}"
            f"{' causal' if low[3] else ''} pair came out {ratios[low]:.2f}).")
    header = ["pass", "dtype", "N = 2048", "N = 4096", "N = 2048 causal", "N = 4096 causal"]
    return head + "\n\n" + table(header, body) + "\n\n" + tail


@block("cpu-bias-zen4", f"{BIAS_DROPOUT}/bias.csv")
def cpu_bias_zen4():
    times = bench_times(f"{BIAS_DROPOUT}/bias.csv")
    (n,) = {k[2] for k in times}
    body = []
    for ps in ("fwd", "bwd"):
        for causal in (False, True):
            for dt in ("f32", "bf16"):
                base = times[(ps, dt, n, causal, "none", False, 0.0)]
                keys = [(ps, dt, n, causal, b, g, 0.0) for g in (False, True) for b in ("keys", "rows", "full")]
                cells = [f"{times[k] / base:.2f}" if k in times else "" for k in keys]  # no dbias in the forward
                body.append([ps + (" causal" if causal else ""), dt] + cells)
    # the bias tensors' sizes follow from the problem: Hq x Nk (keys), Nq x Nk (rows), Nq x Hq x Nk (full)
    (hq,) = {int(r["heads_q"]) for r in load_csv(f"{BIAS_DROPOUT}/bias.csv")}
    head = (f"**Bias, time with / without** (N = {n}; `keys` = `[1, 1, Hq, Nk]` ({mib(hq * n * 4)} in f32), `rows` =\n"
            f"`[1, Nq, 1, Nk]` ({mib(n * n * 4)}), `full` = `[1, Nq, Hq, Nk]` ({mib(n * hq * n * 4)} f32, "
            f"{mib(n * hq * n * 2)} bf16), in the\nproblem's dtype; `+ dbias`: the backward also computes the bias "
            f"gradient):")
    return head + "\n\n" + table(["pass", "dtype", "keys", "rows", "full", "keys + dbias", "rows + dbias",
                                   "full + dbias"], body)


def mib(nbytes):
    """A size in whole KiB or MiB."""
    return f"{nbytes // 2**20} MiB" if nbytes >= 2**20 else f"{nbytes // 2**10} KiB"


# ---- block-sparse masks (flashattn-block-sparse-bench) -----------------------------------------------

SPARSE_DTYPES = ("f32", "bf16")
# the columns of a result row ("fwd ms" etc. in the file's header line)
SPARSE_COLUMNS = ("pattern", "target", "rho", "fwd", "bwd", "fwd/dense", "bwd/dense", "fwd/rho", "bwd/rho")
# the patterns' names in the tables: a pattern's first row says what it is (from the benchmark's source,
# benchmarks/block_sparse_bench.cpp), its later rows only name it
SPARSE_LABELS = {"random": ("random", "random"), "banded": ("banded", "banded"),
                 "document": ("document (causal, docs of 256-768)", "document"),
                 "global": ("global (128 tokens) + band", "global + band")}


def sparse_file(dtype):
    return f"{BLOCK_SPARSE}/{dtype}-n4096-d128.txt"


def sparse_run(dtype):
    """One flashattn-block-sparse-bench output: {'peaks': [before, after], 'shape': {B, H, N, d},
    'dense': (fwd ms, bwd ms), 'rows': [{column: cell}]} (cells as the file writes them)."""
    text = read(sparse_file(dtype))
    dense = re.search(r"^dense: fwd ([\d.]+) ms, bwd ([\d.]+) ms$", text, re.M)
    rows = [dict(zip(SPARSE_COLUMNS, line.split())) for line in text.splitlines()
            if line.split()[:1] and line.split()[0] in SPARSE_LABELS]
    if not dense or any(len(r) != len(SPARSE_COLUMNS) for r in rows):
        raise ValueError(f"{sparse_file(dtype)}: not a flashattn-block-sparse-bench output")
    return {"peaks": [int(p) for p in re.findall(r"fp32 FMA peak (\d+) GFLOP/s \((?:before|after)\)", text)],
            "shape": {k: int(v) for k, v in re.findall(r"\b(B|H|N|d)=(\d+)", text)},
            "dense": (float(dense.group(1)), float(dense.group(2))), "rows": rows}


def sparse_noisy(rows):
    """{(row index, pass)} of the readings that rise more than 10 % above the same pattern's at the next
    lower density: (t / t_dense) / rho falls as the density grows (a call's fixed costs spread over more
    blocks), so such a rise is a noisy reading."""
    noisy, last = set(), {}
    for i, r in enumerate(rows):
        prev = last.get(r["pattern"])
        for p in ("fwd", "bwd"):
            if prev and float(r[f"{p}/rho"]) > 1.10 * float(prev[f"{p}/rho"]):
                noisy.add((i, p))
        last[r["pattern"]] = r
    return noisy


def sparse_note(rows, noisy):
    """The footnote of the starred readings: their time against the banded (for a banded reading: the
    random) pattern's at the same target density."""
    notes = []
    for i, p in sorted(noisy):
        r = rows[i]
        other = next(o for o in rows if o["target"] == r["target"]
                     and o["pattern"] == ("random" if r["pattern"] == "banded" else "banded"))
        notes.append(f"{r[p]} ms where the {other['pattern']} pattern of the same density took {other[p]} ms")
    if not notes:
        return ""
    return f"\n\n(* {'one noisy reading' if len(notes) == 1 else 'noisy readings'}: {'; '.join(notes)}.)"


def sparse_labels(rows):
    seen, out = set(), []
    for r in rows:
        out.append(SPARSE_LABELS[r["pattern"]][r["pattern"] in seen])
        seen.add(r["pattern"])
    return out


def sparse_peaks(run):
    before, after = run["peaks"]
    return f"fp32 FMA peak {before} GFLOP/s before, {after} after"


def sparse_ratio(rows, noisy, i, p):
    return rows[i][f"{p}/rho"] + ("*" if (i, p) in noisy else "")


@block("cpu-block-sparse-zen4-f32", sparse_file("f32"))
def cpu_block_sparse_zen4_f32():
    run = sparse_run("f32")
    rows, noisy, (fwd, bwd), s = run["rows"], sparse_noisy(run["rows"]), run["dense"], run["shape"]
    # % of peak as flashattn-bench counts it: 4 B H N^2 d flops for the dense non-causal forward, against
    # the run's highest peak reading
    pct = 4 * s["B"] * s["H"] * s["N"] ** 2 * s["d"] / (fwd * 1e-3) / (max(run["peaks"]) * 1e9) * 100
    body = [[label, r["rho"], r["fwd"], r["bwd"]] + [sparse_ratio(rows, noisy, i, p) for p in ("fwd", "bwd")]
            for i, (label, r) in enumerate(zip(sparse_labels(rows), rows))]
    head = f"f32 ({sparse_peaks(run)}; dense: forward {fwd:.0f} ms = {pct:.0f} % of peak, backward {bwd:.0f} ms):"
    header = ["pattern", "rho", "fwd ms", "bwd ms", "fwd / dense / rho", "bwd / dense / rho"]
    return head + "\n\n" + table(header, body) + sparse_note(rows, noisy)


@block("cpu-block-sparse-zen4-bf16", sparse_file("bf16"))
def cpu_block_sparse_zen4_bf16():
    run = sparse_run("bf16")
    rows, noisy, (fwd, bwd) = run["rows"], sparse_noisy(run["rows"]), run["dense"]
    body = []
    for pattern in dict.fromkeys(r["pattern"] for r in rows):  # one line per pattern, its densities in order
        idx = [i for i, r in enumerate(rows) if r["pattern"] == pattern]
        body.append([SPARSE_LABELS[pattern][1], " / ".join(rows[i]["rho"] for i in idx)]
                    + [" / ".join(sparse_ratio(rows, noisy, i, p) for i in idx) for p in ("fwd", "bwd")])
    head = f"bf16 (`AVX3_BF16`; {sparse_peaks(run)}; dense: forward {fwd:.0f} ms, backward {bwd:.0f} ms):"
    return (head + "\n\n" + table(["pattern", "rho", "fwd / dense / rho", "bwd / dense / rho"], body)
            + sparse_note(rows, noisy))


# ---- decode (flashattn-bench --decode) ---------------------------------------------------------------

DECODE_CSV, DECODE_TXT = f"{DECODE}/decode-quiet.csv", f"{DECODE}/decode-quiet.txt"


def read_bandwidth():
    """The line on the read bandwidth measured before and after the decode run."""
    text = read(DECODE_TXT)
    setup = re.search(r"^read bandwidth \((.*)\): ", text, re.M).group(1)
    before, after = re.search(r"^read bandwidth: ([\d.]+) GB/s before, ([\d.]+) after", text, re.M).groups()
    return f"Read bandwidth ({setup}): **{before} GB/s before, {after} after**; the table's % are against the first."


@block("cpu-decode-zen4", DECODE_CSV, DECODE_TXT)
def cpu_decode_zen4():
    runs = {(r["dtype"], int(r["batch"]), int(r["nk"]), r["layout"], r["impl"]): r for r in load_csv(DECODE_CSV)}
    # a case the tool skipped has no CSV row, only a line in its text output
    skipped = {(dt, int(b), int(nk), impl): f"skipped ({float(gib):g} GiB)" for dt, b, nk, impl, gib in re.findall(
        r"^(\w+)\s+B=(\d+)\s+Nk=(\d+)\s+(\w+) skipped: needs ([\d.]+) GiB", read(DECODE_TXT), re.M)}
    body = []
    for dt, b, nk in dict.fromkeys(k[:3] for k in runs):
        dec, paged = runs[(dt, b, nk, "contiguous", "cpu")], runs[(dt, b, nk, "paged-16", "cpu")]
        t = float(dec["min_ms"])

        def slower(impl):  # another implementation's time, and its ratio to the decode path's
            r = runs.get((dt, b, nk, "contiguous", impl))
            if r is None:
                return skipped[(dt, b, nk, impl)]
            return f"{float(r['min_ms']):.0f} ms ({float(r['min_ms']) / t:.1f}x)"

        gbps, pct, t_paged = float(dec["gbps"]), float(dec["percent_of_read_bw"]), float(paged["min_ms"])
        body.append([dt, b, nk, f"{gbps:.1f} GB/s ({pct:.1f} %), {t:.1f} ms",
                     f"{float(paged['gbps']):.1f} GB/s ({t_paged:.1f} ms)", f"{t_paged / t:.2f}",
                     slower("general"), slower("standard")])
    header = ["dtype", "B", "Nk", "decode contiguous", "paged 16", "paged / contiguous time", "general path",
              "standard"]
    return read_bandwidth() + "\n\n" + table(header, body)


# ---- ring attention (benchmarks/ring.sh) -------------------------------------------------------------

def ring_runs():
    """{(ranks, threads, dtype, causal, sharding, N): {ring fwd, ring bwd, cpu fwd, cpu bwd (s), peak}} from
    the run's `csv,` lines (the plain cpu:: times only in the 1-rank runs)."""
    cols = ("ranks", "threads", "N", "H", "d", "dtype", "causal", "sharding", "ring_fwd", "ring_bwd", "cpu_fwd",
            "cpu_bwd", "peak")
    out = {}
    for line in read(RING).splitlines():
        if line.startswith("csv,"):
            r = dict(zip(cols, line.split(",")[1:]))
            out[(int(r["ranks"]), int(r["threads"]), r["dtype"], r["causal"] == "1", r["sharding"], int(r["N"]))] = r
    return out


def ring_peaks(runs):
    spans = {cfg: span([float(r["peak"]) for k, r in runs.items() if k[:2] == cfg], "{:.0f}")
             for cfg in ((1, 2), (2, 1))}  # (ranks, threads)
    if len(set(spans.values())) == 1:
        return f"fp32 FMA peak measured in every run: {spans[(1, 2)]} GFLOP/s for both configurations."
    return (f"fp32 FMA peak measured in every run: {spans[(1, 2)]} GFLOP/s (1 rank x 2 threads), "
            f"{spans[(2, 1)]} GFLOP/s (2 ranks x 1 thread).")


@block("ring-zen4", RING)
def ring_zen4():
    runs, body = ring_runs(), []
    for dt, causal, sharding, n in [k[2:] for k in runs if k[:2] == (1, 2)]:
        one, two = runs[(1, 2, dt, causal, sharding, n)], runs[(2, 1, dt, causal, sharding, n)]
        row = [dt, "yes" if causal else "no", sharding, n]
        for p in ("fwd", "bwd"):
            cpu, ring1, ring2 = (float(x) * 1e3 for x in (one[f"cpu_{p}"], one[f"ring_{p}"], two[f"ring_{p}"]))
            row += [f"{cpu:.1f} ms", f"{ring1:.1f} ms", f"{ring2:.1f} ms", f"**{ring2 / cpu:.2f}**"]
        body.append(row)
    header = ["dtype", "causal", "sharding", "N", "cpu::forward 1x2", "ring fwd 1x2", "ring fwd 2x1", "**2x1 / cpu**",
              "cpu::backward 1x2", "ring bwd 1x2", "ring bwd 2x1", "**2x1 / cpu**"]
    return ring_peaks(runs) + "\n\n" + table(header, body)
