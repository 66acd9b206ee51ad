"""Can the model read its game? The perception bars of the "models that read their game" issue, one probe per kind
of game, picked by the config's game:

    python experiments/can_the_model_read_its_game/perception_probes.py --config CONFIG
        [--model DIR] [--states N] [--seed S] [--opponent NAME] [--tactics] [key=value ...]

The model is the config's initial policy (its cached rules pretraining and warm start, trained on first use), or
`--model`. Each figure is printed with a 95% interval (Student's t over the decisions or deals) and its bar: met
when the whole interval is on its side, not met when none of it is, else undecided.

- **Board games** (tic_tac_toe, connect_four): *legal mass at the first mention of the move*. At `--states`
  decisions reached by random play (a uniformly drawn point of a random game, among those where some move is
  illegal: a full column, a taken cell), the response is templated with a random legal move as the warm start
  templates it, and cut where the move is first named (the move is chosen there). The model's probability of each
  of the game's move names as the continuation (product of its tokens' probabilities, renormalised over all the
  names) gives the share on legal moves. A model that ignores the board scores about the legal fraction (printed);
  bar: >= 0.99.
- **Board games, `--tactics`** (no bar): *does the policy take a win, and block one?* At `--states` decisions of
  each kind, drawn from random games as above (the mover can complete a line: "win"; it cannot, and the opponent
  could next: "block"), the model writes its whole response at temperature 1 from its own prompt, as it plays, and
  the figure is the share whose move completes the line, or takes the opponent's completing cell (a response with
  no legal move misses). A random legal move scores the printed chance; the heuristic player 1.0 at both.
- **Liar's dice** (liars_dice): *the opening bid depends on one's own die*. At the opener's first decision of
  `--states` sampled deals, the same cut (the first mention of a templated random bid) and the same scoring over
  the legal moves (every bid; not "liar", one token where a bid is four) give P(open with face f), the sum over the
  bids of face f. Per deal: P(own face) minus the mean over the other faces of P(that face) (with several dice, the
  mean over the own faces against the others). 0 for a model that ignores its die; bar: >= 0.3 with the interval
  above 0.
- **Kuhn and Leduc poker** (two players): *belief regret under the opponent that played*. `--states` games against
  a scripted opponent (`--opponent`; default the config's first scripted opponent, else random), the policy's seat
  alternating; at each policy decision a response is sampled (hf engine, temperature 1) and its `<past>` belief
  read. Regret = max_v p(v|h) - p(named value|h), with p the exact posterior over the opponent's card given the
  history under that opponent's policy (`games.posterior`), scored as the comparison scores it (a hedge earns a
  share, no readable belief earns 0 and so has regret max_v p(v|h)). Bars: <= 0.05 (Kuhn), <= 0.10 (Leduc).
  Only at depths with `<past>`. For two-player Leduc the script also prints *the first raise by card* (no bar):
  at player 0's first decision, P(raise) at the first mention of a templated move for a Jack, a Queen and a King,
  `--states` paired draws, and the King-minus-Jack margin (0 for a model that ignores its card).

The pieces are small functions over a `Scorer` (messages, response prefix, names -> probabilities) or a `Generate`
(prompts -> responses), so tests drive them with a tiny model or a fake one.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch or vLLM is imported (`import strat` sets nothing)

import torch  # noqa: E402
from scipy import stats  # noqa: E402  (a dependency of open-spiel)

import games  # noqa: E402
from games.base import BeliefValues, TextGameEnv  # noqa: E402
from games.cards import rank_names  # noqa: E402
from games.heuristics import line_moves  # noqa: E402
from games.opponents import make_opponent  # noqa: E402
from games.posterior import Posterior, posterior  # noqa: E402
from strat.algorithm.comparison import belief_text, posterior_belief  # noqa: E402
from strat.algorithm.reasoning import (  # noqa: E402
    DEPTH_SECTIONS,
    build_messages,
    decide,
    format_prompt,
    parse_response,
)
from strat.algorithm.records import BeliefTarget  # noqa: E402
from strat.train.warmstart import first_mention, templated_response  # noqa: E402

Messages = list[dict[str, str]]
Scorer = Callable[[Messages, str, Sequence[str], bool], dict[str, float]]
"""(prompt messages, response prefix, names, space) -> each name's probability as the text right after the prefix
(" name" when `space`), renormalised over `names`."""
Generate = Callable[[list[Messages]], list[str]]
"""A batch of prompts -> one sampled response each."""
Respond = Callable[[list[tuple[TextGameEnv, str]]], list[str]]
"""A batch of (game, the agent to move) -> one response each: a model's through its prompt, or a template's."""

BOARD_GAMES = ("tic_tac_toe", "connect_four")
DICE_GAMES = ("liars_dice",)
BELIEF_BARS = {"kuhn_poker": 0.05, "leduc_poker": 0.10}
LEGAL_BAR = 0.99
OPENING_BAR = 0.3


@dataclass(frozen=True)
class Interval:
    """A mean with its Student-t 95% interval over `n` values (infinite for one value, nan for none)."""

    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def t_interval(values: Sequence[float]) -> Interval:
    """The mean of `values` and its two-sided 95% interval from Student's t with n - 1 degrees of freedom."""
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(values)
    if n == 1:
        return Interval(mean, -math.inf, math.inf, 1)
    half = float(stats.t.ppf(0.975, n - 1)) * statistics.stdev(values) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


