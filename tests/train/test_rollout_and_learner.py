"""The rollout runner and the learner without Ray: groups, seeds, tokens, masks, log-probs."""

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from strat.algorithm.advantage import AdvantageConfig, compute_advantages
from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.algorithm.losses import LossConfig
from strat.algorithm.records import TrainBatch, TrainSample
from strat.config import OpponentConfig
from strat.engines import build_engine
from strat.engines.base import Generation, SamplingParams
from strat.play.rollout import RolloutRunner, RolloutSettings, derive_seed, evaluate_vs, plan_groups
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.sequences import sequence_forward, sequence_logprobs, sequence_logprobs_and_entropy

SETTINGS = RolloutSettings(game="kuhn_poker", depth=2, group_size=3, max_tokens=24, format_penalty=-3.0)


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path):
    built = build_engine("hf", tiny_model_dir)
    yield built
    built.close()


def _runner(engine, **changes) -> RolloutRunner:
    settings = replace(SETTINGS, **changes)
    return RolloutRunner(settings, engine.encode_chat, engine.generate, snapshot=engine.generate)


def test_groups_share_a_deal_and_seeds_reproduce(engine) -> None:
    runner = _runner(engine, opponents=(OpponentConfig(kind="self"),))
    plans = plan_groups(runner.settings, run_seed=7, step=1, worker=0, num_groups=3)
    episodes = runner.run(plans, sampling_seed=11)
    assert len(episodes) == 9
    for plan in plans:
        members = [e for e in episodes if e.group_id == plan.group_id]
        assert len(members) == 3
        assert len({tuple(sorted(e.private_info.items())) for e in members}) == 1
        assert {e.seed for e in members} == {plan.seed}
    again = runner.run(plan_groups(runner.settings, 7, 1, 0, 3), sampling_seed=11)
    assert [[t.response_token_ids for t in e.turns] for e in again] == [[t.response_token_ids for t in e.turns] for e in episodes]
    assert derive_seed(7, 1, 0) != derive_seed(7, 2, 0)


def test_turn_records_and_penalties(engine) -> None:
    runner = _runner(engine, opponents=(OpponentConfig(kind="scripted", name="random"),))
    episodes = runner.run(plan_groups(runner.settings, 0, 0, 0, 4), sampling_seed=3)
    for episode in episodes:
        assert len(episode.ego_agents) == 1
        ego = episode.ego_agents[0]
        for turn in episode.turns:
            assert turn.choices == 2  # Kuhn poker: pass or bet at every decision, for the LLM and the scripted seat
            if turn.agent == ego:
                assert turn.response is not None
                assert len(turn.response_token_ids) == len(turn.behaviour_logprobs) > 0
                assert turn.prompt_token_ids
                assert turn.valid or (turn.fallback_used and turn.penalty == -3.0)
            else:
                assert turn.response is None and not turn.response_token_ids
        # A random-weight model writes no valid action: every ego turn is a penalised fallback.
        assert episode.outcome(ego) == -3.0
    assert {e.ego_agents[0] for e in episodes} == {"player_0", "player_1"}


def test_only_ego_turns_become_samples(engine) -> None:
    runner = _runner(engine, opponents=(OpponentConfig(kind="snapshot"),))
    episodes = runner.run(plan_groups(runner.settings, 0, 0, 0, 2), sampling_seed=5)
    snapshot_turns = [t for e in episodes for t in e.turns if t.agent not in e.ego_agents]
    assert snapshot_turns and all(t.response_token_ids for t in snapshot_turns)  # the snapshot is an LLM too
    scored = score_episodes(episodes, ComparisonWeights())
    samples, _ = compute_advantages(scored, AdvantageConfig(mode="outcome"))
    ego_keys = {(e.episode_id, t.turn_index) for e in episodes for t in e.turns if t.agent in e.ego_agents}
    assert {(s.episode_id, s.turn_index) for s in samples} == ego_keys


