"""Co-trained policies (`policies: [{name, model, train: true}]`): the config, each policy's view of a game from its
own seats, and a training run of two policies: their weights stay apart (each agent holds exactly its own learner's
weights, checked by fingerprints), and a run stopped and resumed equals the run never stopped, for both policies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from safetensors.torch import load_file

from strat import metrics
from strat.algorithm.records import Episode, Turn
from strat.config import cotrained_policy_names, fixed_policy_names, policy_agent_names, policy_config
from strat.config_loading import load_config
from strat.sync.fingerprint import fingerprint
from strat.train.cotrained import prefixed, seated_view

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"
TWO = ROOT / "configs" / "kuhn_poker_two_policies_tiny.yaml"


def test_the_two_policy_config_names_a_distinct_co_trained_model() -> None:
    config = load_config(TWO)
    (small,) = config.policies
    assert small.train and small.model == "tiny:kuhn_poker" and small.tiny.hidden_size == 64
    assert config.model.tiny.hidden_size != small.tiny.hidden_size
    assert cotrained_policy_names(config) == policy_agent_names(config) == ["small"] and not fixed_policy_names(config)
    own = policy_config(config, "small")
    assert own.model.path == "tiny:kuhn_poker" and own.model.tiny == small.tiny
    assert own.warm_start == config.warm_start and own.game == config.game


def test_a_co_trained_policy_may_set_its_own_learning_rate() -> None:
    config = load_config(TWO, ["policies=[{name: small, model: 'tiny:kuhn_poker', lr: 0.001}]"])
    assert config.policies[0].train and config.policies[0].lr == 0.001
    assert policy_config(config, "small").algorithm.lr == 0.001 and config.algorithm.lr != 0.001


ANCHORED = ("algorithm.kl_type=forward", "algorithm.kl_coef=0.2", "algorithm.kl_reference=snapshot")
"""The default config's KL anchor (the two-policy config trains without one)."""


def _with_algorithm(settings: str, *overrides: str):  # noqa: ANN202
    return load_config(TWO, [f"policies=[{{name: small, model: 'tiny:kuhn_poker', algorithm: {settings}}}]",
                             *ANCHORED, *overrides])


def test_a_co_trained_policy_may_set_its_own_advantage_credit_and_kl() -> None:
    """The keys it sets replace the run's in the config it trains under (its learner's loss and KL, its
    advantages); the keys it leaves unset are the run's."""
    from strat.train.settings import advantage_config, learner_settings

    config = _with_algorithm("{advantage_mode: hybrid, lam: 0.25, credit: segment, kl_type: reverse}",
                             "algorithm.advantage_mode=outcome")
    own = policy_config(config, "small").algorithm
    assert (own.advantage_mode, own.lam, own.credit, own.kl_type) == ("hybrid", 0.25, "segment", "reverse")
    assert (own.kl_coef, own.kl_reference, own.lr) == (config.algorithm.kl_coef, "snapshot", config.algorithm.lr)
    assert (config.algorithm.advantage_mode, config.algorithm.kl_type) == ("outcome", "forward")
    settings = learner_settings(policy_config(config, "small"))
    assert (settings.loss.kl_type, settings.loss.kl_coef) == ("reverse", config.algorithm.kl_coef)
    assert learner_settings(config).loss.kl_type == "forward"
    assert advantage_config(policy_config(config, "small")).credit == "segment"


def test_a_co_trained_policy_may_train_its_own_adapters() -> None:
    """Its `lora` replaces the run's `learner.lora` in its learner's settings (the run trains the full model)."""
    from strat.train.settings import learner_settings

    config = load_config(TWO, ["policies=[{name: small, model: 'tiny:kuhn_poker', lora: {enabled: true, r: 4}}]"])
    own = learner_settings(policy_config(config, "small")).lora
    assert own is not None and (own.r, own.alpha) == (4, 32.0)
    assert learner_settings(config).lora is None
    assert policy_config(config, "small").learner.device == config.learner.device


@pytest.mark.parametrize(("policy", "message"), [
    ("{name: small, model: 'tiny:kuhn_poker', algorithm: {kl_type: none}}",
     r"policies.0.algorithm \(small\), merged onto the run's algorithm: kl_coef > 0 needs kl_type forward or reverse"),
    ("{name: small, model: 'tiny:kuhn_poker', algorithm: {advantage_mode: best}}",
     r"unknown advantage estimator 'best'"),
    ("{name: small, model: 'tiny:kuhn_poker', algorithm: {group_size: 4}}", r"group_size"),
])
def test_a_co_trained_policy_s_bad_algorithm_settings_are_refused_in_one_line(policy: str, message: str) -> None:
    """Merged settings that contradict each other, an unknown estimator, and a shared key (the groups are the
    run's) are refused naming the key."""
    from strat.errors import ConfigError

    with pytest.raises(ConfigError, match=message) as caught:
        load_config(TWO, [f"policies=[{policy}]", *ANCHORED])
    assert "\n" not in str(caught.value).strip()


