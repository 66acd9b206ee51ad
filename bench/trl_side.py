"""The TRL side of bench/trl_compare.py: stock TRL `GRPOTrainer` on the work that script exported, in TRL's own venv.

    bench/.venv-trl/bin/python bench/trl_side.py WORK.json      # bash bench/trl_env.sh creates the venv

It trains `warmup + steps` generation batches of `groups` prompts x `group_size` completions (transformers generate,
TRL's default without vLLM), each batch learnt in `minibatches` optimizer steps, and prints one JSON line: per batch
its generated tokens, completions and seconds, from the start of its first optimizer step to the end of its last
(generation, reward, advantages, the old-log-prob pass TRL runs when one batch serves several steps, and the updates).

The records here are shared with trl_compare.py, which imports this module in Strat's venv: at the top only the
standard library, transformers (in both venvs, at one version) and Strat's pure-Python response parser; trl and
datasets are imported where the TRL run starts.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # Strat's parser: pure Python, needs nothing else
from strat.algorithm.reasoning import parse_response


@dataclass(frozen=True)
class ExportedPrompt:
    """One decision prompt built by Strat, as both sides see it."""

    key: str
    """The information state it was built at."""
    messages: list[dict[str, str]]
    """Chat messages as the model's chat template takes them (`strat.engines.base.chat_messages`)."""
    prompt_token_ids: list[int]
    """Strat's encoding of the prompt (`Engine.encode_chat`); TRL's must be the same."""
    legal_actions: list[str]
    """The legal action names at that state."""


@dataclass(frozen=True)
class Work:
    """Everything the TRL side runs: the model, the prompts, the batch and lengths, and the learning settings."""

    model: str
    """The model directory both sides start from."""
    prompts: list[ExportedPrompt]
    depth: int
    """Reasoning depth of the prompts and of the reward's parser."""
    group_size: int
    """Completions per prompt (TRL's num_generations)."""
    groups: int
    """Prompts per generation batch."""
    max_new_tokens: int
    temperature: float
    top_p: float
    lr: float
    minibatches: int
    """Optimizer steps per generation batch."""
    micro_batch: int
    """Most completions in one forward/backward pass."""
    grad_clip: float
    clip_eps_low: float
    clip_eps_high: float
    kl_coef: float
    """TRL's beta: 0 loads no reference model."""
    format_penalty: float
    """The reward of an invalid response; a valid one gets 1."""
    warmup: int
    """Generation batches run first and not counted."""
    steps: int
    """Generation batches counted."""
    threads: int
    """torch intra-op threads of the TRL process."""
    seed: int

    @property
    def batch(self) -> int:
        return self.groups * self.group_size

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Work:
        fields = json.loads(text)
        return cls(**{**fields, "prompts": [ExportedPrompt(**p) for p in fields["prompts"]]})


@dataclass(frozen=True)
class StepWork:
    """What one training step did: generated tokens, completions, seconds of step time."""

    step: int
    generated_tokens: int
    completions: int
    seconds: float


@dataclass(frozen=True)
class TrlBatching:
    """`Work`'s batch in TRL's terms."""

    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int
    """Micro-batches per generation batch (TRL counts its steps in micro-batches)."""


