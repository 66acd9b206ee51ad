"""A fixed LLM opponent (`policies: [{name, model, train: false}]`, `{kind: policy, name}`): the config's refusals,
the game loop sending each seat's turns to its own engine in its own format, and a training run against one."""

from pathlib import Path

import pytest

import games
from strat.algorithm.targets import TargetSettings
from strat.config import OpponentConfig
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.play.rollout import GroupPlan, LLMPlayer, RolloutRunner, RolloutSettings, evaluate_vs
from strat.train.fixed_policies import resolve_fixed_policies
from tests.eval.helpers import FakeLLM

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"
BET, PASS = 1, 0


def _load(*overrides: str):
    return load_config(DEFAULT, list(overrides))


def _fixed(model: Path, name: str = "rival", train: str = "false") -> list[str]:
    return [f"policies=[{{name: {name}, model: {model}, train: {train}}}]",
            f"game.opponents=[{{kind: self}}, {{kind: policy, name: {name}}}]"]


def test_a_fixed_policy_is_configured_and_resolved(warm_model_dir: Path) -> None:
    config = _load(*_fixed(warm_model_dir))
    (policy,) = config.policies
    assert (policy.name, policy.train) == ("rival", False)
    assert (config.game.opponents[1].kind, config.game.opponents[1].name) == ("policy", "rival")
    (fixed,) = resolve_fixed_policies(config)
    # A bare model directory carries no reasoning format: it plays in the run's.
    assert fixed.model_dir == warm_model_dir and fixed.seat == "policy:rival"
    assert fixed.settings.depth == config.reasoning.depth and "in this run's format" in fixed.source


