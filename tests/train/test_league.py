"""A league of the policy's past snapshots (`{kind: league, size, sampling}`): the bookkeeping (members, PFSP weights
computed by hand, the record of games), the config's refusals, the game loop sending the league's seats to the
snapshot's engine, and a training run that resumes with the league exactly as an uninterrupted run has it."""

from pathlib import Path

import pytest

from strat import metrics
from strat.algorithm.records import Episode
from strat.config import OpponentConfig
from strat.config_loading import load_config
from strat.errors import ConfigError, RunAborted
from strat.play.rollout import LEAGUE_SEAT, GroupPlan, RolloutRunner, RolloutSettings
from strat.train.league import League, Member, keep_paths
from tests.eval.helpers import FakeLLM

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"
BET, PASS = 1, 0


def _episode(ego_return: float, opponent: str = LEAGUE_SEAT) -> Episode:
    return Episode("e", "g", 0, "kuhn_poker", ("player_0", "player_1"), ("player_0",), (),
                   {"player_0": ego_return, "player_1": -ego_return},
                   seats={"player_0": "policy", "player_1": opponent})


# --- the bookkeeping -------------------------------------------------------------------------


def test_the_league_keeps_the_last_size_members() -> None:
    league = League(size=2, sampling="uniform")
    assert league.add(0, "/m/0") == []
    assert league.add(5, "/m/5") == []
    dropped = league.add(10, "/m/10")
    assert [m.step for m in dropped] == [0] and [m.step for m in league.members] == [5, 10]
    with pytest.raises(ValueError, match="already holds"):
        league.add(10, "/m/10b")


def test_uniform_and_pfsp_weights_by_hand() -> None:
    members = [Member(0, "a", wins=3, draws=0, losses=1),   # score (3 + 1) / (4 + 2) = 2/3, weight (1/3)^2 = 1/9
               Member(5, "b", wins=0, draws=2, losses=0),   # score (0 + 1 + 1) / (2 + 2) = 1/2, weight 1/4
               Member(10, "c")]                             # unplayed: 1/2, weight 1/4
    assert League(3, "uniform", [Member(m.step, m.path) for m in members]).weights() == pytest.approx([1 / 3] * 3)
    total = 1 / 9 + 1 / 4 + 1 / 4
    assert League(3, "pfsp", members).weights() == pytest.approx([1 / 9 / total, 1 / 4 / total, 1 / 4 / total])


def test_pfsp_draws_the_member_the_policy_loses_to_most() -> None:
    """Against a member it always beats (20 wins: weight (1/22)^2) and one it always loses to (20 losses: (21/22)^2)
    the draws go about 400:1 to the second."""
    league = League(2, "pfsp", [Member(0, "beaten", wins=20), Member(1, "beats", losses=20)])
    draws = [league.draw(seed).step for seed in range(2000)]
    assert draws.count(1) > 1980
    uniform = League(2, "uniform", [Member(0, "beaten", wins=20), Member(1, "beats", losses=20)])
    assert 900 < [uniform.draw(seed).step for seed in range(2000)].count(1) < 1100
    assert [league.draw(7).step for _ in range(5)] == [league.draw(7).step] * 5  # a seed draws one member


def test_games_against_the_league_are_counted_from_the_learning_seat() -> None:
    league = League(2, "pfsp")
    league.add(0, "/m/0")
    episodes = [_episode(+1.0), _episode(-2.0), _episode(0.0), _episode(+2.0), _episode(+1.0, opponent="policy")]
    assert league.record(0, episodes) == (2, 1, 1)  # the self-play game is not the league's
    member = league.member(0)
    assert (member.wins, member.draws, member.losses) == (2, 1, 1)
    assert member.score == pytest.approx((2 + 0.5 + 1) / (4 + 2))
    # A member pushed out meanwhile is not counted (its step's games still are returned).
    league.add(1, "/m/1")
    league.add(2, "/m/2")
    assert league.record(0, episodes) == (2, 1, 1) and [m.step for m in league.members] == [1, 2]


def test_the_league_round_trips_through_json_and_names_the_paths_to_keep() -> None:
    league = League(3, "pfsp", [Member(0, "/m/0", 1, 2, 3), Member(5, "/m/5")])
    again = League.from_json(league.to_json())
    assert again == league
    older = League(3, "pfsp", [Member(0, "/m/0"), Member(2, "/m/2")])
    assert keep_paths(league, older, None) == {"/m/0", "/m/2", "/m/5"}


# --- the driver's side: members' weights on disk ----------------------------------------------


