"""Weights & Biases tracking (`logging.wandb`), driver-side: every metrics.jsonl record against the training step, the
resolved config, transcripts as a table, and at the end the learning curves and the before/after table.

wandb is optional (the `wandb` extra) and imported only here, when a run asks for it. The W&B run id is kept in
`<run_dir>/wandb.json` with the last step sent, so that a resume continues the same W&B run and sends no step twice."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import string
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strat.algorithm.records import ScoredEpisode
from strat.config import ExperimentConfig, WandbConfig
from strat.errors import UserError
from strat.train.summary import before_after

log = logging.getLogger("strat.train")

STATE_FILE = "wandb.json"
STEP_METRIC = "train/step"
"""The x-axis of every logged metric: the training step (also W&B's own `_step`)."""
TRANSCRIPT_COLUMNS = ("step", "episode", "turn", "agent", "action", "valid", "cot_score", "return", "prompt",
                      "response")


@dataclass(frozen=True)
class TrackingState:
    """What `<run_dir>/wandb.json` holds: the W&B run id, and the last training step sent to it (-1: none)."""

    run_id: str
    last_step: int = -1


def new_run_id() -> str:
    """A fresh W&B run id: 8 lowercase letters and digits, as wandb makes them."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def read_state(run_dir: Path) -> TrackingState | None:
    path = run_dir / STATE_FILE
    if not path.is_file():
        return None
    return TrackingState(**json.loads(path.read_text()))


def _write_state(run_dir: Path, state: TrackingState) -> None:
    # Written whole, then renamed: a kill mid-write leaves the previous state, never a torn file.
    with tempfile.NamedTemporaryFile("w", dir=run_dir, suffix=".tmp", delete=False) as handle:
        json.dump(dataclasses.asdict(state), handle)
    os.replace(handle.name, run_dir / STATE_FILE)


def transcript_rows(step: int, scored: list[ScoredEpisode]) -> list[list[Any]]:
    """One row per turn of `scored` (columns `TRANSCRIPT_COLUMNS`); a scripted player's turn has no text."""
    rows = []
    for item in scored:
        episode = item.episode
        for turn in episode.turns:
            score = item.score_of(turn.turn_index)
            rows.append([step, episode.episode_id, turn.turn_index, turn.agent, turn.action_name, turn.valid,
                         score.score if score is not None and score.comparable else None,
                         episode.outcome(turn.agent), turn.prompt_text, turn.response_text])
    return rows


class WandbTracker:
    """One Strat run's W&B run. `log` takes metrics.jsonl records; steps up to `state.last_step` were sent by an
    earlier process of this run (before a restart from an older checkpoint) and are not sent again."""

    def __init__(self, settings: WandbConfig, config: ExperimentConfig, run_dir: Path) -> None:
        import wandb  # the optional extra; `load_config` refused the run if it is missing

        self._wandb = wandb
        self.run_dir = run_dir
        saved = read_state(run_dir)
        self.state = saved or TrackingState(new_run_id())
        self._first_new = self.state.last_step + 1
        self._sent_here: int | None = None
        """The last step this process sent, where the closing plots and table go."""
        try:
            self._run = wandb.init(
                project=settings.project, entity=settings.entity, group=settings.group, tags=settings.tags or None,
                name=config.run.name, id=self.state.run_id, resume="allow",
                # wandb's own files go in the run directory unless WANDB_DIR says otherwise.
                dir=None if os.environ.get("WANDB_DIR") else str(run_dir),
                config=config.model_dump(mode="json"),
            )
        except Exception as err:  # noqa: BLE001  (wandb raises many kinds; the user needs one line)
            raise UserError(f"logging.wandb: wandb could not start the run ({err}); log in with `wandb login` or "
                            "WANDB_API_KEY, or set WANDB_MODE=offline and `wandb sync` later") from None
        # A resume may have changed allowed keys (steps, lr, ...): the W&B config follows config.yaml.
        self._run.config.update(config.model_dump(mode="json"), allow_val_change=True)
        self._run.define_metric(STEP_METRIC)
        self._run.define_metric("*", step_metric=STEP_METRIC)
        _write_state(run_dir, self.state)
        if saved is not None and saved.last_step >= 0:
            log.info("wandb: continuing run %s after step %d", self.state.run_id, saved.last_step)

    def _due(self, step: int) -> bool:
        return step >= self._first_new

    def log(self, record: dict[str, Any]) -> None:
        """A metrics.jsonl record (JSON values), at its step; intervals (lists) go in as `<key>/low` and `/high`."""
        step = int(record["step"])
        if not self._due(step):
            return
        values: dict[str, Any] = {STEP_METRIC: step}
        for key, value in record.items():
            if key == "step" or value is None:
                continue
            if isinstance(value, list) and len(value) == 2:
                values[f"{key}/low"], values[f"{key}/high"] = value
            elif isinstance(value, (int, float)):
                values[key] = value
        self._run.log(values, step=step)
        self._sent_here = step
        self.state = dataclasses.replace(self.state, last_step=step)
        _write_state(self.run_dir, self.state)

    def log_transcripts(self, step: int, scored: list[ScoredEpisode]) -> None:
        """The step's sampled games as a table (`samples/transcripts`), one row per turn."""
        if not self._due(step):
            return
        table = self._wandb.Table(columns=list(TRANSCRIPT_COLUMNS), data=transcript_rows(step, scored))
        self._run.log({"samples/transcripts": table}, step=step)

    def close(self, complete: bool = True) -> None:
        """End the W&B run; a run that finished (or stopped on a signal) first gets the learning curves and the
        before/after table over the whole of metrics.jsonl, at the last step this process sent."""
        if complete and self._sent_here is not None:
            with tempfile.TemporaryDirectory() as folder:  # wandb copies the image when it is logged
                self._run.log(self._closing_media(Path(folder)), step=self._sent_here)
        self._run.finish(exit_code=0 if complete else 1)

    def _closing_media(self, folder: Path) -> dict[str, Any]:
        # Imported here: report pulls in the evaluation stack, which a run without W&B never needs.
        from strat.eval.report import LEARNING_CURVES, plot_learning_curves, plots_available
        from strat.metrics import read_for_report

        metrics = read_for_report(self.run_dir)  # the closing media go on past unreadable lines, counted
        if metrics.skipped:
            log.warning("W&B closing media: %s", metrics.skipped_note())
        records = metrics.records
        summary = before_after(records)
        columns = ["measure", f"before (step {summary.before_step})", f"after (step {summary.after_step})"]
        media: dict[str, Any] = {"eval/before_after": self._wandb.Table(columns=columns, data=list(summary.rows))}
        if plots_available():
            path = plot_learning_curves(records, folder / LEARNING_CURVES, title=self.run_dir.name)
            media["eval/learning_curves"] = self._wandb.Image(str(path))
        return media


def open_tracker(config: ExperimentConfig, run_dir: Path) -> WandbTracker | None:
    """The run's W&B tracker, or None when `logging.wandb` is unset."""
    settings = config.logging.wandb
    return None if settings is None else WandbTracker(settings, config, run_dir)
