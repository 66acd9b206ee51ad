"""transcripts.html of a real evaluation (the tiny model on the hf engine) opened in headless Chromium: every turn's
sections and scores are in the rendered page, model text with markup is shown as text and never runs, and the page
is not blank. CI (`STRAT_CI=1`) installs Chromium and fails without it; elsewhere the tests skip, saying why."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from strat.algorithm.reasoning import DEPTH_SECTIONS
from strat.algorithm.records import ScoredEpisode
from strat.engines.base import Generation, SamplingParams
from strat.eval import viewer
from strat.eval.evaluation import evaluate_policy
from strat.eval.policies import LLMPolicy, load_policy
from strat.eval.report import TRANSCRIPTS, write_report

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
BROWSER_TIMEOUT_S = 120
# Each payload would leave a mark if the browser ran it: a new title, an attribute on <body>, an element.
SCRIPT = "<script>document.title='pwned'</script>"
IMAGE = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
BREAKOUT = "</pre></dd><script>document.body.appendChild(document.createElement('blink'))</script>"
HOSTILE_PAST = f"They bet. {SCRIPT}\nbelief: King"
HOSTILE_PLAN = f"Call {IMAGE} & wait"


def chromium() -> str:
    """The Chromium binary; a failure under CI (STRAT_CI=1), a visible skip elsewhere."""
    found = next((path for path in map(shutil.which, BROWSERS) if path), None)
    if found is None:
        why = f"no headless browser ({', '.join(BROWSERS)}) on PATH; `apt-get install chromium` provides one"
        if os.environ.get("STRAT_CI") == "1":
            pytest.fail(f"{why}, and CI (STRAT_CI=1) must run this test")
        pytest.skip(why)
    return found


def _browse(page: Path, profile: Path, *mode: str) -> str:
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
        f"--user-data-dir={profile}", "--virtual-time-budget=3000", *mode, page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def rendered_dom(page: Path, tmp_path: Path) -> str:
    """The page's DOM after Chromium loaded it and ran whatever it would run."""
    return _browse(page, tmp_path / "profile-dom", "--dump-dom")


def screenshot(page: Path, tmp_path: Path) -> Path:
    out = tmp_path / "page.png"
    _browse(page, tmp_path / "profile-shot", "--window-size=1100,1600", f"--screenshot={out}")
    return out


def pixel_variance(png: Path) -> float:
    """Variance of the greyscale pixels: 0 for a page of one colour."""
    return ImageStat.Stat(Image.open(png).convert("L")).var[0]


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def find_all(self, tag: str, css_class: str | None = None) -> list[Node]:
        found = []
        for child in self.children:
            if isinstance(child, Node):
                if child.tag == tag and (css_class is None or css_class in child.attrs.get("class", "").split()):
                    found.append(child)
                found += child.find_all(tag, css_class)
        return found


