"""One training run: the driver (`trainer.py`), the policy update (`learner.py`), and the Ray actors that host them
and the game loop of `strat.play` (`*_actor.py`); the supervised warm start (`warmstart.py`) and the context check
a run starts with (`context_check.py`); the run's transcripts, collected rollouts and resume rules."""
