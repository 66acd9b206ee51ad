"""Small builders of records for the algorithm tests."""

from __future__ import annotations

from strat.algorithm.records import Episode, ParsedResponse, ScoredEpisode, Sections, Turn, TurnScore


def turn(
    agent: str,
    index: int,
    action_name: str = "bet",
    sections: Sections | None = None,
    depth: int = 2,
    penalty: float | None = None,
    episode_id: str = "e",
) -> Turn:
    """A turn with a few tokens; `sections` makes it an LLM turn with a parsed response."""
    response = ParsedResponse(depth, sections, True) if sections is not None else None
    return Turn(
        episode_id=episode_id,
        agent=agent,
        turn_index=index,
        action=0,
        action_name=action_name,
        valid=penalty is None,
        fallback_used=penalty is not None,
        penalty=penalty,
        response=response,
        prompt_token_ids=(1, 2),
        response_token_ids=(3, 4, 5),
        behaviour_logprobs=(-0.1, -0.2, -0.3),
    )


def episode(
    episode_id: str,
    group_id: str,
    turns: list[Turn],
    returns: dict[str, float],
    ego: tuple[str, ...] = ("player_0",),
    game: str = "kuhn_poker",
    private_info: dict[str, str] | None = None,
) -> Episode:
    """An episode of two players from its turns."""
    return Episode(
        episode_id=episode_id,
        group_id=group_id,
        seed=0,
        game=game,
        agents=("player_0", "player_1"),
        ego_agents=ego,
        turns=tuple(turns),
        returns=returns,
        private_info=private_info or {},
    )


def scored(ep: Episode, scores: dict[int, float | None]) -> ScoredEpisode:
    """Attach combined scores by turn index; None marks a turn with nothing to compare."""
    by_index = {t.turn_index: t for t in ep.turns}
    return ScoredEpisode(
        ep,
        tuple(
            TurnScore(by_index[i].agent, i, None, None, None, 0.0 if s is None else s, s is not None)
            for i, s in scores.items()
        ),
    )


def kuhn_self_play(depth: int = 2, episode_id: str = "k") -> Episode:
    """Two LLM players: player 0 bets expecting to look strong, player 1 reads strength and calls."""
    first = Sections(
        past="No moves yet.\nbelief: Queen", their_view="a bet shows strength", plan="bet", predict="pass", action="bet"
    )
    second = Sections(
        past="player 0 bet shows strength\nbelief: King",
        their_view="calling",
        plan="call",
        predict="none",
        action="bet",
    )
    if depth == 1:
        first = Sections(past=first.past, plan="bet", predict="pass", action="bet")
        second = Sections(past=second.past, plan="call", predict="none", action="bet")
    return episode(
        episode_id,
        "g",
        [turn("player_0", 0, "bet", first, depth), turn("player_1", 1, "bet", second, depth)],
        {"player_0": 2.0, "player_1": -2.0},
        ego=("player_0", "player_1"),
        private_info={"player_0": "King", "player_1": "Queen"},
    )