VOID_TAGS = frozenset({"meta", "img", "br", "hr", "link", "input"})


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID_TAGS:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(dom: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(dom)
    builder.close()
    return builder.root


def ran_anything(root: Node, title: str) -> list[str]:
    """What the payloads would have done, found in the rendered DOM (empty when nothing ran or was injected)."""
    marks = []
    (page_title,) = root.find_all("title")
    if page_title.text() != title:
        marks.append(f"title changed to {page_title.text()!r}")
    (body,) = root.find_all("body")
    if "data-pwned" in body.attrs:
        marks.append("an onerror handler set data-pwned")
    for tag in ("script", "img", "blink"):
        if root.find_all(tag):
            marks.append(f"a <{tag}> element is in the page")
    return marks


def _hostile(generate):
    """The real engine's generations with their text replaced by a well-formed depth-2 response that carries
    markup: the moves stay legal (Kuhn poker's `pass` always is), so the sections are parsed and shown."""

    def run(prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        text = (f"<past>{HOSTILE_PAST}</past>\n<their_view>They read {BREAKOUT} weakness</their_view>\n"
                f"<plan>{HOSTILE_PLAN}</plan>\n<predict>bet</predict>\n<action>pass</action>")
        return [dataclasses.replace(g, text=text) for g in generate(prompts, params)]

    return run


@pytest.fixture(scope="module")
def evaluated(tiny_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[ScoredEpisode], str]:
    """A short evaluation of the tiny checkpoint on the hf engine against random, its model text made hostile:
    transcripts.html, the games it shows and its title."""
    chromium()
    out = tmp_path_factory.mktemp("eval-browser")
    policy = load_policy(str(tiny_run_dir), None, backend="hf")
    assert isinstance(policy, LLMPolicy)
    try:
        policy.generate = _hostile(policy.generate)
        report, shown = evaluate_policy(policy, ["random"], num_games=2, seed=0, samples_per_infoset=0,
                                        bootstrap=0, transcripts=2)
        write_report(report, out, shown)
    finally:
        policy.close()
    return out / TRANSCRIPTS, shown, f"kuhn_poker: {policy.name}"


def _expected_cells(item: ScoredEpisode, turn_index: int) -> list[str] | None:
    score = item.score_of(turn_index)
    if score is None:
        return None
    cells = ["—" if v is None else f"{v:.3f}" for v in (score.predict, score.belief, score.agreement)]
    return [*cells, f"{score.score:.3f}" if score.comparable else "nothing to compare"]


def _check_turns(root: Node, shown: Sequence[ScoredEpisode]) -> int:
    """Every turn of every shown game, in order, with its head, sections and scores; the number of scored turns."""
    turns = [(item, turn) for item in shown for turn in item.episode.turns]
    rendered = root.find_all("div", "turn")
    assert len(rendered) == len(turns)
    scored = 0
    for (item, turn), node in zip(turns, rendered, strict=True):
        (head,) = node.find_all("div", "head")
        assert f"turn {turn.turn_index} · {turn.agent} plays {turn.action_name}" in head.text()
        if turn.response is not None:
            names = [dt.text() for dt in node.find_all("dt")]
            assert names == list(DEPTH_SECTIONS[turn.response.depth])
            shown_values = [dd.text() for dd in node.find_all("dd")]
            assert shown_values == [getattr(turn.response.sections, name) for name in names]
        cells = _expected_cells(item, turn.turn_index)
        tables = node.find_all("table", "scores")
        if cells is None:
            assert not tables
        else:
            scored += 1
            assert [td.text() for td in tables[0].find_all("td")] == cells
    return scored


def test_every_turn_is_rendered_and_model_markup_stays_text(evaluated, tmp_path: Path) -> None:
    page, shown, title = evaluated
    root = parse(rendered_dom(page, tmp_path))
    assert ran_anything(root, title) == []
    assert len(shown) == 2 and all(item.scores for item in shown)
    assert _check_turns(root, shown) == sum(len(item.scores) for item in shown) > 0
    texts = [pre.text() for pre in root.find_all("pre")]
    for payload in (HOSTILE_PAST, HOSTILE_PLAN, f"They read {BREAKOUT} weakness"):
        assert payload in texts, f"{payload!r} is not shown as text"


def test_the_page_is_not_blank(evaluated, tmp_path: Path) -> None:
    page, _, _ = evaluated
    png = screenshot(page, tmp_path)
    assert Image.open(png).size == (1100, 1600)
    assert pixel_variance(png) > 50.0


def test_the_checks_catch_an_unescaped_page_and_a_blank_one(
    evaluated, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same games rendered without escaping: the browser runs the payloads and the checks above see it; an
    empty page's screenshot has no variance."""
    _, shown, title = evaluated
    monkeypatch.setattr(viewer, "escape", lambda text, quote=True: text)
    unsafe = viewer.write_html(shown, tmp_path / "unsafe.html", title=title)
    marks = ran_anything(parse(rendered_dom(unsafe, tmp_path)), title)
    assert "title changed to 'pwned'" in marks and "an onerror handler set data-pwned" in marks
    assert "a <blink> element is in the page" in marks
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    assert pixel_variance(screenshot(blank, tmp_path)) == 0.0
