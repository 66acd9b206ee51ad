"""A collected rollout as the driver holds it between steps, and its JSON form: with overlap, a checkpoint carries
the rollout that was in flight, so that a resumed run trains on the very episodes an uninterrupted one would."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from strat.algorithm.records import BeliefTarget, Episode, ParsedResponse, Sections, Turn, TurnTargets
from strat.sync.fingerprint import WeightsTag


@dataclass(frozen=True)
class Rollout:
    """Step `step`'s episodes, the rollout's wall time, and the weights its agents held (one tag unless agents
    disagreed)."""

    step: int
    episodes: list[Episode]
    seconds: float
    weights: tuple[WeightsTag, ...]


def rollout_to_json(rollout: Rollout) -> dict[str, Any]:
    """Plain JSON data (tuples as lists); `rollout_from_json` gives the same rollout back."""
    return {
        "step": rollout.step,
        "seconds": rollout.seconds,
        "weights": [[tag.version, tag.fingerprint] for tag in rollout.weights],
        "episodes": [dataclasses.asdict(episode) for episode in rollout.episodes],
    }


def rollout_from_json(data: dict[str, Any]) -> Rollout:
    return Rollout(
        step=int(data["step"]),
        episodes=[_episode(item) for item in data["episodes"]],
        seconds=float(data["seconds"]),
        weights=tuple(WeightsTag(int(version), str(fingerprint)) for version, fingerprint in data["weights"]),
    )


def _episode(data: dict[str, Any]) -> Episode:
    return Episode(
        episode_id=data["episode_id"],
        group_id=data["group_id"],
        seed=int(data["seed"]),
        game=data["game"],
        agents=tuple(data["agents"]),
        ego_agents=tuple(data["ego_agents"]),
        turns=tuple(_turn(turn) for turn in data["turns"]),
        returns={agent: float(value) for agent, value in data["returns"].items()},
        private_info=dict(data["private_info"]),
        seats=dict(data.get("seats", {})),
        targets=tuple(_targets(item) for item in data.get("targets", ())),
    )


def _targets(data: dict[str, Any]) -> TurnTargets:
    next_move = data["next_move"]
    return TurnTargets(
        turn_index=int(data["turn_index"]),
        next_move=None if next_move is None else tuple((str(name), float(p)) for name, p in next_move),
        beliefs=tuple(BeliefTarget(item["agent"], tuple((str(v), float(p)) for v, p in item["values"]))
                      for item in data["beliefs"]),
    )


def _turn(data: dict[str, Any]) -> Turn:
    response = data["response"]
    parsed = None if response is None else ParsedResponse(
        depth=int(response["depth"]), sections=Sections(**response["sections"]),
        format_valid=bool(response["format_valid"]),
    )
    token_fields = ("prompt_token_ids", "response_token_ids", "behaviour_logprobs")
    nested = ("response", "section_spans", "allowed_token_ids", *token_fields)
    plain = {key: value for key, value in data.items() if key not in nested}
    spans = data.get("section_spans")  # absent from older rollouts
    return Turn(**plain, response=parsed, **{key: tuple(data[key]) for key in token_fields},
                section_spans=None if spans is None else tuple((str(n), int(a), int(b)) for n, a, b in spans),
                allowed_token_ids=tuple(tuple(int(t) for t in ids) for ids in data.get("allowed_token_ids", ())))