# --- scoring names as continuations --------------------------------------------------------------------------------


def name_probabilities(model, tokenizer, context_ids: Sequence[int], names: Sequence[str],  # noqa: ANN001
                       space: bool) -> dict[str, float]:
    """The model's probability of each of `names` as the next text after `context_ids` (" name" when `space`), from
    the product of its tokens' probabilities, renormalised over `names` (board_reading's `cell_probabilities` for
    any list of names)."""
    continuations = [tokenizer((" " if space else "") + name, add_special_tokens=False)["input_ids"] for name in names]
    width = len(context_ids) + max(map(len, continuations))
    rows = [list(context_ids) + tokens for tokens in continuations]
    device = next(model.parameters()).device
    ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows], device=device)
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits.float(), dim=-1).cpu()
    start = len(context_ids)
    scores = torch.tensor([
        sum(float(logprobs[k, position - 1, row[position]]) for position in range(start, len(row)))
        for k, row in enumerate(rows)
    ])
    return dict(zip(names, torch.softmax(scores, dim=0).tolist(), strict=True))


def model_scorer(model, tokenizer) -> Scorer:  # noqa: ANN001
    """A `Scorer` from a causal LM and its tokenizer (prompt in its chat template, then the prefix)."""

    def score(messages: Messages, prefix: str, names: Sequence[str], space: bool) -> dict[str, float]:
        context = tokenizer(format_prompt(tokenizer, messages) + prefix, add_special_tokens=False)["input_ids"]
        return name_probabilities(model, tokenizer, context, names, space)

    return score


def load_scorer(model_dir: Path, device: str) -> Scorer:
    """The scorer of the model saved in `model_dir`, on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True)
    return model_scorer(model.to(device).eval(), tokenizer)


def mention_context(env: TextGameEnv, agent: str, depth: int, rng: random.Random,
                    name_legal: bool = False) -> tuple[Messages, str, bool]:
    """The prompt of `agent`, and a response templated with a random legal move cut at its first mention
    (`name_legal`: the template that lists the legal moves first, `warm_start.name_legal_moves`)."""
    move = rng.choice(env.legal_actions(agent))
    response = templated_response(env, agent, move, depth, rng, name_legal)
    prefix, space = first_mention(response, env.action_name(move, agent), depth)
    return build_messages(env, agent, depth), prefix, space


# --- board games: legal mass at the first mention -------------------------------------------------------------------


@dataclass(frozen=True)
class LegalMass:
    """The board probe over `share.n` decisions."""

    game: str
    depth: int
    share: Interval
    """Mean share of the move names' probability on legal moves, at the first mention."""
    legal_fraction: float
    """Mean share of legal moves among the names: what a model that ignores the board puts there."""


