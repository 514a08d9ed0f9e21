"""Reliability figures: the latest long verification (scripts/verify-long) — its steps from SUMMARY.md
and, once its cross-check has run, that step's verdicts from crosscheck.md."""
import os
import re

from . import block, md_tables, path, read, table

# The run docs/reliability.md quotes: scripts/verify-long at one commit, its steps possibly run in
# parts (CONTINUE), each part appending its rows to SUMMARY.md.
VERIFY_LONG = "benchmarks/results/2026-11-30/verify-long-6650903"
STEPS = ("mutate", "crosscheck", "fuzz")


def run_header(summary):
    """(commit, start date, cpu with family, cores) from a SUMMARY.md's first paragraph."""
    m = re.search(r"Commit ([0-9a-f]{40}), started (\S+) \S+ UTC, on (.+?) \(family (\d+)\),\s*(\d+) cores", summary)
    if not m:
        raise ValueError("SUMMARY.md: no 'Commit …, started …, on … (family …), … cores' line")
    return m.group(1)[:7], m.group(2), f"{m.group(3)} (family {m.group(4)})", m.group(5)


def step_rows(summary_rel):
    """Per step of the summary's table: step -> (part it ran in, result, seconds)."""
    rows = {}
    for head, body in md_tables(summary_rel):
        if head[:1] != ["step"]:
            continue
        for step, _params, result, seconds in body:
            m = re.match(r"(\w+)(?: \(continued (\S+) \S+ UTC at (\w+), on (.+)\))?$", step)
            if not m or m.group(1) not in STEPS:
                raise ValueError(f"{summary_rel}: step cell '{step}'")
            part = f"continued {m.group(2)} on {m.group(4)}" if m.group(2) else "first"
            rows[m.group(1)] = (part, result, int(seconds.rstrip(" s")))
    return rows


@block("verify-long", f"{VERIFY_LONG}/SUMMARY.md")
def verify_long():
    summary_rel = f"{VERIFY_LONG}/SUMMARY.md"
    commit, date, cpu, cores = run_header(read(summary_rel))
    rows = step_rows(summary_rel)
    out = [f"`scripts/verify-long` at {commit}, started {date} on {cpu}, {cores} cores "
           f"([`{VERIFY_LONG.split('/', 1)[1]}/`](../{VERIFY_LONG}/)):", "",
           "| step | result | time | part |", "|---|---|---|---|"]
    for step in STEPS:
        if step in rows:
            part, result, seconds = rows[step]
            out.append(f"| {step} | {result} | {seconds:,} s | {part} |")
        else:
            out.append(f"| {step} | not run yet | — | — |")
    cross = f"{VERIFY_LONG}/crosscheck.md"
    if "crosscheck" in rows and os.path.exists(path(cross)):
        out += ["", "The cross-check's verdicts (worst error/bound per output; `crosscheck.md`):", ""]
        (head, body), = [t for t in md_tables(cross) if t[0][:1] == ["implementation"]]
        out.append(table(head, body))
    return "\n".join(out)
