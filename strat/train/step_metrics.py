"""A training step's figures from its scored episodes and its advantages: reward, format validity, the CoT
comparison's scores (and, on score targets, their variance and correlation with the outcome), the advantage
diagnostics. The trainer logs them for the first policy, `strat.train.cotrained` for each co-trained one."""

from __future__ import annotations

from strat.algorithm.advantage import AdvantageStats, correlation
from strat.algorithm.records import ScoredEpisode
from strat.algorithm.targets import SCRIPTED, TargetSettings


def opponent_label(seat: str) -> str:
    """A metric's name for the player in an opponent seat (`Episode.seats`): a scripted player's own name
    (`random`, `exploiter`), `snapshot`, `league`, or `policy_<name>` for another policy of the job."""
    return seat.removeprefix(SCRIPTED).replace(":", "_")


def episode_metrics(scored: list[ScoredEpisode], targets: TargetSettings | None = None) -> dict[str, float]:
    """Reward, format validity and CoT figures of a step's ego turns; the reward against each kind of opponent
    (`reward/vs_<opponent>`, self-play left out: against an exploiter it is minus the policy's exploitability as
    far as the exploiter's estimate of the policy goes). Where score targets were estimated: the share
    of components scored on them (`cot/target_coverage`), and the process score's variance and correlation with the
    turn's outcome against the sampled truth and against the targets, on the same turns."""
    targets = targets or TargetSettings()
    ego_returns, valid, misstated, truncated, llm_turns, tokens = [], 0, 0, 0, 0, 0
    scores, predicts, beliefs, gaps = [], [], [], []
    on_target = eligible = 0
    paired: list[tuple[float, float, float]] = []
    by_opponent: dict[str, list[float]] = {}
    for item in scored:
        episode = item.episode
        ego_returns.extend(episode.outcome(agent) for agent in episode.ego_agents)
        others = {episode.seats.get(agent, "") for agent in episode.agents if agent not in episode.ego_agents}
        if len(others) == 1 and (other := others.pop()):
            by_opponent.setdefault(opponent_label(other), []).extend(
                episode.outcome(agent) for agent in episode.ego_agents)
        for turn in episode.turns:
            if turn.agent in episode.ego_agents and turn.response is not None:
                llm_turns += 1
                valid += int(turn.valid and turn.response.format_valid)
                misstated += int(turn.misstated)
                truncated += int(turn.truncated)
                tokens += len(turn.response_token_ids)
        for score in item.scores:
            if score.comparable:
                scores.append(score.score)
            if score.predict is not None:
                predicts.append(score.predict)
                eligible += int(targets.prediction == "policy")
            if score.belief is not None:
                beliefs.append(score.belief)
                eligible += int(targets.belief == "posterior")
            if score.belief_gap is not None:
                gaps.append(score.belief_gap)
            on_target += score.on_target
            if score.comparable and score.sampled_score is not None and score.target_score is not None:
                paired.append((score.sampled_score, score.target_score, episode.outcome(score.agent)))

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    def variance(values: list[float]) -> float | None:
        centre = mean(values)
        return None if centre is None else sum((v - centre) ** 2 for v in values) / len(values)

    record = {
        "episodes/count": float(len(scored)),
        "reward/mean": mean(ego_returns),
        "format/valid_rate": valid / llm_turns if llm_turns else None,
        "format/misstated_rate": misstated / llm_turns if llm_turns else None,
        "format/truncated_rate": truncated / llm_turns if llm_turns else None,
        "cot/score_mean": mean(scores),
        "cot/predict_acc": mean(predicts),
        "cot/belief_acc": mean(beliefs),
        "gen/tokens": float(tokens),
    }
    for label, returns in sorted(by_opponent.items()):
        record[f"reward/vs_{label}"] = mean(returns)
    if eligible:
        record["cot/target_coverage"] = on_target / eligible
    if paired:
        sampled, target, outcome = (list(column) for column in zip(*paired, strict=True))
        record.update({
            "cot/score_var_sampled": variance(sampled),
            "cot/score_var_target": variance(target),
            "cot/outcome_corr_sampled": correlation(sampled, outcome),
            "cot/outcome_corr_target": correlation(target, outcome),
        })
    if gaps:
        record["cot/belief_gap"] = mean(gaps)
    return record


def advantage_metrics(stats: AdvantageStats) -> dict[str, float | None]:
    return {
        "groups/count": float(stats.groups),
        "groups/zero_spread_frac": stats.zero_spread_groups / stats.groups if stats.groups else 0.0,
        "groups/zero_signal_frac": stats.zero_signal_groups / stats.groups if stats.groups else 0.0,
        "groups/dropped": float(stats.dropped_groups),
        "adv/process_outcome_corr": stats.process_outcome_corr,
        # Credit by segment only: how much of the responses the reasoning scores land on, and how many turns had
        # no section spans (they keep the response's advantage).
        **({} if stats.segment_tokens_frac is None and not stats.unspanned_turns else {
            "adv/segment_tokens_frac": stats.segment_tokens_frac,
            "adv/unspanned_turns_frac": stats.unspanned_turns / stats.turns if stats.turns else 0.0,
        }),
        # The history baseline only: the share of turns alone at their history, which keep the group's term.
        **({} if stats.history_alone_turns is None else {
            "adv/history_alone_frac": stats.history_alone_turns / stats.turns if stats.turns else 0.0,
        }),
    }