def board_decisions(game: str, count: int, seed: int, options: Mapping[str, object] | None = None,
                    where: Callable[[TextGameEnv], bool] | None = None) -> Iterator[TextGameEnv]:
    """`count` decision points of `game`, each a uniformly drawn point of a seeded random game after at least one
    move where some move is illegal (so reading the board matters), or, with `where`, a point where `where` holds;
    games without one are skipped."""
    rng = random.Random(seed)
    produced = 0
    for deal in itertools.count():
        if produced >= count:
            return
        env = games.make(game, **dict(options or {}))
        env.reset(seed=seed * 1_000_003 + deal)
        candidates = []
        for ply in itertools.count():
            if env.pyspiel_state.is_terminal():
                break
            if (where(env) if where is not None else ply >= 1 and env.some_move_illegal()):
                candidates.append(env.clone())
            env.step(rng.choice(env.legal_actions(env.agent_selection)))
        if candidates:
            produced += 1
            yield rng.choice(candidates)


def legal_mass(scorer: Scorer, game: str, states: int, seed: int = 0, depth: int = 2,
               options: Mapping[str, object] | None = None, name_legal: bool = False) -> LegalMass:
    """The board probe: the share on legal moves at the first mention, over `states` decisions. With `name_legal`
    the context before the mention holds the template's list of the legal moves (correct, as the warm start wrote
    it): the figure then says whether the model chooses among a list it is given, not whether it writes the list
    right itself (a free-running `strat eval`'s format validity says that)."""
    rng = random.Random(seed + 1)
    shares, fractions = [], []
    for env in board_decisions(game, states, seed, options):
        agent = env.agent_selection
        names = env.all_action_names()
        legal = set(env.legal_action_names(agent))
        messages, prefix, space = mention_context(env, agent, depth, rng, name_legal)
        probabilities = scorer(messages, prefix, names, space)
        shares.append(sum(p for name, p in probabilities.items() if name in legal))
        fractions.append(len(legal) / len(names))
    return LegalMass(game, depth, t_interval(shares), statistics.fmean(fractions))


# --- board games: winning and blocking moves in free play ------------------------------------------------------------


TACTIC_KINDS = ("win", "block")
TACTIC_PHRASES = {"win": "takes a win", "block": "blocks the opponent's line"}


@dataclass(frozen=True)
class Tactic:
    """The tactics probe at one kind of decision, over `hit.n` decisions."""

    kind: str
    """"win": the mover can complete a line; "block": it cannot, and the opponent could complete one next."""
    hit: Interval
    """Share of the sampled responses that play a move of the kind (one that completes the mover's line; one that
    takes a cell where the opponent would complete its line). A response without a legal move is a miss."""
    valid: float
    """Share of the responses that play a legal move."""
    chance: float
    """Mean share of the legal moves that are of the kind: what a uniformly random legal move hits."""


def tactic_kind(env: TextGameEnv) -> str | None:
    """The kind of the decision at `env` for the mover: "win", "block" or None (neither)."""
    lines = line_moves(env, env.agent_selection)
    return "win" if lines.wins else "block" if lines.blocks else None


def tactics(generate: Generate, game: str, kind: str, states: int, seed: int = 0, depth: int = 2,
            options: Mapping[str, object] | None = None, batch: int = 64) -> Tactic:
    """The tactics probe: at `states` decisions of `kind` (uniformly drawn points of seeded random games where the
    mover has a winning move, or has none and must block), one response each from `generate` (the policy's own
    prompt and free-running reasoning, as it plays) and the move it plays. A heuristic player that wins, else
    blocks, scores 1.0 at both kinds; a player that ignores the board scores `chance`."""
    if kind not in TACTIC_KINDS:
        raise ValueError(f"tactic kind {kind!r}: choose from {', '.join(TACTIC_KINDS)}")
    envs = list(board_decisions(game, states, seed, options, where=lambda env: tactic_kind(env) == kind))
    texts: list[str] = []
    for start in range(0, len(envs), batch):
        texts += generate([build_messages(env, env.agent_selection, depth) for env in envs[start:start + batch]])
    hits, valid, chance = [], 0, []
    for env, text in zip(envs, texts, strict=True):
        agent = env.agent_selection
        lines = line_moves(env, agent)
        targets = set(lines.wins if kind == "win" else lines.blocks)
        named = parse_response(text, depth).sections.action
        action = env.parse_action(named, agent) if named is not None else None
        hits.append(float(action is not None and action in targets))
        valid += action is not None
        chance.append(len(targets) / len(env.legal_actions(agent)))
    return Tactic(kind, t_interval(hits), valid / len(envs) if envs else math.nan,
                  statistics.fmean(chance) if chance else math.nan)