def test_learner_logprobs_equal_engine_logprobs(engine, tiny_model_dir: Path) -> None:
    runner = _runner(engine, opponents=(OpponentConfig(kind="self"),), temperature=0.8)
    episodes = runner.run(plan_groups(runner.settings, 0, 0, 0, 2), sampling_seed=9)
    samples, _ = compute_advantages(score_episodes(episodes, ComparisonWeights()), AdvantageConfig(mode="outcome"))
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(temperature=0.8))
    batch = TrainBatch.collate(samples, learner.pad_id)
    with torch.no_grad():
        learner.model.eval()
        ours = sequence_logprobs(learner.model, batch, 0.8)
    gap = (ours - batch.behaviour_logprobs)[batch.response_mask].abs().max().item()
    assert gap < 1e-4, gap


def test_prompt_and_padding_positions_get_no_gradient(engine, tiny_model_dir: Path) -> None:
    runner = _runner(engine, opponents=(OpponentConfig(kind="self"),))
    episodes = runner.run(plan_groups(runner.settings, 0, 0, 0, 1), sampling_seed=2)
    samples, _ = compute_advantages(score_episodes(episodes, ComparisonWeights()), AdvantageConfig(mode="outcome"))
    samples = [replace(s, advantage=1.0 + i) for i, s in enumerate(samples)]
    learner = PolicyLearner(tiny_model_dir, LearnerSettings())
    batch = TrainBatch.collate(samples, learner.pad_id)
    captured = {}

    def keep_hidden(module, args, output):
        output.retain_grad()
        captured["hidden"] = output

    # The final norm's output at position p feeds only the logits at p: its gradient shows which
    # positions the loss reads.
    handle = learner.model.model.norm.register_forward_hook(keep_hidden)
    logprobs = sequence_logprobs(learner.model, batch, 1.0)
    handle.remove()
    loss = -(logprobs * batch.advantages[:, None])[batch.response_mask].sum()
    loss.backward()
    grad = captured["hidden"].grad.abs().sum(-1)  # [B, P + R]
    prompt_len = batch.prompt_ids.shape[1]
    # Position p predicts token p + 1: only positions that predict a response token may get gradient.
    predicts_response = torch.zeros_like(batch.attention_mask)
    predicts_response[:, prompt_len - 1 : -1] = batch.response_mask
    assert torch.all(grad[~predicts_response] == 0)
    assert torch.all(grad[predicts_response] > 0)


@pytest.mark.parametrize(("minibatches", "epochs"), [(1, 1), (2, 1), (1, 2)])
def test_update_moves_the_policy_toward_positive_advantage(engine, tiny_model_dir: Path, minibatches: int,
                                                           epochs: int) -> None:
    runner = _runner(engine, opponents=(OpponentConfig(kind="self"),))
    episodes = runner.run(plan_groups(runner.settings, 0, 0, 0, 1), sampling_seed=4)
    samples, _ = compute_advantages(score_episodes(episodes, ComparisonWeights()), AdvantageConfig(mode="outcome"))
    good, bad = replace(samples[0], advantage=1.0), replace(samples[1], advantage=-1.0)
    settings = LearnerSettings(lr=1e-2, micro_batch=1, minibatches=minibatches, epochs=epochs)
    learner = PolicyLearner(tiny_model_dir, settings)
    batch = TrainBatch.collate([good, bad], learner.pad_id)
    with torch.no_grad():
        before = sequence_logprobs(learner.model.eval(), batch, 1.0).sum(-1)
    metrics = learner.update([good, bad])
    with torch.no_grad():
        after = sequence_logprobs(learner.model.eval(), batch, 1.0).sum(-1)
    assert after[0] > before[0] and after[1] < before[1]
    # With two steps the second one's proximal log-probs are those of the weights before the update.
    assert metrics["logprob/engine_learner_gap"] < 1e-4
    assert metrics["learn/skipped_minibatches"] == 0
    assert {int(state["step"]) for state in learner.optimizer.state.values()} == {minibatches * epochs}


