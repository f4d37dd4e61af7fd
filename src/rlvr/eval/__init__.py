"""Evaluation: sampling metrics (pass@k, maj@k, mean@k), test-time scaling (best-of-N, weighted
votes, self-verification: :mod:`rlvr.eval.scaling`, :mod:`rlvr.eval.self_verify`) and benchmark runs."""

from rlvr.eval.metrics import aggregate_pass_at_k, maj_at_k, mean_at_k, pass_at_k

__all__ = ["aggregate_pass_at_k", "maj_at_k", "mean_at_k", "pass_at_k"]