def trl_batching(work: Work) -> TrlBatching:
    """Micro-batches of at most `micro_batch` completions, `minibatches` optimizer steps per generation batch."""
    if work.batch % work.minibatches:
        raise ValueError(f"algorithm.minibatches={work.minibatches} must divide the batch of {work.groups} groups x "
                         f"{work.group_size} completions = {work.batch} for TRL")
    minibatch = work.batch // work.minibatches
    per_device = min(work.micro_batch, minibatch)
    if minibatch % per_device:
        raise ValueError(f"algorithm.micro_batch={work.micro_batch} must divide the minibatch of {minibatch} "
                         "completions for TRL")
    return TrlBatching(per_device, minibatch // per_device, work.batch // per_device)


def move_reward(text: str, legal: list[str], depth: int, penalty: float) -> float:
    """1 for a well-formed response (Strat's parser) whose action is a legal name, else `penalty`."""
    parsed = parse_response(text, depth)
    action = (parsed.sections.action or "").strip().lower()
    return 1.0 if parsed.format_valid and action in {name.lower() for name in legal} else penalty


class BatchTimer(TrainerCallback):
    """Seconds of each generation batch: from the start of its first optimizer step to the end of its last."""

    def __init__(self, optimizer_steps: int) -> None:
        self.optimizer_steps = optimizer_steps
        self.seconds: list[float] = []
        self._started = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.optimizer_steps == 0:
            self._started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.optimizer_steps == 0:
            self.seconds.append(time.perf_counter() - self._started)


def run(work: Work, output_dir: Path) -> list[StepWork]:
    """`warmup + steps` generation batches of stock `GRPOTrainer`; what each did, in order."""
    import datasets  # the TRL venv's, as trl below
    import torch
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(work.threads)
    batching = trl_batching(work)
    lengths: list[tuple[int, int]] = []

    def reward(prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], legal: list[list[str]],
               **kwargs: Any) -> list[float]:
        # Called once per generation batch with its completions: the one place TRL hands out their token ids.
        lengths.append((sum(len(ids) for ids in completion_ids), len(completion_ids)))
        return [move_reward(c[0]["content"], names, work.depth, work.format_penalty)
                for c, names in zip(completions, legal, strict=True)]

    config = GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=batching.per_device_train_batch_size,
        gradient_accumulation_steps=batching.gradient_accumulation_steps,
        steps_per_generation=batching.steps_per_generation,
        num_generations=work.group_size,
        max_completion_length=work.max_new_tokens,
        temperature=work.temperature,
        top_p=work.top_p,
        top_k=0,
        learning_rate=work.lr,
        lr_scheduler_type="constant",
        weight_decay=0.01,  # torch AdamW's default, which Strat's learner uses
        max_grad_norm=work.grad_clip,
        beta=work.kl_coef,
        num_iterations=1,
        epsilon=work.clip_eps_low,
        epsilon_high=work.clip_eps_high,
        loss_type="dapo",  # token mean over the batch, as Strat's loss_agg=token_mean
        scale_rewards="group",
        gradient_checkpointing=False,  # TRL's default is on; Strat's learner runs without
        bf16=False,
        use_cpu=True,
        max_steps=(work.warmup + work.steps) * work.minibatches,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=work.seed,
        model_init_kwargs={"dtype": "float32"},
    )
    dataset = datasets.Dataset.from_list([{"prompt": p.messages, "legal": p.legal_actions} for p in work.prompts])
    timer = BatchTimer(work.minibatches)
    trainer = GRPOTrainer(model=work.model, reward_funcs=[reward], args=config, train_dataset=dataset,
                          callbacks=[timer])
    encoded, _, _ = trainer._tokenize_prompts([p.messages for p in work.prompts])
    for prompt, ids in zip(work.prompts, encoded, strict=True):
        if list(ids) != prompt.prompt_token_ids:
            raise RuntimeError(f"TRL encodes prompt {prompt.key!r} as {len(ids)} tokens, Strat as "
                               f"{len(prompt.prompt_token_ids)}: the two sides would not see the same prompts")
    trainer.train()
    if len(lengths) != len(timer.seconds):
        raise RuntimeError(f"{len(lengths)} generation batches were rewarded but {len(timer.seconds)} timed")
    return [StepWork(i + 1, tokens, count, seconds)
            for i, ((tokens, count), seconds) in enumerate(zip(lengths, timer.seconds, strict=True))]


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} WORK.json (written by bench/trl_compare.py)")
    work = Work.from_json(Path(sys.argv[1]).read_text())
    import torch
    import transformers
    import trl

    with tempfile.TemporaryDirectory(prefix="trl-side-") as tmp:
        steps = run(work, Path(tmp))
    versions = {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__}
    print(json.dumps({"steps": [asdict(s) for s in steps], "versions": versions,
                      "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