@pytest.mark.parametrize(("overrides", "message"), [
    (lambda d: _fixed(Path("tiny:kuhn_poker")), "a fixed policy plays a trained checkpoint, and a tiny model is"),
    (lambda d: _fixed(Path("tiny:leduc_poker"), train="true"), "a tiny model of another game than game.name=kuhn"),
    (lambda d: [*_fixed(Path("tiny:kuhn_poker"), train="true"), "algorithm.dph_divergence=js"],
     "use none with a co-trained policy"),
    (lambda d: [f"policies=[{{name: rival, model: {d}, train: false, lr: 0.1}}]",
                "game.opponents=[{kind: policy, name: rival}]"], "only a co-trained policy (train: true) has a"),
    (lambda d: _fixed(d, name="snapshot"), "is reserved"),
    (lambda d: [f"policies=[{{name: rival, model: {d}, train: false}}]"], "policies.0 (rival) plays no seat"),
    (lambda d: [*_fixed(d)[:1], "game.opponents=[{kind: policy, name: other}]"],
     "game.opponents.0.name='other': no such entry in policies (rival)"),
    (lambda d: ["game.opponents=[{kind: policy, name: rival}]"], "no such entry in policies (none is configured)"),
    (lambda d: [f"policies=[{{name: a, model: {d}, train: false}}, {{name: a, model: {d}, train: false}}]",
                "game.opponents=[{kind: policy, name: a}]"], "policies.1.name='a': two policies have this name"),
    (lambda d: _fixed(d / "missing"), "no directory at"),
    (lambda d: ["game.opponents=[{kind: self, name: rival}]"], "name is only for kind=scripted or kind=policy"),
    (lambda d: ["game.opponents=[{kind: policy}]"], "needs the name of an entry of `policies`"),
])
def test_bad_policy_configs_are_refused_in_one_line(tmp_path: Path, overrides, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(*overrides(tmp_path))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_run_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("game: {name: kuhn_poker}\n")
    with pytest.raises(ConfigError, match=r"policies\.0\.model=.*no complete checkpoint"):
        resolve_fixed_policies(_load(*_fixed(run)))


def _probs(action: int):
    return lambda env, agent: {action: 1.0}


def test_each_seat_plays_on_its_own_engine_in_its_own_format() -> None:
    """The trained policy always bets (depth 2); the fixed opponent always passes, in the depth-1 format: a depth-2
    prompt would not be in its table. Its turns go to its engine alone, the learning seat is the trained policy's, and
    the score targets sample the fixed seat with its own player."""
    settings = RolloutSettings(game="kuhn_poker", depth=2, group_size=2,
                               opponents=(OpponentConfig(kind="policy", name="rival"),),
                               targets=TargetSettings(prediction="policy", belief="posterior", min_visits=2,
                                                      samples=64))
    policy, rival = FakeLLM("kuhn_poker", _probs(BET), depth=2), FakeLLM("kuhn_poker", _probs(PASS), depth=1)
    fixed = {"rival": LLMPlayer(RolloutSettings(game="kuhn_poker", depth=1), rival.encode, rival.generate)}
    runner = RolloutRunner(settings, policy.encode, policy.generate, fixed=fixed)
    plans = [GroupPlan(f"g{i}", seed=100 + i, opponent=settings.opponents[0], ego_seat=i % 2) for i in range(4)]
    episodes = runner.run(plans, sampling_seed=7)
    assert len(episodes) == 8 and policy.calls and rival.calls
    for episode in episodes:
        (ego,) = episode.ego_agents
        assert episode.seats == {a: "policy" if a == ego else "policy:rival" for a in episode.agents}
        for turn in episode.turns:
            assert turn.valid and turn.action == (BET if turn.agent == ego else PASS)
    # A prediction of the rival's next move is scored against the rival's policy, estimated from its own engine: it
    # always passes.
    next_moves = [dict(target.next_move) for e in episodes for target in e.targets if target.next_move is not None]
    rival_next = [move for move in next_moves if move != {"none": 1.0}]
    assert rival_next and all(move == {"pass": 1.0} for move in rival_next)


def test_evaluation_against_a_fixed_policy() -> None:
    """Always betting against a player that always passes wins the ante in every game, in either seat: it folds to
    the bet (first to act, it passes, and folds to the bet that follows)."""
    policy, rival = FakeLLM("kuhn_poker", _probs(BET)), FakeLLM("kuhn_poker", _probs(PASS), depth=1)
    fixed = {"rival": LLMPlayer(RolloutSettings(game="kuhn_poker", depth=1), rival.encode, rival.generate)}
    runner = RolloutRunner(RolloutSettings(game="kuhn_poker"), policy.encode, policy.generate, fixed=fixed)
    played = evaluate_vs(runner, "policy:rival", 8, seed=3)
    assert played.returns == [1.0] * 8 and all(played.wins) and rival.calls


def test_two_policies_with_different_tokenizers_and_chat_templates_play_one_game(
        tmp_path: Path, warm_model_dir: Path) -> None:
    """The fixed opponent is a tiny Leduc model, its BPE tokenizer trained on other text, with a chat template of its
    own: each seat's prompts are encoded by its own tokenizer in its own template, and each engine reads them."""
    from transformers import AutoTokenizer

    from strat.algorithm.reasoning import build_messages
    from strat.engines import build_engine
    from strat.model import tiny as tiny_model

    other = tiny_model.build("leduc_poker", tmp_path / "other", seed=2)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.chat_template = ("{% for m in messages %}<<{{ m.role }}>> {{ m.content }}\n{% endfor %}"
                               "{% if add_generation_prompt %}<<assistant>> {% endif %}")
    tokenizer.save_pretrained(other)
    main, rival = build_engine("hf", warm_model_dir), build_engine("hf", other)
    assert main.tokenizer.get_vocab() != rival.tokenizer.get_vocab()
    settings = RolloutSettings(game="kuhn_poker", depth=2, group_size=2, max_tokens=16,
                               opponents=(OpponentConfig(kind="policy", name="rival"),))
    runner = RolloutRunner(settings, main.encode_chat, main.generate,
                           fixed={"rival": LLMPlayer(settings, rival.encode_chat, rival.generate)})
    plans = [GroupPlan(f"g{i}", seed=10 + i, opponent=settings.opponents[0], ego_seat=i) for i in range(2)]
    seen = set()
    for episode in runner.run(plans, sampling_seed=1):
        replay = games.make("kuhn_poker")
        replay.reset(seed=episode.seed)
        for turn in episode.turns:
            seat = episode.seats[turn.agent]
            engine = main if seat == "policy" else rival
            messages = build_messages(replay, turn.agent, settings.depth)
            assert turn.prompt_token_ids == tuple(engine.encode_chat(messages))
            text = engine.tokenizer.decode(turn.prompt_token_ids)
            assert text.startswith("<<system>>") == (seat == "policy:rival")
            seen.add(seat)
            replay.step(turn.action)
            replay.skip_finished()
    assert seen == {"policy", "policy:rival"}
    main.close()
    rival.close()


def test_a_group_against_an_unknown_fixed_policy_is_an_error() -> None:
    settings = RolloutSettings(game="kuhn_poker", group_size=1, opponents=(OpponentConfig(kind="policy", name="x"),))
    fake = FakeLLM("kuhn_poker", _probs(BET))
    with pytest.raises(ValueError, match="no fixed policy 'x' in this rollout"):
        RolloutRunner(settings, fake.encode, fake.generate).run(
            [GroupPlan("g0", seed=1, opponent=settings.opponents[0], ego_seat=0)], sampling_seed=0)



@pytest.mark.long
def test_training_against_a_fixed_policy(local_ray, tmp_path: Path, warm_model_dir: Path,
                                         other_model_dir: Path, tiny_model_dir: Path) -> None:
    """The trained policy starts from the warm start; the fixed opponent is a random-weight model, which never writes
    a legal move: every one of its turns is invalid, every learning seat's turn comes from the trained policy, the
    transcript names who played each seat, and evaluation plays the fixed policy."""
    from strat.train.trainer import Trainer
    from tests.train.test_ray_training import SMALL

    config = load_config(DEFAULT, [f"model.path={tiny_model_dir}", f"run.output_dir={tmp_path}", *SMALL,
                                   "engine.backend=hf", "schedule.steps=1", "schedule.eval_every=1",
                                   "schedule.checkpoint_every=0", "schedule.max_staleness=0",
                                   *_fixed(other_model_dir)[:1], "game.opponents=[{kind: policy, name: rival}]"])
    records = Trainer(config, config.run_dir).run()
    assert [r["step"] for r in records] == [0, 1] and records[1]["episodes/count"] == 6
    # Evaluated against the fixed policy at every evaluation: its random weights play the fallback's random moves.
    for record in records:
        assert 0.0 <= record["eval/win_rate_vs_policy_rival"] <= 1.0 and "eval/return_vs_policy_rival_ci" in record
    transcript = (config.run_dir / "samples" / "step_1.md").read_text()
    blocks = transcript.split("\n## ")[1:]
    assert blocks
    for game in blocks:
        header, players = game.split("\n")[0], game.split("\n")[2]
        ego = header.split("learning seats: ")[1].rstrip(")")
        rival = next(a for a in ("player_0", "player_1") if a != ego)
        assert players == f"Players: {ego}: policy; {rival}: policy:rival" or \
            players == f"Players: {rival}: policy:rival; {ego}: policy"
        assert f"{rival} plays" in game
        assert all("INVALID" in line for line in game.split("\n") if line.startswith("### turn") and rival in line)


def test_check_names_each_fixed_policy_and_refuses_a_run_without_a_checkpoint(
        tmp_path: Path, warm_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from strat.cli.train import check

    check(DEFAULT, _fixed(warm_model_dir))
    assert f"fixed policy rival: {warm_model_dir.name} ({warm_model_dir}), in this run's format" in \
        capsys.readouterr().err
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"policies\.0\.model=.*the run directory has no complete checkpoint yet"):
        check(DEFAULT, _fixed(run))


def test_a_fixed_policy_whose_prompts_do_not_fit_the_context_is_refused(tmp_path: Path, warm_model_dir: Path) -> None:
    """The fixed policy's prompts are measured in its own tokenizer: a tiny Leduc model's BPE spends more tokens on
    Kuhn's prompts, so a context that holds the trained policy's longest prompt and response can be too short for
    the fixed policy's, and the run is refused before it starts, naming the policy."""
    from transformers import AutoTokenizer

    from strat.model import tiny as tiny_model
    from strat.train.context_check import check_context, longest_prompt, token_counter

    other = tiny_model.build("leduc_poker", tmp_path / "other", seed=2)
    config = _load(*_fixed(other))
    depth, limit = config.reasoning.depth, config.reasoning.max_new_tokens
    own, theirs = (longest_prompt("kuhn_poker", {}, depth, token_counter(AutoTokenizer.from_pretrained(d))).tokens
                   for d in (warm_model_dir, other))
    assert theirs > own
    fits = config.model_copy(update={"engine": config.engine.model_copy(update={"max_model_len": theirs + limit}),
                                     "model": config.model.model_copy(update={"path": str(warm_model_dir)})})
    check_context(fits)
    short = fits.model_copy(update={"engine": fits.engine.model_copy(update={"max_model_len": own + limit})})
    with pytest.raises(ConfigError, match=rf"max_model_len={own + limit}: fixed policy rival's longest kuhn_poker "
                                          rf"prompt \(its tokenizer, reasoning depth {depth}\) has {theirs} tokens"):
        check_context(short)


def test_a_co_trained_policy_whose_prompts_do_not_fit_the_context_is_refused(tmp_path: Path,
                                                                            warm_model_dir: Path) -> None:
    """A co-trained policy's prompts are measured in its own model's tokenizer too (`strat check` and `strat train`
    refuse the run before any model is trained), naming the policy."""
    from transformers import AutoTokenizer

    from strat.model import tiny as tiny_model
    from strat.train.context_check import check_context, longest_prompt, token_counter

    other = tiny_model.build("leduc_poker", tmp_path / "other", seed=2)
    config = _load(*_fixed(other, train="true"), f"model.path={warm_model_dir}")
    depth, limit = config.reasoning.depth, config.reasoning.max_new_tokens
    own, theirs = (longest_prompt("kuhn_poker", {}, depth, token_counter(AutoTokenizer.from_pretrained(d))).tokens
                   for d in (warm_model_dir, other))
    assert theirs > own
    fits = config.model_copy(update={"engine": config.engine.model_copy(update={"max_model_len": theirs + limit})})
    check_context(fits)
    short = fits.model_copy(update={"engine": fits.engine.model_copy(update={"max_model_len": own + limit})})
    with pytest.raises(ConfigError, match=rf"max_model_len={own + limit}: co-trained policy rival's longest kuhn_poker "
                                          rf"prompt \(its tokenizer, reasoning depth {depth}\) has {theirs} tokens"):
        check_context(short)
