"""Evaluation: policies behind one interface (`policies.py`, with an exported model's `strat.json` in `sidecar.py`),
a policy's evaluation against scripted opponents or head to head (`evaluation.py`), exact and sampled exploitability
(`exploitability.py`), statistics and Elo (`stats.py`), and the written report (`report.py`) with its transcript
viewer (`viewer.py`)."""
