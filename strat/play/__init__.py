"""Playing games with a policy, shared by training and evaluation: the one batched game loop (`rollout.py`:
`RolloutRunner` and `play_games`; no Ray) and the settings it and its engines are built with from the config
(`settings.py`)."""
