"""Models and their files: the tiny offline model (`tiny.py`), the supervised warm start (`warmstart.py`),
and checkpoints (`checkpoint.py`)."""
