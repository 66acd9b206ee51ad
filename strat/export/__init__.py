"""`strat export`: a run's checkpoint as a Hugging Face model directory (`export.py`) with its model card
(`card.py`)."""
