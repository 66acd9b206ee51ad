"""The `hf` backend: plain transformers with a KV-cached decode loop (no vLLM needed)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from strat.engines.action_constraint import ActionConstraint, TokenTexts, token_texts
from strat.engines.base import Engine, Generation, SamplingParams, stop_token_ids
from strat.engines.sampling import sampling_logprobs
from strat.model.build import DTYPES
from strat.sync.fingerprint import fingerprint
from strat.sync.process_group import Membership, TensorMeta


class HFEngine(Engine):
    """Batched sampling with per-prompt seeds, so a prompt's output does not depend on its batch."""

    def __init__(
        self, model_path: str | os.PathLike[str], dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False
    ) -> None:
        self._tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code, use_safetensors=True
        ).to(device)
        self.model.eval()
        self.device = torch.device(device)
        self._stop_ids = stop_token_ids(self._tokenizer, model_path)
        pad = self._tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else self._stop_ids[0]
        self._weight_group = Membership()
        self._texts: TokenTexts | None = None
        """`token_texts` of the tokenizer, read on the first constrained generation."""

    @property
    def tokenizer(self):
        return self._tokenizer

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        batch = len(prompts)
        constraints = self._constraints(params, batch)
        written = [""] * batch
        allowed: list[list[tuple[int, ...]]] = [[] for _ in range(batch)]
        width = max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self._pad_id, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise ValueError("cannot generate from an empty prompt")
            input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            attention[row, width - len(prompt) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        generators = None
        if params.temperature > 0:
            base = params.seed if params.seed is not None else int(torch.randint(0, 2**31 - 1, ()).item())
            generators = [torch.Generator().manual_seed(_row_seed(base, row)) for row in range(batch)]

        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :]
        last_pos = positions[:, -1]
        tokens: list[list[int]] = [[] for _ in range(batch)]
        logps: list[list[float]] = [[] for _ in range(batch)]
        done = [False] * batch
        stops = set(self._stop_ids)
        for _ in range(params.max_tokens):
            if constraints:
                logits = self._constrain(logits, constraints, written, allowed, done)
            logp = sampling_logprobs(logits, params.temperature, params.top_p).cpu()
            if generators is None:
                chosen = logp.argmax(dim=-1)
            else:
                probs = logp.exp()
                chosen = torch.stack(
                    [torch.multinomial(probs[row], 1, generator=generators[row])[0] for row in range(batch)]
                )
            next_ids = torch.full((batch,), self._pad_id, dtype=torch.long)
            for row in range(batch):
                if done[row]:
                    continue
                token = int(chosen[row])
                tokens[row].append(token)
                logps[row].append(float(logp[row, token]))
                next_ids[row] = token
                done[row] = token in stops
                if constraints:
                    written[row] += constraints[row].vocabulary.texts[token]
            if all(done):
                break
            attention = torch.cat([attention, torch.ones((batch, 1), dtype=torch.long, device=self.device)], dim=1)
            last_pos = last_pos + 1
            out = self.model(
                input_ids=next_ids[:, None].to(self.device),
                attention_mask=attention,
                position_ids=last_pos[:, None],
                past_key_values=past,
                use_cache=True,
            )
            past, logits = out.past_key_values, out.logits[:, -1, :]

        results = []
        for row, prompt in enumerate(prompts):
            finished = bool(tokens[row]) and tokens[row][-1] in stops
            results.append(
                Generation(
                    prompt_token_ids=tuple(prompt),
                    token_ids=tuple(tokens[row]),
                    logprobs=tuple(logps[row]),
                    text=self._tokenizer.decode(tokens[row], skip_special_tokens=True),
                    finish_reason="stop" if finished else "length",
                    allowed_token_ids=tuple(allowed[row]) if any(allowed[row]) else (),
                )
            )
        return results

    def _constraints(self, params: SamplingParams, batch: int) -> list[ActionConstraint]:
        """Each prompt's move constraint (`SamplingParams.actions`); none when decoding is free."""
        if not params.actions:
            return []
        if len(params.actions) != batch:
            raise ValueError(f"{len(params.actions)} prompts' legal moves for {batch} prompts")
        if self._texts is None:
            self._texts = token_texts(self._tokenizer)
        return [ActionConstraint(self._texts, tuple(self._stop_ids), moves) for moves in params.actions]

    def _constrain(self, logits: torch.Tensor, constraints: list[ActionConstraint], written: list[str],
                   allowed: list[list[tuple[int, ...]]], done: list[bool]) -> torch.Tensor:
        """`logits` [B, V] with every token outside a row's allowed set at -inf; each live row's allowed ids (empty
        where free) appended to `allowed`."""
        masked = logits
        for row, constraint in enumerate(constraints):
            if done[row]:
                continue
            ids = constraint.allowed(written[row])
            allowed[row].append(ids or ())
            if ids:
                keep = torch.full_like(logits[row], float("-inf"))
                keep[list(ids)] = 0.0
                if masked is logits:
                    masked = logits.clone()
                masked[row] = logits[row] + keep
        return masked

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise ValueError(f"weights not in the model: {', '.join(unknown[:5])}")
        for name, tensor in state.items():
            own[name].copy_(tensor.to(own[name].dtype))

    def load_weights_dir(self, path: str | os.PathLike[str]) -> None:
        files = sorted(Path(path).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no .safetensors files in {path}")
        state: dict[str, torch.Tensor] = {}
        for file in files:
            state.update(load_file(file))
        self.load_state_dict(state)

    @property
    def weight_group_ranks(self) -> int:
        return 1

    def join_weight_group(self, address: str, first_rank: int, world_size: int, backend: str) -> None:
        self._weight_group.join(address, first_rank, world_size, backend)

    def receive_weights(self, metadata: Sequence[TensorMeta]) -> None:
        group = self._weight_group.current("the hf engine")
        group.receive_into(metadata, lambda weights: self.load_state_dict(dict(weights)))

    def weights_fingerprint(self) -> str:
        return fingerprint(self.model.named_parameters())

    def close(self) -> None:
        self._weight_group.leave()
        self.model = None


def _row_seed(seed: int, row: int) -> int:
    """A distinct, stable seed per (batch seed, prompt index)."""
    return (seed * 1_000_003 + row) % (2**63 - 1)
