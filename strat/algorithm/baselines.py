"""What a turn's outcome is compared with: the group's normalisation (GRPO) and the history baseline
(`algorithm.baseline: history`), pure tensor functions over one statistics group."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from strat.algorithm.records import Episode, Turn


def normalise(values: torch.Tensor, eps: float, scale: bool = True) -> torch.Tensor:
    """(x - mean) / (population std + eps), or with `scale` False x - mean alone; exactly zero when all values are
    equal or there is only one."""
    if values.numel() == 0 or bool(torch.all(values == values[0])):
        # Rounding in the mean would otherwise turn equal values into tiny, eps-amplified advantages.
        return torch.zeros_like(values)
    centred = values - values.mean()
    return centred / (values.std(correction=0) + eps) if scale else centred


HistoryKey = Hashable
"""A turn's history within its group (`history_key`); tests may use any hashable."""


def history_outcome_terms(
    returns: torch.Tensor, turn_episode: torch.Tensor, histories: Sequence[HistoryKey | None], eps: float,
    scale: bool = True,
) -> torch.Tensor:
    """The outcome terms [N] of one statistics group's ego turns under `baseline: history`.

    `returns` [G] per member (or per turn, with `penalty_scope: turn`), `turn_episode` [N] the index into `returns`
    of each turn, `histories` [N] each turn's history key (None where unknown). A turn's term is its return minus the
    mean return of the group's turns with the same history (itself included), over the population std of `returns`
    plus `eps`: the group's scale, so that the first move, which every member makes at the same history, gets its
    group-normalised return exactly. A turn alone at its history, or whose history is unknown, has no other move
    to be compared with and keeps its group-normalised return (a zero there would stop learning at the rare
    histories, where a game's last moves are made); all terms are 0 where the returns have no spread. With `scale`
    False nothing is divided by the spread (`algorithm.outcome_scale: none`).
    """
    turn_returns = returns[turn_episode]
    terms = normalise(returns, eps, scale)[turn_episode]
    if returns.numel() == 0 or bool(torch.all(returns == returns[0])):
        return terms
    spread = returns.std(correction=0) + eps if scale else 1.0
    rows: dict[HistoryKey, list[int]] = {}
    for row, history in enumerate(histories):
        if history is not None:
            rows.setdefault(history, []).append(row)
    for members in rows.values():
        if len(members) < 2:
            continue
        index = torch.tensor(members, dtype=torch.long)
        values = turn_returns[index]
        centred = values - values.mean() if not bool(torch.all(values == values[0])) else torch.zeros_like(values)
        terms[index] = centred / spread
    return terms


def others_private_info(episode: Episode, agent: str) -> tuple[tuple[str, str], ...]:
    """The other agents' private information in `episode`, (agent, value) sorted: with the acting agent's information
    state, the position the central comparator sees (the state baseline) and, within a group, the game's full state."""
    return tuple(sorted((who, what) for who, what in episode.private_info.items() if who != agent))


def history_key(episode: Episode, turn: Turn) -> HistoryKey | None:
    """A turn's history key for `baseline: history`: its seat, information state and the other agents' private
    information (within a group, whose members share the deal, the game's full state when the turn is played); None
    where the information state is unknown."""
    if not turn.info_state:
        return None
    return (turn.agent, turn.info_state, others_private_info(episode, turn.agent))