# --- liar's dice: the opening bid and one's own die -----------------------------------------------------------------


@dataclass(frozen=True)
class OpeningBias:
    """The liar's dice probe over `margin.n` deals."""

    depth: int
    margin: Interval
    """Mean over deals of P(open with an own face) - mean over other faces of P(open with that face)."""
    own: float
    """Mean P(open with an own face)."""
    other: float
    """Mean over deals of the mean P(open with another face)."""
    by_face: dict[int, float] = field(default_factory=dict)
    """Mean margin per own die face (one die each; with several, keyed by the lowest)."""


def face_probabilities(env: TextGameEnv, probabilities: Mapping[str, float]) -> dict[int, float]:
    """P(bid on face f) for each face: the summed probability of the bids of that face ("liar" left out)."""
    faces = dict.fromkeys(range(1, env.sides + 1), 0.0)
    for action, name in enumerate(env.all_action_names()):
        if action != env.liar_action:
            faces[env.bid(action)[1]] += probabilities.get(name, 0.0)
    return faces


def own_face_margin(faces: Mapping[int, float], own: Sequence[int]) -> tuple[float, float, float]:
    """(margin, P(own), P(other)): P(own) the mean over the distinct own faces, P(other) the mean over the rest."""
    mine = set(own)
    others = [p for face, p in faces.items() if face not in mine]
    p_own = statistics.fmean(faces[face] for face in mine)
    p_other = statistics.fmean(others) if others else 0.0
    return p_own - p_other, p_own, p_other


def opening_bias(scorer: Scorer, states: int, seed: int = 0, depth: int = 2,
                 options: Mapping[str, object] | None = None) -> OpeningBias:
    """The liar's dice probe at the opener's first decision of `states` seeded deals."""
    rng = random.Random(seed + 1)
    margins, owns, others = [], [], []
    by_face: dict[int, list[float]] = {}
    for deal in range(states):
        env = games.make("liars_dice", **dict(options or {}))
        env.reset(seed=seed * 1_000_003 + deal)
        agent = env.agent_selection
        messages, prefix, space = mention_context(env, agent, depth, rng)
        # Over the legal opening moves, the bids: "liar" (illegal here) is one token where a bid is several, and an
        # untrained model's mass would go there.
        faces = face_probabilities(env, scorer(messages, prefix, env.legal_action_names(agent), space))
        dice = env.dice(agent)
        margin, p_own, p_other = own_face_margin(faces, dice)
        margins.append(margin)
        owns.append(p_own)
        others.append(p_other)
        by_face.setdefault(dice[0], []).append(margin)
    return OpeningBias(depth, t_interval(margins), statistics.fmean(owns), statistics.fmean(others),
                       {face: statistics.fmean(values) for face, values in sorted(by_face.items())})


# --- Leduc poker: the first raise and one's own card ----------------------------------------------------------------


@dataclass(frozen=True)
class RaiseByCard:
    """The Leduc hand probe over `margin.n` paired draws."""

    depth: int
    margin: Interval
    """Mean over draws of P(raise | a King) - P(raise | a Jack), each draw's two contexts templated alike."""
    by_card: dict[str, float] = field(default_factory=dict)
    """Mean P(raise) per rank held (Jack, Queen, King)."""


def first_decision(card: int, options: Mapping[str, object] | None = None) -> TextGameEnv:
    """A Leduc deal where player 0, first to act, holds a card of rank `card` (the first such seed)."""
    for seed in itertools.count():
        env = games.make("leduc_poker", **dict(options or {}))
        env.reset(seed=seed)
        if env.card(env.agent_selection) == card:
            return env
    raise AssertionError("unreachable")


