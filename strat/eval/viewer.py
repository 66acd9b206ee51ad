"""A static HTML viewer of played games: each turn's observation, reasoning sections, action and the
comparator's scores. One self-contained file (inline CSS, no scripts, no external assets) that opens
offline; every piece of game or model text is HTML-escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from strat.algorithm.reasoning import DEPTH_SECTIONS
from strat.algorithm.records import Episode, ScoredEpisode, Turn, TurnScore

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin: 0 0 .3em; }
.game { border: 1px solid #ccc; border-radius: 6px; padding: 1em; margin: 1.5em 0; }
.meta { color: #555; margin: .2em 0; }
.turn { border-left: 4px solid #bbb; padding: .4em .8em; margin: .8em 0; background: #fafafa; }
.turn.ego { border-color: #2b6cb0; background: #f3f8fd; }
.turn.invalid { border-color: #c53030; background: #fdf3f3; }
.head { font-weight: 600; }
.badge { font-size: .8em; padding: 0 .4em; border-radius: 3px; background: #e2e8f0; margin-left: .4em; }
.badge.bad { background: #fed7d7; color: #9b2c2c; }
pre { white-space: pre-wrap; word-break: break-word; margin: .2em 0; font: 13px/1.4 ui-monospace, monospace; }
dl { display: grid; grid-template-columns: 8em 1fr; gap: .2em .8em; margin: .4em 0; }
dt { font-weight: 600; color: #444; } dd { margin: 0; }
.missing { color: #999; font-style: italic; }
table.scores { border-collapse: collapse; margin-top: .3em; font-size: .9em; }
table.scores td, table.scores th { border: 1px solid #ddd; padding: .1em .5em; }
"""


def render_html(scored: Sequence[ScoredEpisode], title: str = "Sampled games") -> str:
    """The viewer page for `scored` games (scores may be empty: games without scored reasoning)."""
    body = [f"<h1>{escape(title)}</h1>", f"<p class=\"meta\">{len(scored)} games. Blue turns belong to the evaluated "
            "seat; red ones gave no legal action and played the fallback.</p>"]
    body += [_game(item) for item in scored]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def write_html(scored: Sequence[ScoredEpisode], path: Path, title: str = "Sampled games") -> Path:
    """Write the viewer page to `path`."""
    path.write_text(render_html(scored, title), encoding="utf-8")
    return path


def _game(item: ScoredEpisode) -> str:
    episode = item.episode
    private = "; ".join(f"{agent}: {info}" for agent, info in episode.private_info.items() if info) or "none"
    returns = ", ".join(f"{agent}: {value:+g}" for agent, value in episode.returns.items())
    parts = [
        "<section class=\"game\">",
        f"<h2>{escape(episode.episode_id)}</h2>",
        f"<p class=\"meta\">{escape(episode.group_id)} · {escape(episode.game)} · deal seed {episode.seed} · "
        f"evaluated seat: {escape(', '.join(episode.ego_agents))}</p>",
        f"<p class=\"meta\">Private information: {escape(private)}</p>",
    ]
    parts += [_turn(episode, turn, item.score_of(turn.turn_index)) for turn in episode.turns]
    parts += [f"<p class=\"meta\"><b>Returns:</b> {escape(returns)}</p>", "</section>"]
    return "\n".join(parts)


def _turn(episode: Episode, turn: Turn, score: TurnScore | None) -> str:
    classes = ["turn"]
    if turn.agent in episode.ego_agents:
        classes.append("ego")
    if not turn.valid:
        classes.append("invalid")
    if turn.valid:
        status = "<span class=\"badge\">valid</span>"
    else:
        status = "<span class=\"badge bad\">invalid: fallback played</span>"
    parts = [
        f"<div class=\"{' '.join(classes)}\">",
        f"<div class=\"head\">turn {turn.turn_index} · {escape(turn.agent)} plays "
        f"<code>{escape(turn.action_name)}</code>{status}</div>",
    ]
    if turn.prompt_text:
        parts.append(f"<details><summary>observation</summary><pre>{escape(turn.prompt_text)}</pre></details>")
    if turn.response is not None:
        sections = turn.response.sections
        parts.append("<dl>")
        for name in DEPTH_SECTIONS[turn.response.depth]:
            value = getattr(sections, name)
            shown = f"<pre>{escape(value)}</pre>" if value is not None else "<span class=\"missing\">missing</span>"
            parts.append(f"<dt>{escape(name)}</dt><dd>{shown}</dd>")
        parts.append("</dl>")
        if not turn.response.format_valid:
            parts.append(f"<details><summary>raw response</summary><pre>{escape(turn.response_text)}</pre></details>")
    if score is not None:
        cells = [("prediction", score.predict), ("belief", score.belief), ("agreement", score.agreement)]
        combined = f"{score.score:.3f}" if score.comparable else "nothing to compare"
        parts.append(
            "<table class=\"scores\"><tr>"
            + "".join(f"<th>{name}</th>" for name, _ in cells)
            + "<th>combined</th></tr><tr>"
            + "".join(f"<td>{'—' if value is None else f'{value:.3f}'}</td>" for _, value in cells)
            + f"<td>{combined}</td></tr></table>"
        )
    parts.append("</div>")
    return "\n".join(parts)