def test_minibatches_partition_the_batch_reproducibly(tiny_model_dir: Path) -> None:
    samples = [TrainSample(f"g{i}", f"e{i}", "player_0", 0, (1, 2), (3, 4), (0.0, 0.0), 0.0) for i in range(7)]
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(minibatches=3, seed=5))
    parts = learner.minibatches(samples, epoch=0)
    assert sorted(len(part) for part in parts) == [2, 2, 3]
    assert sorted(s.episode_id for part in parts for s in part) == sorted(s.episode_id for s in samples)
    assert parts == PolicyLearner(tiny_model_dir, LearnerSettings(minibatches=3, seed=5)).minibatches(samples, 0)
    assert parts != learner.minibatches(samples, epoch=1)  # reshuffled every pass
    assert sorted(len(part) for part in learner.minibatches(samples[:2], epoch=0)) == [1, 1]  # no empty step
    assert PolicyLearner(tiny_model_dir, LearnerSettings()).minibatches(samples, 0) == [samples]


def test_entropy_bonus_alone_makes_the_policy_less_certain(engine, tiny_model_dir: Path) -> None:
    runner = _runner(engine, opponents=(OpponentConfig(kind="self"),))
    episodes = runner.run(plan_groups(runner.settings, 0, 0, 0, 1), sampling_seed=4)
    samples, _ = compute_advantages(score_episodes(episodes, ComparisonWeights()), AdvantageConfig(mode="outcome"))
    samples = [replace(sample, advantage=0.0) for sample in samples[:4]]  # no reward signal at all
    learner = PolicyLearner(
        tiny_model_dir, LearnerSettings(lr=1e-2, micro_batch=2, loss=LossConfig(entropy_coef=1.0))
    )
    batch = TrainBatch.collate(samples, learner.pad_id)
    with torch.no_grad():
        _, before = sequence_logprobs_and_entropy(learner.model.eval(), batch, 1.0)
    metrics = learner.update(samples)
    with torch.no_grad():
        _, after = sequence_logprobs_and_entropy(learner.model.eval(), batch, 1.0)
    mask = batch.response_mask
    assert after[mask].mean() > before[mask].mean()
    assert metrics["policy/entropy"] == pytest.approx(float(before[mask].mean()), rel=1e-4)


def test_move_entropy_bonus_acts_where_the_move_is_named(tiny_model_dir: Path, tmp_path: Path) -> None:
    sharpen = PolicyLearner(tiny_model_dir, LearnerSettings(lr=1e-2, micro_batch=2))
    tokenizer = sharpen.tokenizer
    prompt = tuple(tokenizer.encode("You hold the Jack. Your opponent bet."))
    texts = ["<their_view>They will see bet.</their_view>\n<action>bet</action>",
             "<their_view>They will see pass.</their_view>\n<action>pass</action>"]
    samples = []
    for i, text in enumerate(texts):
        response = tuple(tokenizer.encode(text))
        samples.append(TrainSample("g", f"e{i}", "player_0", 0, prompt, response, (0.0,) * len(response), 0.0))
    for _ in range(8):  # make the untrained model fairly sure of these responses first
        sharpen.update([replace(sample, advantage=1.0) for sample in samples])
    sharpen.export_weights_dir(tmp_path / "sharp")
    tokenizer.save_pretrained(tmp_path / "sharp")
    learner = PolicyLearner(
        tmp_path / "sharp",
        LearnerSettings(lr=1e-3, micro_batch=2, loss=LossConfig(move_entropy_coef=1.0), move_names=("pass", "bet")),
    )
    batch = TrainBatch.collate(samples, learner.pad_id)
    choices = learner.move_choices(samples, batch.response_ids.shape[1])
    moves, candidates = choices.mask, choices.candidates
    spaced = {tokenizer.encode(" bet")[0], tokenizer.encode(" pass")[0]}
    plain = {tokenizer.encode("bet")[0], tokenizer.encode("pass")[0]}
    # Both mentions in each response; the candidates are the moves' first tokens spelt as the mention is.
    assert moves.sum(dim=-1).tolist() == [2, 2]
    found = [set(row[m].flatten().tolist()) - {-1} for row, m in zip(candidates, moves)]
    assert found == [spaced | plain, spaced | plain]
    for row, m in zip(candidates, moves):
        first, second = row[m]
        assert set(first.tolist()) - {-1} == spaced and set(second.tolist()) - {-1} == plain
    with torch.no_grad():
        _, _, before = sequence_forward(learner.model.eval(), batch, 1.0, candidates=candidates)
    metrics = learner.update(samples)  # advantages 0: the bonus is the only signal
    with torch.no_grad():
        _, _, after = sequence_forward(learner.model.eval(), batch, 1.0, candidates=candidates)
    assert metrics["policy/move_entropy"] == pytest.approx(float(before[moves].mean()), rel=1e-4)
    assert float(after[moves].mean()) > float(before[moves].mean())
    assert float(after[moves].max()) <= math.log(2) + 1e-6  # a choice between two moves, not the vocabulary
    with pytest.raises(ValueError, match="move names"):
        LearnerSettings(loss=LossConfig(move_entropy_coef=1.0))


