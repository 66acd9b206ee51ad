"""Running on a cluster: where each actor goes (`placement.py`) and Ray Jobs (`jobs.py`)."""
