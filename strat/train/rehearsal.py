"""DPH-RL rehearsal samples (Diversity-Preserving Hybrid RL, arXiv 2509.07430): turns of the initial policy's
self-play, drawn once at a run's start, stored in the run directory with the initial policy's log-probs, and
reused unchanged on resume.

The learner adds `dph_eta` x D_f over a batch of them to every optimizer step (`losses.rehearsal_loss`), with the
paper's mass-covering f-divergences written on samples y ~ pi_0 (per token, u = pi_theta(y) / pi_0(y)):

- forward KL, KL(pi_0 || pi_theta) = E_{pi_0}[-log u]; its generator on pi_0's samples f(u) = u - log u - 1
  (the added u - 1 has mean 0 under pi_0; it makes every term >= 0 and lowers the variance);
- Jensen-Shannon, JS(pi_theta, pi_0) = 1/2 E_{pi_0}[f(u)] with f(u) = u log u - (u + 1) log((u + 1) / 2).

Both vanish at u = 1 and grow as the policy drops mass from what the initial policy generated: the term pulls
those samples' log-probs back up (mass covering) and leaves mass the policy adds elsewhere alone, unlike the KL
penalty (`kl_type`), which is evaluated on the current policy's samples only: `reverse` is mode seeking, and
`forward` follows KL(ref || pi)'s gradient only where the policy still samples.

Files: `<run_dir>/rehearsal.safetensors` holds the token ids and log-probs; `<run_dir>/rehearsal.json` its
sample count and SHA-256, checked when a resumed run loads it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from strat.algorithm.records import Episode, TrainSample
from strat.errors import ConfigError

SAMPLES_FILE = "rehearsal.safetensors"
RECORD_FILE = "rehearsal.json"
REHEARSAL_ROUNDS = 10
"""Self-play rollouts played at most for the rehearsal samples; a run whose games yield fewer ego turns keeps fewer."""


@dataclass(frozen=True)
class RehearsalRecord:
    """What `rehearsal.json` says about the stored samples."""

    samples: int
    sha256: str
    """Of `rehearsal.safetensors`, as written."""


def episode_samples(episodes: Sequence[Episode], count: int) -> list[TrainSample]:
    """The first `count` ego turns with a response, in the episodes' order, as samples with advantage 0 (their
    behaviour log-probs are the engine's until the learner scores them)."""
    samples = []
    for episode in episodes:
        for turn in episode.turns:
            if turn.agent in episode.ego_agents and turn.response_token_ids:
                samples.append(TrainSample(episode.group_id, episode.episode_id, turn.agent, turn.turn_index,
                                           turn.prompt_token_ids, turn.response_token_ids, turn.behaviour_logprobs,
                                           0.0))
    return samples[:count]


def draw_batch(samples: Sequence[TrainSample], size: int, seed: int, update: int, step: int) -> list[TrainSample]:
    """`size` distinct samples (all when there are fewer), drawn reproducibly for one optimizer step of one update."""
    rng = random.Random(f"rehearsal:{seed}:{update}:{step}")
    return rng.sample(list(samples), min(size, len(samples)))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_rehearsal(run_dir: Path, samples: Sequence[TrainSample]) -> RehearsalRecord:
    """Write the samples (their `behaviour_logprobs` the initial policy's) and their record into `run_dir`."""
    import torch  # start-up cost: the CLI reaches this module through the trainer
    from safetensors.torch import save_file

    def flat(rows: list[tuple[int, ...]] | list[tuple[float, ...]], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([value for row in rows for value in row], dtype=dtype)

    def offsets(rows: list[tuple[int, ...]]) -> torch.Tensor:
        return torch.tensor([0, *itertools.accumulate(len(row) for row in rows)], dtype=torch.long)

    prompts = [s.prompt_token_ids for s in samples]
    responses = [s.response_token_ids for s in samples]
    tensors = {
        "prompt_ids": flat(prompts, torch.long), "prompt_offsets": offsets(prompts),
        "response_ids": flat(responses, torch.long), "response_offsets": offsets(responses),
        "initial_logprobs": flat([s.behaviour_logprobs for s in samples], torch.float32),
    }
    path = run_dir / SAMPLES_FILE
    save_file(tensors, path, metadata={"format": "pt"})
    record = RehearsalRecord(samples=len(samples), sha256=file_sha256(path))
    (run_dir / RECORD_FILE).write_text(json.dumps(asdict(record), indent=1) + "\n")
    return record


def load_rehearsal(run_dir: Path) -> list[TrainSample]:
    """The samples `save_rehearsal` wrote into `run_dir`; a missing or changed file is refused."""
    from safetensors.torch import load_file

    path, record_path = run_dir / SAMPLES_FILE, run_dir / RECORD_FILE
    if not path.is_file() or not record_path.is_file():
        raise ConfigError(f"algorithm.dph_divergence: no rehearsal samples in {run_dir} ({SAMPLES_FILE} and"
                          f" {RECORD_FILE} are drawn at a run's start); this run started without DPH-RL, so it"
                          " cannot be turned on when resuming: start a new run")
    record = RehearsalRecord(**json.loads(record_path.read_text()))
    found = file_sha256(path)
    if found != record.sha256:
        raise ConfigError(f"{path} changed since the run's start (SHA-256 {found[:12]}..., {RECORD_FILE} says"
                          f" {record.sha256[:12]}...): restore the file, or start a new run")
    tensors = load_file(path)
    prompt_at, response_at = tensors["prompt_offsets"].tolist(), tensors["response_offsets"].tolist()
    prompt_ids, response_ids = tensors["prompt_ids"].tolist(), tensors["response_ids"].tolist()
    logprobs = tensors["initial_logprobs"].tolist()
    samples = []
    for index in range(len(prompt_at) - 1):
        lo, hi = response_at[index], response_at[index + 1]
        samples.append(TrainSample("rehearsal", f"rehearsal-{index}", "", 0,
                                   tuple(prompt_ids[prompt_at[index] : prompt_at[index + 1]]),
                                   tuple(response_ids[lo:hi]), tuple(logprobs[lo:hi]), 0.0))
    if len(samples) != record.samples:
        raise ConfigError(f"{path} holds {len(samples)} samples, {RECORD_FILE} says {record.samples}: start a new run")
    return samples