def _always_centre(prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
    """A stand-in policy that always names the centre cell (a fallback move once it is taken)."""
    return [Generation(tuple(prompt), (1,), (-0.5,), "<think>Centre.</think><action>b2</action>", "stop")
            for prompt in prompts]


@pytest.mark.parametrize(("game", "zero_sum"), [("tic_tac_toe", True), ("kuhn_poker", True), ("bargaining", False)])
def test_evaluation_counts_draws_in_zero_sum_games(game: str, zero_sum: bool) -> None:
    """A draw is a return equal to the best other player's, counted in zero-sum games only: tic-tac-toe against the
    minimax player ends in a loss (-1) or a draw (0), never a win; Kuhn poker never ties; in bargaining equal values
    are no draw, so none are counted."""
    opponent = "minimax" if game == "tic_tac_toe" else "heuristic"
    runner = RolloutRunner(RolloutSettings(game=game, depth=0, format_penalty=-3.0), lambda messages: [0], _always_centre)
    played = evaluate_vs(runner, opponent, 24, seed=5)
    assert len(played.returns) == len(played.wins) == 24
    if not zero_sum:
        assert played.draws is None
        return
    assert len(played.draws) == 24 and not any(w and d for w, d in zip(played.wins, played.draws))
    if game == "tic_tac_toe":
        assert not any(played.wins) and any(played.draws)
        assert [r == 0.0 for r in played.returns] == played.draws and set(played.returns) <= {-1.0, 0.0}
    else:
        assert not any(played.draws) and [r > 0 for r in played.returns] == played.wins


def test_update_follows_per_token_advantages(tiny_model_dir: Path) -> None:
    """Credit by segment's samples: each token moves by its own advantage, beside a sample whose tokens share one;
    over two minibatches, so that the second step's proximal log-probs are gathered for per-token rows too."""
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=1e-3, micro_batch=1, minibatches=2))
    tokenizer = learner.tokenizer
    prompt = tuple(tokenizer.encode("You hold the Jack. Your opponent bet."))
    response = tuple(tokenizer.encode("<predict>call</predict>\n<action>bet</action>"))
    half = len(response) // 2
    split = TrainSample("g", "e0", "player_0", 0, prompt, response, (0.0,) * len(response), 0.0,
                        token_advantages=(1.0,) * half + (-1.0,) * (len(response) - half))
    plain = TrainSample("g", "e1", "player_0", 0, prompt, response[:3], (0.0,) * 3, 1.0)
    batch = TrainBatch.collate([split, plain], learner.pad_id)
    assert batch.advantages.shape == (2, len(response))
    with torch.no_grad():
        before = sequence_logprobs(learner.model.eval(), batch, 1.0)
    metrics = learner.update([split, plain])
    with torch.no_grad():
        after = sequence_logprobs(learner.model.eval(), batch, 1.0)
    assert after[0, :half].sum() > before[0, :half].sum() and after[0, half:].sum() < before[0, half:].sum()
    assert after[1, :3].sum() > before[1, :3].sum()
    assert metrics["learn/skipped_minibatches"] == 0
