"""Models and their files: the tiny offline model (`tiny.py`), Hub names (`hub.py`), the learner's model (`build.py`)
and its weights (`weight_io.py`, `safetensors_io.py`), and checkpoints (`checkpoint.py`, `manifest.py`). They take
plain settings, never the config (which sits above them and takes the tiny model's sizes from here)."""
