"""The transcript viewer: one offline page, everything escaped."""

from __future__ import annotations

import re

from strat.algorithm.records import Episode, ParsedResponse, ScoredEpisode, Sections, Turn, TurnScore
from strat.eval.viewer import render_html, write_html

HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>"


def _scored() -> ScoredEpisode:
    sections = Sections(
        past=f"They bet. {HOSTILE}\nbelief: King", their_view="They see <b>strength</b> & fear",
        plan="Call \"now\"", predict="pass", action="bet",
    )
    llm = Turn(
        episode_id="e<1>", agent="player_0", turn_index=0, action=1, action_name="bet",
        response=ParsedResponse(2, sections, True), prompt_text="You hold the <Jack>.", response_text="...",
    )
    invalid = Turn(
        episode_id="e<1>", agent="player_0", turn_index=2, action=0, action_name="pass", valid=False,
        fallback_used=True, penalty=-3.0, response=ParsedResponse(2, Sections(action=HOSTILE), False),
        response_text=f"garbage {HOSTILE}",
    )
    scripted = Turn(episode_id="e<1>", agent="player_1", turn_index=1, action=1, action_name="bet")
    episode = Episode(
        episode_id="e<1>", group_id="model <a> vs random", seed=7, game="kuhn_poker",
        agents=("player_0", "player_1"), ego_agents=("player_0",), turns=(llm, scripted, invalid),
        returns={"player_0": -2.0, "player_1": 2.0}, private_info={"player_0": "Jack", "player_1": "King"},
    )
    score = TurnScore("player_0", 0, predict=0.0, belief=1.0, agreement=0.25, score=0.4167, comparable=True)
    return ScoredEpisode(episode, (score,))


def test_model_text_is_escaped() -> None:
    page = render_html([_scored()], title="t <i>")
    assert "<script" not in page and "<img" not in page and "<b>strength" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "&lt;b&gt;strength&lt;/b&gt; &amp; fear" in page
    assert "You hold the &lt;Jack&gt;." in page
    assert "model &lt;a&gt; vs random" in page and "t &lt;i&gt;" in page


def test_page_shows_sections_actions_and_scores(tmp_path) -> None:
    page = write_html([_scored()], tmp_path / "t.html").read_text()
    for name in ("past", "their_view", "plan", "predict", "action"):
        assert f"<dt>{name}</dt>" in page
    assert "plays <code>bet</code>" in page and "invalid: fallback played" in page
    assert "0.417" in page and "1.000" in page and "raw response" in page
    assert "Returns:" in page and "player_0: -2" in page


def test_page_is_self_contained() -> None:
    page = render_html([_scored()])
    tags = re.findall(r"<[^>]*>", page)
    assert not [tag for tag in tags if re.search(r"\b(src|href)\s*=|^<(link|script|img|iframe)", tag)]
    assert "@import" not in page and "url(" not in page
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
