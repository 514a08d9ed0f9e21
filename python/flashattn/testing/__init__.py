"""flashattn.testing: test any attention implementation against flashattn's fp64 oracle.

- reference.forward / reference.backward: the fp64 oracle (C++ flashattn::reference) on host arrays;
- assert_close / judge: the tolerance rule of docs/semantics.md ("How the tests judge a backend"),
  the C++ implementation (props::judge_forward / judge_backward) itself;
- strategies (attention_problems, Supports, make_problem): Hypothesis strategies of attention
  problems; check_attention: the whole cross-check on a user's function, with a shrunk failing case.

Needs hypothesis for the strategies and check_attention (pip install hypothesis).
"""
from ._check import AttentionCheckFailed, check_attention
from ._judge import AttentionMismatch, assert_close, judge, reference, to_host
from .strategies import Problem, Supports, attention_problem_params, attention_problems, make_problem, visible_counts

__all__ = [
    "reference", "assert_close", "judge", "AttentionMismatch", "check_attention", "AttentionCheckFailed",
    "Supports", "Problem", "attention_problems", "attention_problem_params", "make_problem", "visible_counts",
    "to_host",
]
