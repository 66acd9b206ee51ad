"""Evaluation outputs: eval.json (machine-readable), eval.md (tables), PNG plots (a run's learning curves,
the head-to-head payoff matrix) and the transcript viewer, all in one directory."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strat.algorithm.records import ScoredEpisode
from strat.eval.exploitability import VALIDITY_FLOOR, ExploitabilityEstimate
from strat.eval.policies import PolicyInfo
from strat.eval.stats import CotResult, Estimate, HeadToHead, MatchResult
from strat.eval.viewer import write_html
from strat.metrics import jsonable, read_for_report

SCHEMA_VERSION = 1

LEARNING_CURVES = "learning_curves.png"
PAYOFF_MATRIX = "payoff_matrix.png"
TRANSCRIPTS = "transcripts.html"

_PANELS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Return", (("reward/mean", "training reward"), ("eval/return_vs_random", "eval return vs random"))),
    ("Exploitability", (("eval/exploitability", "exploitability"),)),
    ("CoT score", (("cot/score_mean", "combined"), ("cot/predict_acc", "prediction"), ("cot/belief_acc", "belief"))),
    ("Format validity", (("format/valid_rate", "valid rate"),)),
)
"""Learning-curve panels: title and (metrics.jsonl key, label) of each line."""
_BANDS = {"eval/return_vs_random": "eval/return_vs_random_ci", "eval/exploitability": "eval/exploitability_ci"}
"""Interval keys: a half-width, or [low, high]."""


@dataclass(frozen=True)
class JointProfile:
    """A joint profile of a two-player game, the policy named at each seat, and its exploitability as OpenSpiel defines
    it (NashConv / players), estimated from the policies' sampled moves."""

    seats: tuple[str, ...]
    estimate: ExploitabilityEstimate

    @property
    def nash_conv(self) -> tuple[float, float, float]:
        """NashConv (the players' best-response gains summed) and its 95% interval."""
        players = len(self.seats)
        e = self.estimate
        return players * e.value, players * e.ci_low, players * e.ci_high


@dataclass(frozen=True)
class EvalReport:
    """Everything one `strat eval` measured; eval.json is this record as JSON."""

    game: str
    game_options: dict[str, object]
    seed: int
    policies: tuple[PolicyInfo, ...]
    """The evaluated policy, or the head-to-head contenders in order."""
    matches: tuple[MatchResult, ...] = ()
    exploitability: ExploitabilityEstimate | None = None
    validity: Estimate | None = None
    """Share of the policy's LLM turns with a legal action; invalid output played the random legal fallback."""
    truncated: Estimate | None = None
    """Share of the policy's LLM turns whose response stopped at the token limit (`max_new_tokens`)."""
    cot: CotResult | None = None
    head_to_head: HeadToHead | None = None
    joint: tuple[JointProfile, ...] = ()
    """Head to head in Kuhn and Leduc poker: every joint profile's exploitability (policy i as player 0, j as 1)."""
    notes: tuple[str, ...] = ()


def plots_available() -> bool:
    """Whether matplotlib is installed (plots are skipped, with a note, when it is not)."""
    return importlib.util.find_spec("matplotlib") is not None


