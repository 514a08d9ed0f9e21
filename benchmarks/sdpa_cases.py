"""The case grid and FLOP count shared by the PyTorch SDPA timing scripts (sdpa_torch.py on a GPU,
torch_cpu_sdpa.py on the CPU), the same as flashattn-bench's (docs/benchmarks.md), so their JSON
records line up with its rows."""
import itertools


def ints(text):
    return [int(x) for x in text.split(",")]


def flops(p):
    """docs/benchmarks.md: fwd = 4*B*Hq*Nq*Nk*d, halved for causal (Nq = Nk here); bwd = 2.5 x fwd."""
    fwd = 4.0 * p["batch"] * p["heads_q"] * p["seqlen_q"] * p["seqlen_k"] * p["head_dim"]
    if p["causal"]:
        fwd /= 2
    return fwd if p["pass"] == "fwd" else 2.5 * fwd


def cases(a, heads_k=""):
    """Yields (backend, case) over the cartesian product of the comma lists in the parsed arguments
    a.backend, a.passes, a.dtype, a.batch, a.heads, a.seqlen, a.head_dim, a.causal and, per query
    head count, each of `heads_k` (a comma list; empty: Hk = Hq). Nq = Nk = seqlen."""
    for backend, ps, dtype, b, h, n, d, c in itertools.product(
            a.backend.split(","), a.passes.split(","), a.dtype.split(","), ints(a.batch), ints(a.heads),
            ints(a.seqlen), ints(a.head_dim), ints(a.causal)):
        for hk in ints(heads_k) if heads_k else [h]:
            yield backend, {"pass": ps, "dtype": dtype, "batch": b, "heads_q": h, "heads_k": hk, "seqlen_q": n,
                            "seqlen_k": n, "head_dim": d, "causal": bool(c)}
