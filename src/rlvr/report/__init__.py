"""``rlvr report``: a run's (or several runs') curves, before/after tables and sampled completions
as one self-contained HTML file."""

from rlvr.report.load import Run, load_run, load_runs
from rlvr.report.page import render, write_report

__all__ = ["Run", "load_run", "load_runs", "render", "write_report"]
