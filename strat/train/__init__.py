"""One training run: the driver (`trainer.py`), the batched game loop (`rollout.py`), the policy update
(`learner.py`), and the Ray actors that host them (`*_actor.py`); with the run's metrics, episode ledger,
transcripts and fault injection."""
