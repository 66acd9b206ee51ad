"""Strat-Reasoner, the method itself: pure logic (no Ray, no vLLM, no I/O), tested without either.

One training step's method, in the order it runs:
- `reasoning.py`: the Past-Present-Future prompt at each depth, and the tolerant parser of a response
  into sections and a legal move (an unparsable or illegal move gets the format penalty and a fallback);
- `comparison.py`: the central CoT comparison, scoring each ego turn's reasoning against what the other
  agents really held, did and thought (prediction, belief and agreement accuracy);
- `advantage.py`: the hybrid group-relative advantage (outcome + lambda * process) per turn;
- `losses.py`: the clipped policy loss with the KL, DPH-RL and FiberPO options;
- `records.py`: the typed records passed between the stages (Turn, Episode, ScoredEpisode, TrainSample,
  TrainBatch).
"""