def write_report(
    report: EvalReport, out_dir: Path, transcripts: Sequence[ScoredEpisode] = (), run_dir: Path | None = None
) -> list[Path]:
    """Write eval.json, eval.md, the plots that apply and transcripts.html into `out_dir`; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = list(report.notes)
    written: list[Path] = []
    wants_curves = run_dir is not None and (run_dir / "metrics.jsonl").is_file()
    if (wants_curves or report.head_to_head is not None) and not plots_available():
        notes.append("plots skipped: matplotlib is not installed in this environment")
    elif wants_curves:
        metrics = read_for_report(run_dir)  # a report goes on past unreadable lines, and says how many it skipped
        if metrics.skipped:
            notes.append(f"learning curves: {metrics.skipped_note()}")
        written.append(plot_learning_curves(metrics.records, out_dir / LEARNING_CURVES, title=run_dir.name))
    if report.head_to_head is not None and plots_available():
        written.append(plot_payoff_matrix(report.head_to_head, out_dir / PAYOFF_MATRIX))
    if transcripts:
        title = f"{report.game}: " + ", ".join(p.name for p in report.policies)
        written.append(write_html(transcripts, out_dir / TRANSCRIPTS, title=title))
    report = dataclasses.replace(report, notes=tuple(notes))
    files = [path.name for path in written]
    (out_dir / "eval.md").write_text(render_markdown(report, files))
    (out_dir / "eval.json").write_text(json.dumps(to_json(report, files), indent=2, allow_nan=False) + "\n")
    return [*written, out_dir / "eval.md", out_dir / "eval.json"]


# --- eval.json ---------------------------------------------------------------------------------------


def to_json(report: EvalReport, files: Sequence[str] = ()) -> dict[str, Any]:
    """The report as JSON-safe data: non-finite numbers become null, intervals are [low, high]."""
    data = jsonable(dataclasses.asdict(report))
    if report.exploitability is not None:
        data["exploitability"]["exact"] = report.exploitability.exact
    return {"schema_version": SCHEMA_VERSION, **data, "files": list(files)}




# --- eval.md ------------------------------------------------------------------------------------------


def _number(value: float | None, signed: bool = False, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _interval(estimate: Estimate | None, signed: bool = False) -> str:
    if estimate is None:
        return "n/a"
    return f"{_number(estimate.value, signed)} [{_number(estimate.low, signed)}, {_number(estimate.high, signed)}]"


def _percent(estimate: Estimate | None) -> str:
    if estimate is None or not math.isfinite(estimate.value):
        return "n/a"
    return f"{100 * estimate.value:.1f}% [{100 * estimate.low:.1f}, {100 * estimate.high:.1f}]"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def _describe(info: PolicyInfo) -> str:
    if info.kind == "scripted":
        return f"**{info.name}** (scripted)"
    where = f"checkpoint `{info.checkpoint}`" + (f", step {info.step}" if info.step is not None else "")
    return (
        f"**{info.name}** (LLM, {where}, {info.backend} engine; reasoning depth {info.depth}, temperature "
        f"{info.temperature}, top-p {info.top_p}, max {info.max_new_tokens} new tokens, format penalty "
        f"{info.format_penalty})"
    )


def render_markdown(report: EvalReport, files: Sequence[str] = ()) -> str:
    """eval.md: one table per measurement, 95% intervals in brackets."""
    options = f" {report.game_options}" if report.game_options else ""
    head = report.head_to_head is not None
    lines = [f"# {'Head to head' if head else 'Evaluation'} on {report.game}{options}", ""]
    lines += [("- " if head else "Policy: ") + _describe(info) for info in report.policies]
    lines += ["", f"Seed {report.seed}. Intervals are 95%.", ""]
    if report.matches:
        seats = max(len(m.seat_returns) for m in report.matches)
        lines += ["## Against scripted opponents", ""]
        lines += [
            "Return is the game return (invalid output plays the fallback move it triggers); its interval is over "
            "deals, each dealt once per seat.",
            "",
        ]
        lines += _table(
            ["opponent", "games", "return", "win", "draw", "loss", *(f"return in seat {s}" for s in range(seats))],
            [
                [
                    m.opponent, str(m.games), _interval(m.mean_return, signed=True), _percent(m.win),
                    _percent(m.draw), _percent(m.loss), *(_interval(e, signed=True) for e in m.seat_returns),
                ]
                for m in report.matches
            ],
        )
    if report.exploitability is not None:
        e = report.exploitability
        if e.exact:
            method = f"exact ({e.infosets} information sets)"
        else:
            method = (
                f"sampled: {e.samples_per_infoset} moves at each of {e.infosets} information sets in the policy's "
                f"reasoning format, invalid output counted as its fallback; plug-in {_number(e.plug_in, digits=4)}, "
                "bias-corrected with bounds from both sides"
            )
        lines += ["## Exploitability", ""]
        lines += _table(
            ["exploitability", "95% interval", "method"],
            [[_number(e.value, digits=4), f"[{_number(e.ci_low, digits=4)}, {_number(e.ci_high, digits=4)}]", method]],
        )
        lines += _infoset_validity_markdown(e)
        lines += _infoset_moves_markdown(e)
    if report.validity is not None:
        lines += ["## Format validity", ""]
        lines += _table(
            ["valid responses", "cut off at the token limit", "LLM turns"],
            [[_percent(report.validity), _percent(report.truncated), str(report.validity.n)]],
        )
    if report.cot is not None:
        cot = report.cot
        lines += ["## Reasoning against the true opponent", ""]
        lines += _table(
            ["prediction accuracy", "belief accuracy", "agreement", "combined score"],
            [[_percent(cot.predict), _percent(cot.belief), _interval(cot.agreement), _interval(cot.score)]],
        )
    if report.head_to_head is not None:
        lines += _head_to_head_markdown(report.head_to_head)
    if report.joint:
        lines += _joint_markdown(report.joint)
    images = [name for name in files if name.endswith(".png")]
    if images:
        lines += ["## Plots", "", *(f"![{Path(name).stem}]({name})" for name in images), ""]
    if TRANSCRIPTS in files:
        lines += [f"Sampled games with reasoning and scores: [{TRANSCRIPTS}]({TRANSCRIPTS})", ""]
    if report.notes:
        lines += ["## Notes", "", *(f"- {note}" for note in report.notes), ""]
    return "\n".join(lines)


LISTED_STATES = 20
"""Information states below the validity floor listed in eval.md, lowest first."""


def _infoset_validity_markdown(e: ExploitabilityEstimate) -> list[str]:
    """Each information state's share of sampled responses with a legal action: the lowest, and those below the
    floor listed."""
    if not e.infoset_validity:
        return []
    low = e.low_validity()
    lines = ["## Validity per information state", "",
             (f"Lowest share of responses naming a legal action: {_number(e.min_validity)} over"
              f" {len(e.infoset_validity)} information states; {len(low)} below {VALIDITY_FLOOR:g}."), ""]
    if low:
        lines += _table(["information state", "valid responses"],
                        [[f"`{key}`", _number(share)] for key, share in low[:LISTED_STATES]])
    if len(low) > LISTED_STATES:
        lines += [f"and {len(low) - LISTED_STATES} more (every state's share is in eval.json).", ""]
    return lines


TABLED_STATES = 30
"""Games with at most this many information states get every state's moves tabled in eval.md (Kuhn poker: 12)."""