def test_a_fixed_policy_has_no_algorithm_or_learner_settings(tmp_path: Path) -> None:
    from strat.errors import ConfigError

    with pytest.raises(ConfigError, match=r"only a co-trained policy \(train: true\) has algorithm settings"):
        load_config(TWO, [f"policies=[{{name: small, model: {tmp_path}, train: false, algorithm: {{lam: 1.0}}}}]"])
    with pytest.raises(ConfigError, match=r"lora \(small\): only a co-trained policy \(train: true\) has a learner"):
        load_config(TWO, [f"policies=[{{name: small, model: {tmp_path}, train: false, lora: {{enabled: true}}}}]"])
    with pytest.raises(ConfigError, match=r"resources.gpus_learner \(small\): only a co-trained policy"):
        load_config(TWO, [f"policies=[{{name: small, model: {tmp_path}, train: false,"
                          " resources: {gpus_learner: 1}}]"])


def test_a_co_trained_learner_has_the_ranks_its_resources_ask_for() -> None:
    """One rank by default (even beside a run of two CPU learner ranks); two GPUs give two ranks of one GPU each, two
    CPU ranks two ranks without a GPU; a fractional count above one, and CPU ranks beside learner GPUs, are refused in
    one line naming the policy."""
    from strat.config import policy_actors_config
    from strat.errors import ConfigError

    def ranks(resources: str, *run: str) -> tuple[int, float]:
        policies = f"policies=[{{name: small, model: 'tiny:kuhn_poker', resources: {resources}}}]"
        config = load_config(TWO, [*run, policies])
        own = policy_actors_config(config, "small").resources
        return own.learner_world_size, own.gpus_per_learner_rank

    assert ranks("{}", "resources.learner_ranks=2") == (1, 0.0)
    assert ranks("{gpus_learner: 2}") == (2, 1.0)
    assert ranks("{learner_ranks: 2}") == (2, 0.0)
    with pytest.raises(ConfigError, match=r"^policies.0 \(small\): resources.gpus_learner=2.5: more than one GPU starts"
                                          r" one learner rank per GPU.*\(in the policy's own resources\)$"):
        ranks("{gpus_learner: 2.5}")
    with pytest.raises(ConfigError, match=r"^policies.0 \(small\): resources.learner_ranks=2: only for a learner"
                                          r" without GPUs"):
        ranks("{learner_ranks: 2, gpus_learner: 1}")
    with pytest.raises(ConfigError, match=r"resources.learner_ranks \(small\): only a co-trained policy"):
        load_config(TWO, ["policies=[{name: small, model: /tmp, train: false, resources: {learner_ranks: 2}}]"])


class _Learner:
    """A co-trained policy's learner handle: records what it is asked to do."""

    def __init__(self) -> None:
        self.updates: list[list] = []
        self.refreshed = 0

    def update(self, samples: list) -> dict:
        self.updates.append(samples)
        return {}

    def refresh_anchor(self) -> dict:
        self.refreshed += 1
        return {}


class _Fleet:
    def __init__(self, names: list[str]) -> None:
        self.policy_learners = {name: _Learner() for name in names}

    def policy_learner_get(self, name: str, value: dict) -> dict:
        return value


def _group() -> list[Episode]:
    """Two games of one group: the co-trained policy (player_1's seat) wins the first with a poorly scored response
    and loses the second with a well scored one."""
    from tests.algorithm.helpers import episode, turn

    out = []
    for index, (won, score) in enumerate(((2.0, 0.2), (-2.0, 0.6))):
        game = episode(f"e{index}", "g", [turn("player_0", 0), turn("player_1", 1)],
                       {"player_0": -won, "player_1": won})
        out.append(dataclasses.replace(game, seats={"player_0": "policy", "player_1": "policy:small"}))
    return out


def _score(scores: dict[str, float]):  # noqa: ANN202
    from strat.algorithm.records import ScoredEpisode, TurnScore

    def score(views: list[Episode]) -> list[ScoredEpisode]:
        return [ScoredEpisode(v, (TurnScore("player_1", 1, scores[v.episode_id], None, None, scores[v.episode_id],
                                            True),)) for v in views]
    return score