def raise_by_card(scorer: Scorer, states: int, seed: int = 0, depth: int = 2,
                  options: Mapping[str, object] | None = None) -> RaiseByCard:
    """The Leduc hand probe: at player 0's first decision (round one, nothing owed: check or raise), P(raise) at the
    first mention of a templated random move, over the two legal moves, for each rank held. Draw i templates each
    rank's context with the same seed, so the King-minus-Jack margin is paired. 0 for a model that ignores its card;
    the timid player's own is 0.5 - 0.1 = 0.4, the contrarian's 0.25 - 0.75 = -0.5. With no history the template's
    text before the move hardly varies between draws, so the interval is narrow: it measures the template's
    variation, not the model's sampling."""
    envs = {card: first_decision(card, options) for card in range(3)}
    by_card: dict[int, list[float]] = {card: [] for card in envs}
    margins = []
    for draw in range(states):
        raised = {}
        for card, env in envs.items():
            agent = env.agent_selection
            messages, prefix, space = mention_context(env, agent, depth, random.Random(seed * 1_000_003 + draw))
            probabilities = scorer(messages, prefix, env.legal_action_names(agent), space)
            raised[card] = probabilities["raise"]
            by_card[card].append(raised[card])
        margins.append(raised[2] - raised[0])
    names = rank_names(3)
    return RaiseByCard(depth, t_interval(margins), {names[card]: statistics.fmean(values)
                                                      for card, values in by_card.items()})


# --- Kuhn and Leduc poker: belief regret under the opponent that played --------------------------------------------


@dataclass(frozen=True)
class BeliefRegret:
    """The belief probe over `regret.n` decisions of `games` games."""

    game: str
    depth: int
    opponent: str
    games: int
    regret: Interval
    """Mean of max_v p(v|h) - p(named value|h) over the policy's decisions."""
    unreadable: float
    """Share of decisions whose `<past>` names no value (regret max_v p(v|h))."""
    best: float
    """Mean max_v p(v|h): the regret of naming nothing."""


def belief_regret(past: str | None, found: Posterior, extract: BeliefValues) -> float:
    """max_v p(v|h) minus the belief's expected score under `found`, as the comparison scores it
    (`posterior_belief`: a missing or unreadable belief scores 0)."""
    return posterior_belief(past, [BeliefTarget(found.target, tuple(found.probabilities.items()))], extract)[1]


def readable(past: str | None, extract: BeliefValues) -> bool:
    """Whether `past` has a belief line naming at least one value."""
    guess = belief_text(past) if past is not None else None
    return guess is not None and bool(extract(guess))


def default_opponent(config) -> str:  # noqa: ANN001
    """The config's first scripted opponent, else random."""
    return next((o.name for o in config.game.opponents if o.kind == "scripted"), "random")


def read_beliefs(generate: Generate, game: str, depth: int, episodes: int, opponent: str = "random", seed: int = 0,
                 options: Mapping[str, object] | None = None) -> BeliefRegret:
    """The belief probe: `episodes` games against `opponent`, the policy's seat alternating, in lockstep (each round
    of the policy's decisions is one call of `generate`)."""

    def respond(batch: list[tuple[TextGameEnv, str]]) -> list[str]:
        return generate([build_messages(env, agent, depth) for env, agent in batch])

    return belief_games(respond, game, depth, episodes, opponent, seed, options)


def template_respond(player: str, game: str, depth: int, seed: int = 0,
                     options: Mapping[str, object] | None = None) -> Respond:
    """The warm start's templated responses (`templated_response`) for the scripted `player`'s moves: the beliefs a
    warm start on `player` learns to write, so that the probe's figure for them is the most its model can reach."""
    players: dict[int, object] = {}  # one seeded player per game, by the env's identity (the games outlive the probe)
    rng = random.Random(seed)

    def respond(batch: list[tuple[TextGameEnv, str]]) -> list[str]:
        texts = []
        for env, agent in batch:
            if id(env) not in players:
                players[id(env)] = make_opponent(player, game, seed=seed * 1_000_003 + len(players),
                                                 **dict(options or {}))
            action = players[id(env)].act(env, agent)
            texts.append(templated_response(env, agent, action, depth, rng))
        return texts

    return respond


