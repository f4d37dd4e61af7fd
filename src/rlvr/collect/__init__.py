"""The collector side of training: sampling and scoring groups of trajectories (no optimizer)."""

from rlvr.collect.collector import Collection, Collector

__all__ = ["Collection", "Collector"]