@pytest.mark.parametrize(("settings", "expected"), [
    ("{}", (0.5, -0.5)),                                  # the run's hybrid, lam 0.5: outcome +-1, process -+1
    ("{advantage_mode: outcome}", (1.0, -1.0)),           # its own: the outcome term alone
    ("{lam: 2.0}", (-1.0, 1.0)),                          # its own lam: 1 - 2, -1 + 2
])
def test_a_co_trained_policy_s_advantages_follow_its_own_settings(tmp_path: Path, settings: str,
                                                                  expected: tuple[float, float]) -> None:
    """By hand: returns +2 and -2 normalise to +1 and -1; scores 0.2 and 0.6 to -1 and +1."""
    from strat.train.cotrained import CoTrainedPolicies

    config = _with_algorithm(settings, "algorithm.advantage_mode=hybrid", "algorithm.lam=0.5")
    fleet = _Fleet(["small"])
    policies = CoTrainedPolicies(config, tmp_path, fleet)  # type: ignore[arg-type]
    record = policies.train(_group(), _score({"e0": 0.2, "e1": 0.6}))
    (samples,) = fleet.policy_learners["small"].updates
    assert [s.agent for s in samples] == ["player_1", "player_1"]
    assert [s.advantage for s in samples] == pytest.approx(expected, abs=1e-5)
    # Its figures under its name: its seat's mean return (+2 and -2) and its two games.
    assert record["small/reward/mean"] == pytest.approx(0.0) and record["small/episodes/count"] == 2
    assert all(key.startswith("small/") for key in record)


@pytest.mark.parametrize(("settings", "refreshed"), [("{}", 1), ("{kl_reference: initial}", 0)])
def test_only_a_snapshot_anchored_co_trained_policy_moves_its_anchor(tmp_path: Path, settings: str,
                                                                     refreshed: int) -> None:
    """The run anchors its KL on the snapshot (as the default config does); a policy that anchors on its initial weights
    keeps its anchor at snapshot steps."""
    from strat.train.cotrained import CoTrainedPolicies

    config = _with_algorithm(settings)
    assert config.algorithm.kl_reference == "snapshot"
    fleet = _Fleet(["small"])
    CoTrainedPolicies(config, tmp_path, fleet).refresh_anchor()  # type: ignore[arg-type]
    assert fleet.policy_learners["small"].refreshed == refreshed


def _episode() -> Episode:
    turns = (Turn("e", "player_0", 0, 1, "bet"), Turn("e", "player_1", 1, 1, "call"))
    return Episode("e", "g", 3, "kuhn_poker", ("player_0", "player_1"), ("player_0",), turns,
                   {"player_0": 2.0, "player_1": -2.0}, {"player_0": "K", "player_1": "Q"},
                   seats={"player_0": "policy", "player_1": "policy:small"})


def test_each_policy_learns_from_its_own_seats() -> None:
    episode = _episode()
    view = seated_view(episode, "small")
    assert view is not None and view.ego_agents == ("player_1",) and view.outcome("player_1") == -2.0
    assert view.turns == episode.turns and view.group_id == episode.group_id
    assert seated_view(episode, "other") is None
    assert prefixed("small", {"reward/mean": 1.0}) == {"small/reward/mean": 1.0}


def _weights(checkpoint_dir: Path) -> str:
    """The fingerprint of a checkpoint's weights, as an engine holding them reports it."""
    return fingerprint(load_file(checkpoint_dir / "model.safetensors").items())