def belief_games(respond: Respond, game: str, depth: int, episodes: int, opponent: str = "random", seed: int = 0,
                 options: Mapping[str, object] | None = None) -> BeliefRegret:
    """`episodes` games against `opponent`, the responding seat alternating, in lockstep (each round of its
    decisions is one call of `respond`); at each decision the response's belief is scored against the posterior
    under `opponent`'s policy and its move is played."""
    if "past" not in DEPTH_SECTIONS[depth]:
        raise ValueError(f"depth {depth} responses have no <past>, so no belief to read (use depth 1 or 2)")
    options = dict(options or {})
    extract = games.belief_values(game)
    envs = [games.make(game, **options) for _ in range(episodes)]
    if envs and (envs[0].spec.num_players != 2 or extract is None):
        raise ValueError(f"the belief probe is for two-player games with beliefs, not {game} with {options}")
    seats = [env.possible_agents[i % 2] for i, env in enumerate(envs)]
    players = [make_opponent(opponent, game, seed=seed * 1_000_003 + i, **options) for i in range(episodes)]
    for i, env in enumerate(envs):
        env.reset(seed=seed * 1_000_003 + i)
    fallback = random.Random(seed)
    regrets, best, unreadable = [], [], 0
    while True:
        pending = []
        for i, env in enumerate(envs):
            while not env.pyspiel_state.is_terminal() and env.agent_selection != seats[i]:
                env.step(players[i].act(env, env.agent_selection))
            if not env.pyspiel_state.is_terminal():
                pending.append(i)
        if not pending:
            break
        texts = respond([(envs[i], seats[i]) for i in pending])
        for i, text in zip(pending, texts, strict=True):
            env, agent = envs[i], seats[i]
            other = next(a for a in env.possible_agents if a != agent)
            found = posterior(env, agent, other, players[i].action_probs)
            parsed = parse_response(text, depth)
            past = parsed.sections.past
            regrets.append(belief_regret(past, found, extract))
            best.append(max(found.probabilities.values()))
            unreadable += not readable(past, extract)
            env.step(decide(parsed, env, agent, fallback, format_penalty=0.0).action)
    return BeliefRegret(game, depth, opponent, episodes, t_interval(regrets),
                        unreadable / len(regrets) if regrets else math.nan,
                        statistics.fmean(best) if best else math.nan)


def engine_generate(engine, max_tokens: int, seed: int, temperature: float = 1.0) -> Generate:  # noqa: ANN001
    """A `Generate` over an engine: each call samples with its own seed (seed, call number), as format_check does."""
    from strat.engines import SamplingParams

    calls = itertools.count()

    def generate(batch: list[Messages]) -> list[str]:
        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed * 1_000_003 + next(calls))
        return [output.text for output in engine.generate_chat(batch, params)]

    return generate


# --- the command ----------------------------------------------------------------------------------------------------


def verdict(interval: Interval, bar: float, at_least: bool) -> str:
    """"met" when the whole interval is on the bar's good side, "not met" when it is all on the other, else
    "undecided" (the interval straddles the bar; more decisions would tell)."""
    low, high = (interval.low, interval.high) if at_least else (-interval.high, -interval.low)
    bar = bar if at_least else -bar
    return "met" if low >= bar else "not met" if high < bar else f"undecided (mean {interval.mean:.3f})"


