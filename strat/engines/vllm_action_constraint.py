"""The constrained move (`reasoning.constrain_action`) inside vLLM: a logits processor that masks each request's
logits with its `ActionConstraint` (`strat.engines.action_constraint`), as the hf engine does in its own loop.

vLLM's V1 engine takes logits processor classes when the `LLM` is built and runs them where the model runs (in the
engine core process when it is multi-process, as on a GPU), so this module is imported there by its name. A request
asks for the mask through `SamplingParams.extra_args` (`request_args`): its legal moves and end-of-turn ids. The
processor masks before temperature and top-p, so vLLM's processed log-probs are those of the renormalised
distribution the learner scores. The engine side replays the same `ActionConstraint` over the sampled tokens
(`allowed_along`) to give the learner each position's allowed ids: the processor and the replay read one tokenizer's
token texts with one function, so they agree token for token."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from vllm import SamplingParams as VLLMSamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from strat.engines.action_constraint import ActionConstraint, TokenTexts, token_texts

if TYPE_CHECKING:
    from vllm.config import VllmConfig

MOVES_KEY = "strat_moves"
STOPS_KEY = "strat_stop_ids"


def request_args(moves: Sequence[str], stop_ids: Sequence[int]) -> dict[str, Any]:
    """`SamplingParams.extra_args` that ask `ActionLogitsProcessor` to constrain one request's move to `moves`."""
    return {MOVES_KEY: list(moves), STOPS_KEY: list(stop_ids)}


def allowed_along(constraint: ActionConstraint, token_ids: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """For each of a response's tokens, the ids it was sampled among under `constraint` (empty where free): the
    processor's masks, replayed over the text the tokens wrote."""
    written, allowed = "", []
    for token in token_ids:
        allowed.append(constraint.allowed(written) or ())
        written += constraint.vocabulary.texts[token]
    return tuple(allowed)


class ActionLogitsProcessor(AdapterLogitsProcessor):
    """Masks the logits of every request whose `extra_args` carry legal moves (`request_args`); other requests pass
    unchanged."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        self._model_config = vllm_config.model_config
        self._texts: TokenTexts | None = None

    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token is likeliest

    def _vocabulary(self) -> TokenTexts:
        """The tokenizer's token texts, read on the first constrained request (a free run never loads them)."""
        if self._texts is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(
                self._model_config.tokenizer, trust_remote_code=self._model_config.trust_remote_code
            )
            self._texts = token_texts(tokenizer)
        return self._texts

    def new_req_logits_processor(
        self, params: VLLMSamplingParams
    ) -> Callable[[list[int], torch.Tensor], torch.Tensor] | None:
        extra = params.extra_args or {}
        if MOVES_KEY not in extra:
            return None
        constraint = ActionConstraint(self._vocabulary(), tuple(extra[STOPS_KEY]), tuple(extra[MOVES_KEY]))
        written: list[str] = []  # the text of the tokens seen so far, extended as the output grows

        def mask(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            texts = constraint.vocabulary.texts
            while len(written) < len(output_ids):
                written.append(texts[output_ids[len(written)]])
            allowed = constraint.allowed("".join(written))
            if not allowed:
                return logits
            keep = torch.full_like(logits, float("-inf"))
            keep[list(allowed)] = 0.0
            return logits + keep

        return mask
