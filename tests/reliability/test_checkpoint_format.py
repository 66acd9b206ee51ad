"""What a checkpoint holds for an exact resume with overlap: its format, and the rollout that was in flight, read back
as it was; and the fingerprint that says which weights a rollout ran on."""

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file

from strat.algorithm.records import Episode, ParsedResponse, Sections, Turn
from strat.engines.hf import HFEngine
from strat.model import checkpoint
from strat.sync.fingerprint import WeightsTag, fingerprint
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.rollout_record import Rollout, rollout_from_json, rollout_to_json


def _episode(index: int) -> Episode:
    reasoned = Turn(
        episode_id=f"e{index}", agent="player_0", turn_index=0, action=1, action_name="bet", misstated=True,
        response=ParsedResponse(2, Sections(past="nothing yet", plan="bet", predict="call", action="bet"), True),
        prompt_text="You hold the King.", response_text="<action>bet</action>", prompt_token_ids=(5, 6, 7),
        response_token_ids=(8, 9), behaviour_logprobs=(-0.125, -math.inf),
        allowed_token_ids=((), (9, 12)),  # a constrained move (reasoning.constrain_action) on its second token
    )
    scripted = Turn(episode_id=f"e{index}", agent="player_1", turn_index=1, action=0, action_name="pass", valid=False,
                    fallback_used=True, penalty=-3.0)
    return Episode(f"e{index}", "g0", 41, "kuhn_poker", ("player_0", "player_1"), ("player_0",), (reasoned, scripted),
                   {"player_0": 1.0, "player_1": -1.0}, {"player_0": "K", "player_1": "J"})


def test_a_checkpoint_stores_its_format_and_the_rollout_in_flight(tmp_path: Path, tiny_model_dir: Path) -> None:
    rollout = Rollout(step=4, episodes=[_episode(0), _episode(1)], seconds=1.5, weights=(WeightsTag(2, "0123abcd4567"),))
    learner = PolicyLearner(tiny_model_dir, LearnerSettings())
    saved = learner.save(tmp_path, 3, {"baseline": {}, checkpoint.NEXT_ROLLOUT: rollout_to_json(rollout)}, keep=1)
    state = json.loads((saved.path / "loop_state.json").read_text())
    assert state["format"] == checkpoint.FORMAT == 2
    assert checkpoint.NEXT_ROLLOUT not in state, "the episodes have a file of their own"
    loaded = checkpoint.load_loop_state(saved)
    assert rollout_from_json(loaded[checkpoint.NEXT_ROLLOUT]) == rollout
    checkpoint.check_format(saved)


def test_a_checkpoint_without_a_format_is_read_as_format_1(tmp_path: Path) -> None:
    old = tmp_path / "step_1"
    old.mkdir()
    (old / "loop_state.json").write_text(json.dumps({"step": 1, "baseline": {}}))
    checkpoint.check_format(checkpoint.Checkpoint(old, 1))
    assert checkpoint.NEXT_ROLLOUT not in checkpoint.load_loop_state(checkpoint.Checkpoint(old, 1))


def test_the_fingerprint_names_the_weights_an_engine_holds(tiny_model_dir: Path, other_model_dir: Path) -> None:
    engine = HFEngine(tiny_model_dir)
    ours = fingerprint(load_file(tiny_model_dir / "model.safetensors").items())
    theirs = fingerprint(load_file(other_model_dir / "model.safetensors").items())
    assert engine.weights_fingerprint() == ours != theirs
    engine.load_weights_dir(other_model_dir)
    assert engine.weights_fingerprint() == theirs
    # One weight moved is another fingerprint; a bfloat16 copy is other weights (rounded), unless already exact.
    state = load_file(other_model_dir / "model.safetensors")
    name = min(state)
    state[name] = state[name].clone()
    state[name].view(-1)[0] += 1.0
    assert fingerprint(state.items()) != theirs
    rounded = {key: value.to(torch.bfloat16) for key, value in state.items()}
    assert fingerprint(rounded.items()) != fingerprint(state.items())
    assert fingerprint(rounded.items()) == fingerprint({k: v.float() for k, v in rounded.items()}.items())