def main() -> None:
    from strat.config_loading import load_config
    from strat.engines import build_engine, resolve_device
    from strat.train.trainer import Trainer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--model", type=Path, help="a model directory instead of the config's initial policy")
    parser.add_argument("--states", type=int, default=30, help="decisions (board), deals (dice) or games (poker)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--opponent", help="the poker probe's scripted opponent (default: the config's first "
                        "scripted one, else random)")
    parser.add_argument("--template", metavar="PLAYER", help="the poker probe on the warm start's templated "
                        "responses for scripted PLAYER's moves instead of a model's: the most a warm start on PLAYER "
                        "can reach")
    parser.add_argument("--tactics", action="store_true", help="board games: instead of the legal mass, the share "
                        "of free-running responses that take a win when one is offered and block when they must "
                        "(--states decisions of each kind; no bar)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = parser.parse_args()
    config = load_config(args.config, list(args.overrides))
    game, depth, options = config.game.name, config.reasoning.depth, dict(config.game.options)
    if game not in BOARD_GAMES + DICE_GAMES + tuple(BELIEF_BARS):
        parser.error(f"no perception probe for {game} (probes: {', '.join(BOARD_GAMES + DICE_GAMES)}, "
                     f"{', '.join(BELIEF_BARS)})")
    if game in BELIEF_BARS and "past" not in DEPTH_SECTIONS[depth]:
        parser.error(f"the belief probe reads <past>, which depth {depth} responses lack: set reasoning.depth=1 or 2")
    if args.tactics and game not in BOARD_GAMES:
        parser.error(f"--tactics is for the board games ({', '.join(BOARD_GAMES)}), not {game}")
    if args.template and game not in BELIEF_BARS:
        parser.error(f"--template is for the belief probe ({', '.join(BELIEF_BARS)}), not {game}")
    device = resolve_device("auto")
    if game in BELIEF_BARS:
        opponent = args.opponent or default_opponent(config)
        if args.template:
            print(f"{game}, depth {depth}, the warm start's templated responses for {args.template}'s moves")
            respond = template_respond(args.template, game, depth, args.seed, options)
            result = belief_games(respond, game, depth, args.states, opponent, args.seed, options)
        else:
            model_dir = args.model or Trainer.initial_model_path(config)
            print(f"{game}, depth {depth}, model {model_dir}")
            engine = build_engine("hf", model_dir, device=device)
            try:
                generate = engine_generate(engine, config.reasoning.max_new_tokens, args.seed)
                result = read_beliefs(generate, game, depth, args.states, opponent, args.seed, options)
            finally:
                engine.close()
        bar = BELIEF_BARS[game]
        print(f"belief regret against {opponent}, {result.regret.n} decisions of {result.games} games: "
              f"{result.regret} (bar <= {bar}: {verdict(result.regret, bar, at_least=False)})")
        print(f"no readable belief: {result.unreadable:.3f} of decisions; naming nothing: regret {result.best:.3f}")
        if game == "leduc_poker" and not args.template and options.get("players", 2) == 2:
            hand = raise_by_card(load_scorer(model_dir, device), args.states, args.seed, depth, options)
            cards = ", ".join(f"{name} {p:.3f}" for name, p in hand.by_card.items())
            print(f"first raise, a King minus a Jack, {hand.margin.n} draws: {hand.margin} (no bar; the timid "
                  f"player's 0.4, the contrarian's -0.5); P(raise) by card: {cards}")
        return
    model_dir = args.model or Trainer.initial_model_path(config)
    print(f"{game}, depth {depth}, model {model_dir}")
    if args.tactics:
        engine = build_engine("hf", model_dir, device=device)
        try:
            generate = engine_generate(engine, config.reasoning.max_new_tokens, args.seed)
            for kind in TACTIC_KINDS:
                tactic = tactics(generate, game, kind, args.states, args.seed, depth, options)
                print(f"{kind}: {tactic.hit.n} decisions, {TACTIC_PHRASES[kind]}: {tactic.hit} (a random legal "
                      f"move: {tactic.chance:.3f}; the heuristic player: 1.000); legal moves {tactic.valid:.3f}")
        finally:
            engine.close()
        return
    scorer = load_scorer(model_dir, device)
    if game in BOARD_GAMES:
        mass = legal_mass(scorer, game, args.states, args.seed, depth, options, config.warm_start.name_legal_moves)
        print(f"legal mass at the first mention, {mass.share.n} decisions: {mass.share} "
              f"(bar >= {LEGAL_BAR}: {verdict(mass.share, LEGAL_BAR, at_least=True)}; ignoring the board: "
              f"{mass.legal_fraction:.3f})")
        return
    bias = opening_bias(scorer, args.states, args.seed, depth, options)
    faces = ", ".join(f"{face}: {margin:+.3f}" for face, margin in bias.by_face.items())
    print(f"opening on one's own face minus another, {bias.margin.n} deals: {bias.margin} "
          f"(bar >= {OPENING_BAR} with the interval above 0: "
          f"{'met' if bias.margin.mean >= OPENING_BAR and bias.margin.low > 0 else 'not met'})")
    print(f"P(own face) {bias.own:.3f}, P(another face) {bias.other:.3f}; margin by own face: {faces}")


if __name__ == "__main__":
    main()