@pytest.mark.long
def test_two_policies_train_apart_and_resume_exactly(local_ray, tmp_path: Path, warm_model_dir: Path) -> None:
    """The first policy and `rival` (both from the warm-started model, rival with another learning rate and its own
    KL estimator, reverse against the run's forward) play every
    game against each other. After each step each agent holds exactly its own learner's weights, never the other's;
    a run stopped after step 2 and resumed logs what the run never stopped logs, for both policies."""
    import ray

    from strat.train.trainer import Trainer
    from tests.train.test_ray_training import SMALL, _comparable

    common = [f"model.path={warm_model_dir}", *SMALL, "engine.backend=hf", "schedule.max_staleness=0",
              "schedule.checkpoint_every=1", "schedule.eval_every=0", "warm_start.enabled=false",
              f"policies=[{{name: rival, model: {warm_model_dir}, train: true, lr: 0.01,"
              " algorithm: {kl_type: reverse}}]",
              "game.opponents=[{kind: policy, name: rival}]", "algorithm.lr=0.003", "algorithm.groups_per_step=4",
              "reasoning.max_new_tokens=160", "resources.cpus_per_agent=0.25"]
    held: list[tuple[int, str, str, str, str]] = []

    def fingerprints(trainer: Trainer):
        """After each step: what each agent holds, and what the step's checkpoint of each policy holds (read now:
        older checkpoints are pruned)."""
        def on_step(record: dict) -> None:
            step, fleet, run = int(record["step"]), trainer.fleet, trainer.run_dir
            held.append((step, ray.get(fleet.agents[0].weights.remote()).fingerprint,
                         ray.get(fleet.fixed["rival"].weights.remote()).fingerprint,
                         _weights(run / "checkpoints" / f"step_{step}"),
                         _weights(run / "policies" / "rival" / "checkpoints" / f"step_{step}")))
        return on_step

    straight = load_config(DEFAULT, [*common, f"run.output_dir={tmp_path / 'a'}", "schedule.steps=3"])
    trainer = Trainer(straight, straight.run_dir)
    trainer.run(fingerprints(trainer))
    run = straight.run_dir
    assert [step for step, *_ in held] == [1, 2, 3]
    for _, own, rival, own_saved, rival_saved in held:
        assert (own, rival) == (own_saved, rival_saved) and own != rival
    assert len({rival for _, _, rival, _, _ in held}) == 3, "the rival's engine must follow its own updates"

    a = metrics.read(run)
    assert all(r["rival/learn/samples"] > 0 and r["learn/samples"] > 0 for r in a)
    assert any(r.get("rival/learn/grad_norm", 0) > 0 for r in a)
    assert all(abs(r["rival/logprob/engine_learner_gap"]) < 1e-4 for r in a), "the rival plays its learner's weights"

    first = load_config(DEFAULT, [*common, f"run.output_dir={tmp_path / 'b'}", "schedule.steps=2"])
    Trainer(first, first.run_dir).run()
    resumed = load_config(first.run_dir / "config.yaml", ["schedule.steps=3"])
    Trainer(resumed, first.run_dir, resume=True).run()
    b = metrics.read(first.run_dir)
    assert [r["step"] for r in b] == [1, 2, 3]
    assert _comparable(a) == _comparable(b)
    assert _weights(first.run_dir / "policies" / "rival" / "checkpoints" / "step_3") == held[-1][2]


def test_the_plan_shows_each_co_trained_policy_s_agent_and_learner() -> None:
    """`strat plan`'s rows: the co-trained policy's engine in the agents group and its learner in the learner group,
    each named by the policy; two engines and two learners fit the 2 cores the config is sized for."""
    from strat.cluster.placement import parse_cluster, plan

    result = plan(load_config(TWO), parse_cluster("nodes=1,gpus_per_node=0,cpus_per_node=2"))
    assert [a.name for a in result.actors] == ["agent[0]", "cotrained[small]", "rollout_worker[0]", "comparator[0]",
                                               "learner[0]", "cotrained_learner[small]"]
    assert sum(a.cpus for a in result.actors) == pytest.approx(2.0)


def test_eval_finds_a_co_trained_policy_by_name(tmp_path: Path) -> None:
    """`strat eval --policy RUN --policy-name NAME` evaluates RUN/policies/NAME (a run directory of its own, with the
    config its run saved there); an unknown name is refused naming the run's co-trained policies."""
    from strat import cli
    from strat.cli.eval import cotrained_policy_dir
    from strat.errors import ConfigError
    from strat.train.cotrained import save_policy_configs

    config = load_config(TWO)
    save_policy_configs(config, tmp_path)
    (tmp_path / "policies" / "small" / "checkpoints").mkdir()
    saved = load_config(tmp_path / "policies" / "small" / "config.yaml")
    assert saved.model.path == "tiny:kuhn_poker" and saved.model.tiny.hidden_size == 64
    assert cotrained_policy_dir(str(tmp_path), "small") == str(tmp_path / "policies" / "small")
    with pytest.raises(ConfigError, match=r"has no co-trained policy of that name \(small\)"):
        cotrained_policy_dir(str(tmp_path), "large")
    # The run's folder has no complete checkpoint yet: refused as any run directory would be, in one line.
    assert cli.main(["eval", "--policy", str(tmp_path), "--policy-name", "small"]) != 0


