"""Readable game transcripts with each turn's reasoning and the comparator's scores."""

from __future__ import annotations

from strat.algorithm.records import ScoredEpisode


def render_transcripts(scored: list[ScoredEpisode], step: int) -> str:
    """Markdown for a few episodes of a step: every turn's sections, action and scores."""
    lines = [f"# Sampled games at step {step}", ""]
    for item in scored:
        episode = item.episode
        lines.append(f"## {episode.episode_id} (seed {episode.seed}, learning seats: {', '.join(episode.ego_agents)})")
        lines.append("Private information: " + "; ".join(f"{a}: {v}" for a, v in episode.private_info.items()))
        if episode.seats:
            lines.append("Players: " + "; ".join(f"{a}: {seat}" for a, seat in episode.seats.items()))
        lines.append("")
        for turn in episode.turns:
            status = "valid" if turn.valid else "INVALID, fallback played"
            lines.append(f"### turn {turn.turn_index}: {turn.agent} plays **{turn.action_name}** ({status})")
            if turn.response is not None:
                for name, value in vars(turn.response.sections).items():
                    if value is not None:
                        lines.append(f"- {name}: {value}")
                if not turn.response.format_valid:
                    lines.append(f"- raw response: {turn.response_text!r}")
            score = item.score_of(turn.turn_index)
            if score is not None:
                lines.append(
                    f"- scores: predict={score.predict} belief={score.belief} agreement={score.agreement} "
                    f"combined={score.score:.3f}{'' if score.comparable else ' (nothing to compare)'}"
                )
            lines.append("")
        lines.append("Returns: " + ", ".join(f"{a}: {v:+g}" for a, v in episode.returns.items()))
        lines.append("")
    return "\n".join(lines)