class _FakeLearner:
    """Writes a member's weights as a file in its directory."""

    def export_weights_dir(self, path: str) -> str:
        Path(path).mkdir(parents=True)
        (Path(path) / "model.safetensors").write_text(path)
        return path

    take_snapshot_dir = export_weights_dir


class _FakeSync:
    def __init__(self) -> None:
        self.loads: list[int] = []

    def load_snapshot(self, path: str, step: int) -> None:
        assert Path(path, "model.safetensors").is_file(), "a member is loaded from its directory"
        self.loads.append(step)


class _FakeFleet:
    def __init__(self) -> None:
        self.learner, self.sync = _FakeLearner(), _FakeSync()

    @staticmethod
    def learner_get(ref: str) -> str:
        return ref


def test_a_member_leaves_the_disk_once_neither_the_league_the_checkpoint_nor_the_engine_holds_it(
        tmp_path: Path) -> None:
    from strat.train.league_opponent import LeagueOpponent

    config = load_config(DEFAULT, ["game.opponents=[{kind: self}, {kind: league, size: 2}]",
                                   f"run.output_dir={tmp_path}"])
    fleet = _FakeFleet()
    league = LeagueOpponent(config, tmp_path / "run", fleet)
    root = tmp_path / "run" / "sync" / "league"

    def on_disk() -> list[str]:
        return sorted(p.name for p in root.iterdir())

    league.start()
    league.prepare(1)
    assert fleet.sync.loads == [0]
    league.add(1)
    league.prepare(2)
    league.prepare(2)  # the engine holds the member drawn already, or loads the other one
    saved = league.state()  # a checkpoint holding members 0 and 1
    league.add(2)  # member 0 leaves the league, but the last checkpoint's league holds it
    assert on_disk() == ["step_0", "step_1", "step_2"]
    league.state()  # the next checkpoint no longer holds member 0
    loaded = fleet.sync.loads[-1]
    assert on_disk() == sorted({"step_1", "step_2", f"step_{loaded}"})
    # The engine's member stays on disk while it holds it (a restarted agent reloads it from there), and goes with
    # the next load of another member.
    league.add(3)
    league.state()
    assert f"step_{loaded}" in on_disk()
    league.prepare(3)  # members 2 and 3 now: another member is loaded
    assert fleet.sync.loads[-1] in (2, 3) and on_disk() == ["step_2", "step_3"]
    league.finish()
    assert on_disk() == ["step_2", "step_3"]
    # A resumed run restores the checkpointed league and refuses one whose members' weights are gone.
    again = LeagueOpponent(config, tmp_path / "run", fleet)
    again.restore(league.state())
    assert [m.step for m in again.league.members] == [2, 3]
    with pytest.raises(RunAborted, match="member weights are missing"):
        again.restore(saved)
    with pytest.raises(RunAborted, match="holds no league"):
        again.restore(None)


def test_a_decay_makes_the_record_a_running_one() -> None:
    """With decay 1/2 a member's record is halved each time it plays again before the new games count: 4 wins, then
    2 losses -> 2 wins and 2 losses, score (2 + 1) / (4 + 2) = 1/2, where the whole history gives (4 + 1) / (6 + 2)
    = 5/8; a third step of 1 draw -> 1 win, 1 draw, 1 loss, score (1 + 1/2 + 1) / (3 + 2) = 1/2."""
    running, whole = League(2, "pfsp", decay=0.5), League(2, "pfsp")
    for league in (running, whole):
        league.add(0, "/m/0")
        league.record(0, [_episode(1.0)] * 4)
        assert league.record(0, [_episode(-1.0)] * 2) == (0, 0, 2)
    member = running.members[0]
    assert (member.wins, member.losses, member.score) == (2, 2, pytest.approx(1 / 2))
    assert whole.members[0].score == pytest.approx(5 / 8)
    running.record(0, [_episode(0.0)])
    member = running.members[0]
    assert (member.wins, member.draws, member.losses, member.score) == (1, 1, 1, pytest.approx(1 / 2))
    # The decay is checkpointed; a league saved before it existed loads with decay 1.
    assert League.from_json(running.to_json()) == running
    old = {key: value for key, value in whole.to_json().items() if key != "decay"}
    assert League.from_json(old).decay == 1.0
    with pytest.raises(ValueError, match="decay"):
        League(2, "pfsp", decay=0.0)


# --- the config ------------------------------------------------------------------------------


