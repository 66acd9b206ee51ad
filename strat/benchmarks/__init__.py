"""`strat bench`: Strat's efficiency against plain baselines on the same prompts and token counts.

`run_bench` (figures.py) measures; `BenchReport` (report.py) holds the figures, renders the table
and the JSON. The plain single-process loops it divides by live in baselines.py."""

from strat.benchmarks.figures import FIGURES, FULL, QUICK, BenchSizes, run_bench
from strat.benchmarks.results import BenchReport, Figure, Target, padding_fraction

__all__ = ["FIGURES", "FULL", "QUICK", "BenchReport", "BenchSizes", "Figure", "Target", "padding_fraction", "run_bench"]