def test_fixed_seats_put_each_policy_on_its_own_seat_in_every_group() -> None:
    """`game.seats: [small, policy]`: the first policy plays player_1 in every group of every step (unset, its seat
    alternates), and `small` player_0."""
    from strat.play.rollout import plan_groups
    from strat.play.settings import rollout_settings

    fixed = rollout_settings(load_config(TWO, ["game.seats=[small, policy]"]))
    alternating = rollout_settings(load_config(TWO))
    assert fixed.ego_seat == 1 and alternating.ego_seat is None
    for step in (1, 2, 3):
        assert {plan.ego_seat for plan in plan_groups(fixed, 0, step, 0, 4)} == {1}
        assert {plan.ego_seat for plan in plan_groups(alternating, 0, step, 0, 4)} == {0, 1}
    assert {plan.ego_seat for plan in plan_groups(fixed, 0, 1, 0, 4, resample_round=1)} == {1}


@pytest.mark.parametrize(("seats", "message"), [
    ("[policy]", "kuhn_poker has 2 seats, one entry each"),
    ("[small, small]", "name the first policy (`policy`) at exactly one seat"),
    ("[policy, other]", "the other seats are one other policy of the job"),
])
def test_bad_seat_maps_are_refused_in_one_line(seats: str, message: str) -> None:
    from strat.errors import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(TWO, [f"game.seats={seats}"])
    # Seats name one policy opponent: not beside self-play.
    with pytest.raises(ConfigError, match="the only entry of game.opponents"):
        load_config(TWO, ["game.seats=[policy, small]",
                          "game.opponents=[{kind: self}, {kind: policy, name: small}]"])


def test_the_progress_bar_shows_each_co_trained_policy_s_reward(capsys: pytest.CaptureFixture[str]) -> None:
    from strat.cli.progress import TrainProgress

    with TrainProgress() as progress:
        progress.update({"step": 1, "reward/mean": 0.25, "small/reward/mean": -0.5, "small/learn/samples": 9.0})
    assert "small/reward -0.500" in capsys.readouterr().err


def test_a_resume_without_a_co_trained_policy_s_checkpoint_is_refused(tmp_path: Path) -> None:
    """The run's checkpoint of a step implies one per co-trained policy (written first); where one is missing the
    resume stops in one line, before any learner is touched."""
    from strat.errors import RunAborted
    from strat.train.cotrained import CoTrainedPolicies

    class NoFleet:  # restore must refuse before it calls any actor
        def __getattr__(self, name: str):
            raise AssertionError(f"fleet.{name} used")

    policies = CoTrainedPolicies(load_config(TWO), tmp_path, NoFleet())  # type: ignore[arg-type]
    with pytest.raises(RunAborted, match=r"policy small has no complete checkpoint of step 4 at .*policies/small"):
        policies.restore(4)


def test_a_co_trained_policy_s_non_finite_updates_count_toward_stopping_the_run(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`schedule.max_nonfinite_updates` counts the steps in a row where any policy's update skipped optimizer steps:
    the co-trained one's (`small/learn/skipped_minibatches`) as the first policy's; the warning names which."""
    from strat.errors import RunAborted
    from strat.train.trainer import Trainer

    class Fleet:
        @staticmethod
        def resume_hint() -> str:
            return "resume hint"

    trainer = Trainer(load_config(TWO, ["schedule.max_nonfinite_updates=2"]), tmp_path)
    trainer.fleet = Fleet()  # type: ignore[assignment]
    trainer._check_nonfinite({"step": 1, "learn/skipped_minibatches": 0.0, "small/learn/skipped_minibatches": 1.0})
    assert "(small;" in caplog.text
    trainer._check_nonfinite({"step": 2, "learn/skipped_minibatches": 0.0, "small/learn/skipped_minibatches": 0.0})
    trainer._check_nonfinite({"step": 3, "learn/skipped_minibatches": 2.0, "small/learn/skipped_minibatches": 0.0})
    with pytest.raises(RunAborted, match=r"2 updates in a row had a non-finite loss or gradient \(up to step 4"):
        trainer._check_nonfinite({"step": 4, "learn/skipped_minibatches": 0.0, "small/learn/skipped_minibatches": 2.0})


def test_check_names_each_co_trained_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """`strat check` of the two-policy config: its prompts fit in both tokenizers, and stderr names the co-trained
    policy and what it starts from."""
    from strat.cli.train import check

    check(TWO, None)
    err = capsys.readouterr().err
    assert "co-trained policy small: from tiny:kuhn_poker, through the run's stages" in err
    assert "with a learner of its own (the run's algorithm settings)" in err
    check(TWO, ["policies=[{name: small, model: 'tiny:kuhn_poker', lr: 0.001, algorithm: {advantage_mode: hybrid}}]"])
    assert "with a learner of its own (advantage_mode hybrid, lr 0.001)" in capsys.readouterr().err
    check(TWO, ["policies.0.resources.learner_ranks=2"])
    assert "with a learner of its own (the run's algorithm settings; 2 ranks)" in capsys.readouterr().err
