"""How the learner's weights reach the inference engines: the choice of path and the Ray calls (`weights.py`),
and the torch.distributed group that broadcasts them in collective mode (`process_group.py`)."""