def _infoset_moves_markdown(e: ExploitabilityEstimate) -> list[str]:
    """The policy's probability of each legal move at every information state, where there are few enough to read."""
    if not e.infoset_moves:
        return []
    if len(e.infoset_moves) > TABLED_STATES:
        return [f"The policy's moves at each of the {len(e.infoset_moves)} information states are in eval.json"
                " (`exploitability.infoset_moves`).", ""]
    source = "the exact table" if e.exact else f"shares of {e.samples_per_infoset} sampled moves"
    lines = ["## Moves per information state", "", f"The policy's probability of each legal move ({source}).", ""]
    lines += _table(["information state", "moves"],
                    [[f"`{key}`", ", ".join(f"{name} {p:.2f}" for name, p in moves)] for key, moves in e.infoset_moves])
    return lines


def _head_to_head_markdown(result: HeadToHead) -> list[str]:
    names = result.policies
    lines = [
        "## Payoff matrix",
        "",
        f"Mean return of the row policy against the column policy, {result.games_per_pair} games per pair over "
        "both seats.",
        "",
    ]
    lines += _table(
        ["", *names],
        [[name, *("—" if cell is None else _interval(cell, signed=True) for cell in row)]
         for name, row in zip(names, result.payoff, strict=True)],
    )
    lines += [
        "## Elo",
        "",
        "Bradley-Terry fit (mean 1500, one virtual draw per pair) to duplicate matches: each deal played in both "
        "seats, won by the higher total return.",
        "",
    ]
    order = sorted(range(len(names)), key=lambda i: -result.elo[i].value)
    lines += _table(
        ["policy", "Elo", "95% interval", "matches won", "drawn", "lost"],
        [
            [names[i], f"{result.elo[i].value:.0f}", f"[{result.elo[i].low:.0f}, {result.elo[i].high:.0f}]",
             *(str(sum(cell[k] for cell in result.outcomes[i])) for k in range(3))]
            for i in order
        ],
    )
    return lines