def test_a_league_is_configured() -> None:
    config = load_config(DEFAULT, ["game.opponents=[{kind: self}, {kind: league, size: 3, sampling: pfsp}]"])
    league = config.game.opponents[1]
    assert (league.league_size, league.league_sampling) == (3, "pfsp")
    assert (OpponentConfig(kind="league").league_size, OpponentConfig(kind="league").league_sampling) == (5, "uniform")
    assert OpponentConfig(kind="league").league_decay == 1.0
    decayed = load_config(DEFAULT, ["game.opponents=[{kind: self}, {kind: league, sampling: pfsp, decay: 0.5}]"])
    assert decayed.game.opponents[1].league_decay == 0.5


@pytest.mark.parametrize(("opponents", "message"), [
    ("[{kind: league}, {kind: league}]", "game.opponents.1: a second league"),
    ("[{kind: self}, {kind: league}, {kind: snapshot}]", "game.opponents.2: a snapshot opponent beside a league"),
    ("[{kind: self, size: 3}]", "size and sampling are only for kind=league"),
    ("[{kind: snapshot, decay: 0.5}]", "decay is only for kind=league or kind=exploiter"),
    ("[{kind: league, decay: 0}]", "decay"),
    ("[{kind: league, decay: 1.5}]", "decay"),
    ("[{kind: league, size: 0}]", "size"),
    ("[{kind: league, sampling: best}]", "'uniform' or 'pfsp'"),
])
def test_bad_league_configs_are_refused_in_one_line(opponents: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        load_config(DEFAULT, [f"game.opponents={opponents}"])
    assert "\n" not in str(err.value)


# --- the game loop ---------------------------------------------------------------------------


def test_the_league_seats_play_on_the_snapshot_engine() -> None:
    """The policy always bets, the snapshot's engine (holding the step's member) always passes: every league turn is
    the snapshot engine's, the seats say `league`, and self-play games in the same rollout stay on the policy's."""
    league, self_play = OpponentConfig(kind="league"), OpponentConfig(kind="self")
    settings = RolloutSettings(game="kuhn_poker", group_size=2, opponents=(league, self_play))
    policy = FakeLLM("kuhn_poker", lambda env, agent: {BET: 1.0})
    member = FakeLLM("kuhn_poker", lambda env, agent: {PASS: 1.0})
    member.prompts = policy.prompts  # one tokenizer: the snapshot's engine reads the policy's encoded prompts
    runner = RolloutRunner(settings, policy.encode, policy.generate, snapshot=member.generate)
    plans = [GroupPlan("g0", 1, league, 0), GroupPlan("g1", 2, league, 1), GroupPlan("g2", 3, self_play, 0)]
    episodes = runner.run(plans, sampling_seed=5)
    assert member.calls
    for episode in episodes:
        against_league = episode.group_id != "g2"
        if against_league:
            (ego,) = episode.ego_agents
            assert episode.seats == {a: "policy" if a == ego else LEAGUE_SEAT for a in episode.agents}
        for turn in episode.turns:
            league_turn = against_league and turn.agent not in episode.ego_agents
            assert turn.action == (PASS if league_turn else BET)


# --- a training run --------------------------------------------------------------------------



@pytest.mark.long
def test_a_resumed_run_has_the_league_of_an_uninterrupted_one(local_ray, tmp_path: Path,
                                                               warm_model_dir: Path) -> None:
    """Two members, one more every step, drawn by PFSP: stopped after step 2 and resumed, the run draws the same
    members, counts the same games and logs the same figures as the run that was never stopped; at the end only the
    league's members' weights are left on disk."""
    from tests.train.test_ray_training import _comparable, straight_and_resumed

    extra = ["game.opponents=[{kind: self, weight: 1}, {kind: league, size: 2, sampling: pfsp, weight: 3}]",
             "schedule.snapshot_every=1"]
    straight_dir, resumed_dir = straight_and_resumed(tmp_path, warm_model_dir, extra, stop=2, steps=3)

    a, b = metrics.read(straight_dir), metrics.read(resumed_dir)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3]
    # Members join after each step's update: step 1 plays the initial policy, step 2 one of steps 0-1, and so on.
    assert a[0]["league/member_step"] == 0.0 and a[1]["league/member_step"] in (0.0, 1.0)
    assert a[2]["league/member_step"] in (1.0, 2.0) and [r["league/members"] for r in a] == [1.0, 2.0, 2.0]
    assert sum(r["league/games"] for r in a) > 0
    assert any(r.get("learn/grad_norm", 0) > 0 for r in a), "the run must learn for this test to mean anything"
    assert _comparable(a) == _comparable(b)
    for run in (straight_dir, resumed_dir):
        assert sorted(p.name for p in (run / "sync" / "league").iterdir()) == ["step_2", "step_3"]