def _joint_markdown(profiles: Sequence[JointProfile]) -> list[str]:
    first = max((p.estimate for p in profiles), key=lambda e: e.samples_per_infoset)
    players = list(dict.fromkeys(p.seats[0] for p in profiles))
    cell = {p.seats: p.nash_conv for p in profiles}
    lines = ["## Joint profiles", "",
             "NashConv (the two players' best-response gains summed; exploitability x 2) of the row policy as player 0 "
             "with the column policy as player 1; on the diagonal a policy plays both seats. Exact between scripted "
             f"policies; otherwise sampled: {first.samples_per_infoset} moves of each LLM at each of its seat's "
             "information states, the same samples in every profile, invalid output counted as its fallback.", ""]
    lines += _table(
        ["player 0 (row) / player 1 (column)", *players],
        [[row, *(f"{cell[(row, col)][0]:.4f} [{cell[(row, col)][1]:.4f}, {cell[(row, col)][2]:.4f}]"
                 for col in players)] for row in players],
    )
    return lines


# --- plots --------------------------------------------------------------------------------------------




def _pyplot():
    # Imported here: the Agg backend must be chosen before pyplot is imported, and only plots need it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_learning_curves(records: Sequence[dict[str, Any]], out: Path, title: str = "") -> Path:
    """Return, exploitability, CoT scores and format validity over training steps, with eval intervals as bands."""
    plt = _pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for axis, (panel, lines) in zip(axes.flat, _PANELS, strict=True):
        drawn = False
        for key, label in lines:
            points = [(r["step"], r[key], r.get(_BANDS.get(key, ""))) for r in records
                      if isinstance(r.get(key), (int, float)) and "step" in r]
            if not points:
                continue
            steps, values, bands = zip(*points, strict=True)
            (line,) = axis.plot(steps, values, marker="o" if len(points) < 30 else None, markersize=3, label=label)
            lows_highs = [_band(value, band) for value, band in zip(values, bands, strict=True)]
            if all(bound is not None for bound in lows_highs):
                axis.fill_between(
                    steps, [b[0] for b in lows_highs], [b[1] for b in lows_highs], color=line.get_color(), alpha=0.2
                )
            drawn = True
        axis.set_title(panel)
        axis.set_xlabel("step")
        if drawn:
            axis.legend(fontsize=8)
        else:
            axis.text(0.5, 0.5, "no data", ha="center", va="center", transform=axis.transAxes, color="grey")
    if title:
        figure.suptitle(title)
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out


def _band(value: float, band: Any) -> tuple[float, float] | None:
    if isinstance(band, (int, float)) and math.isfinite(band):
        return value - band, value + band
    if isinstance(band, (list, tuple)) and len(band) == 2 and all(isinstance(b, (int, float)) for b in band):
        return float(band[0]), float(band[1])
    return None


def plot_payoff_matrix(result: HeadToHead, out: Path) -> Path:
    """The payoff matrix as a heat map (row's mean return against column), centred at 0."""
    plt = _pyplot()
    names = result.policies
    values = [[float("nan") if cell is None else cell.value for cell in row] for row in result.payoff]
    finite = [abs(v) for row in values for v in row if math.isfinite(v)]
    limit = max(finite, default=1.0) or 1.0
    size = 1.2 + 1.1 * len(names)
    figure, axis = plt.subplots(figsize=(size + 1.5, size), constrained_layout=True)
    image = axis.imshow(values, cmap="RdBu", vmin=-limit, vmax=limit)
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right")
    axis.set_yticks(range(len(names)), names)
    axis.set_xlabel("opponent")
    axis.set_ylabel("policy")
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            if math.isfinite(value):
                shade = "white" if abs(value) > 0.6 * limit else "black"
                axis.text(j, i, f"{value:+.2f}", ha="center", va="center", fontsize=9, color=shade)
    figure.colorbar(image, ax=axis, label="mean return of row vs column")
    axis.set_title("Payoff matrix")
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out
