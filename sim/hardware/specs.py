"""What runs and on what: model and GPU descriptions, their presets, how a config names them.

``ModelSpec`` is a decoder-only transformer's shape (Llama-style by default;
GPT-2 / OPT style too), read from a Hugging Face ``config.json`` by
``from_hf_config``; ``HardwareSpec`` is one accelerator. The presets are data:
``models.toml`` (specs, ``config.json`` fields, aliases, context limits) and
``gpus.toml`` (one table a card: its datasheet with links, the names kernel
tables give it, its price). In a scenario, ``model:`` and ``hardware:`` accept
a preset name, an inline spec, or ``{preset: NAME, **overrides}``; ``model:``
also a ``config.json`` path (``ModelRef``, ``HardwareRef``).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from sim.config import Frozen, anchored
from sim.errors import ConfigError, format_error

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]


# A gated MLP (Llama, Mistral, Qwen) is down(act(gate(x)) * up(x)): three
# hidden x intermediate matrices. A non-gated one (GPT-2, OPT) is fc2(act(fc1(x))):
# two. ``mlp_activation`` is the config's name for ``act`` (silu, gelu_new, relu).
MlpKind = Literal["gated", "non_gated"]
# RMSNorm has a weight; LayerNorm (GPT-2, OPT) a weight and a bias.
NormKind = Literal["rms", "layer"]


class MoeSpec(Frozen):
    """Mixture-of-experts MLP: ``top_k`` of ``num_experts`` experts per token."""

    num_experts: PositiveInt
    top_k: PositiveInt
    expert_intermediate_size: PositiveInt
    # Always-on shared expert (Qwen2-MoE style); None when the model has none.
    shared_expert_intermediate_size: PositiveInt | None = None


class ModelSpec(Frozen):
    """Shape of a decoder-only transformer; the defaults are Llama's.

    ``head_dim`` defaults to ``hidden_size // num_attention_heads``. Dtype
    sizes are floats so that 4-bit weights (0.5 bytes) can be described.
    A mixture-of-experts model (``moe``) keeps a dense MLP of the same
    parameter count in ``intermediate_size`` (experts x expert width + shared
    width): memory sizing and the roofline read that; the kernel cost model
    reads ``moe``.
    """

    name: str = Field(min_length=1)
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt
    # Filled in by _default_head_dim when absent; validate_default rejects a
    # None that survives (only possible when hidden_size is itself invalid).
    head_dim: PositiveInt = Field(default=None, validate_default=True)
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    weight_dtype_bytes: PositiveFloat = 2.0
    kv_dtype_bytes: PositiveFloat = 2.0
    tied_embeddings: bool = False
    # Qwen2 has biases on the q, k and v projections; Llama has none.
    attention_qkv_bias: bool = False
    mlp: MlpKind = "gated"
    mlp_activation: str = Field(default="silu", min_length=1)
    # Biases on every linear layer, q, k, v, o and the MLP's (GPT-2, OPT).
    linear_bias: bool = False
    norm: NormKind = "rms"
    # Rows of a learned position-embedding table (GPT-2: n_positions; OPT:
    # max_position_embeddings + 2); 0 for rotary positions, which have no weights.
    num_learned_positions: int = Field(default=0, ge=0)
    # Sliding-window attention (Mistral-7B-v0.1: 4096 tokens, every layer):
    # recorded, not modelled (KV capacity and attention price full attention).
    sliding_window_tokens: PositiveInt | None = None
    num_sliding_window_layers: int = Field(default=0, ge=0)
    # The model's own context limit (config.json's max_position_embeddings);
    # None: the presets' table (``MAX_CONTEXT_TOKENS``) by name, or unchecked.
    max_context_tokens: PositiveInt | None = None
    moe: MoeSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_head_dim(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("head_dim") is None:
            hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
            if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
                if hidden % heads:
                    raise ValueError(
                        f"head_dim not given and hidden_size {hidden} is not a "
                        f"multiple of num_attention_heads {heads}"
                    )
                data = {**data, "head_dim": hidden // heads}
        return data

    @model_validator(mode="after")
    def _check_gqa(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple "
                f"of num_kv_heads {self.num_kv_heads}"
            )
        return self

    @model_validator(mode="after")
    def _check_sliding_window(self) -> ModelSpec:
        window, num_window_layers = self.sliding_window_tokens, self.num_sliding_window_layers
        if (window is None) != (num_window_layers == 0):
            raise ValueError(
                "sliding_window_tokens and num_sliding_window_layers come together "
                f"(got {window} and {num_window_layers})"
            )
        if num_window_layers > self.num_layers:
            raise ValueError(
                f"num_sliding_window_layers {num_window_layers} exceeds "
                f"num_layers {self.num_layers}"
            )
        return self

    @property
    def num_params_per_layer(self) -> int:
        """Attention (q, k, v, o and their biases) + MLP + 2 norms."""
        hidden, inter = self.hidden_size, self.intermediate_size
        q_width, kv_width = self.q_width, self.kv_width
        attention = 2 * hidden * q_width + 2 * hidden * kv_width
        if self.linear_bias or self.attention_qkv_bias:
            attention += q_width + 2 * kv_width
        if self.mlp == "gated":
            mlp = 3 * hidden * inter  # gate, up, down
            mlp_bias = 2 * inter + hidden
        else:
            mlp = 2 * hidden * inter  # fc1, fc2
            mlp_bias = inter + hidden
        if self.linear_bias:
            attention += hidden  # o_proj's bias
            mlp += mlp_bias
        return attention + mlp + 2 * self.norm_params

    @property
    def q_width(self) -> int:
        """Output width of the query projection (heads x head_dim)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Output width of the key (or value) projection."""
        return self.num_kv_heads * self.head_dim

    @property
    def norm_params(self) -> int:
        """Parameters of one norm: RMSNorm a weight, LayerNorm a weight and a bias."""
        return self.hidden_size if self.norm == "rms" else 2 * self.hidden_size

    @property
    def num_embedding_params(self) -> int:
        """Input embedding table, the LM head unless tied, learned positions if any."""
        table = self.vocab_size * self.hidden_size
        vocab = table if self.tied_embeddings else 2 * table
        return vocab + self.num_learned_positions * self.hidden_size

    @property
    def num_non_embedding_params(self) -> int:
        """Transformer layers plus the final norm."""
        return self.num_layers * self.num_params_per_layer + self.norm_params

    @property
    def num_params(self) -> int:
        """Total parameters, counting a tied embedding once."""
        return self.num_non_embedding_params + self.num_embedding_params

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights, all read once per forward pass."""
        return self.num_params * self.weight_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        """KV cache bytes per token: K and V, every layer, every KV head."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def layer_flops_per_token(self) -> float:
        """Matmul FLOPs per token of the transformer layers (2 per multiply-add): 2 x
        non-embedding params (so a non-gated MLP's two GEMMs count two, a gated one's
        three); embedding lookups (token and learned position) are free."""
        return 2.0 * self.num_non_embedding_params

    @property
    def lm_head_flops_per_token(self) -> float:
        """FLOPs of the LM head per token whose logits are computed: a hidden x vocab
        matmul, whether tied or not (vLLM computes them at one position a request a
        step, not at every token: ``sim.cost.roofline``)."""
        return 2.0 * self.hidden_size * self.vocab_size

    @property
    def dense_flops_per_token(self) -> float:
        """Matmul FLOPs per token outside attention scores, the LM head's included: a
        token whose logits are computed (its layers' and its LM head's)."""
        return self.layer_flops_per_token + self.lm_head_flops_per_token

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs per query-key pair: QK^T and PV, 2 FLOPs each per head dim, per layer."""
        return 4.0 * self.num_layers * self.num_attention_heads * self.head_dim


def model_caveat(model: ModelSpec) -> str | None:
    """What of ``model`` servesim does not model, in one line (None: nothing known):
    a sliding window (vLLM frees KV past it; servesim keeps whole contexts)."""
    if model.sliding_window_tokens is None:
        return None
    return (
        f"model {model.name}'s {model.sliding_window_tokens}-token sliding window "
        f"({model.num_sliding_window_layers} of {model.num_layers} layers) is not modelled: "
        "KV use and attention are priced as full attention, an over-estimate past the window"
    )


MODELS_FILE = Path(__file__).with_name("models.toml")
with MODELS_FILE.open("rb") as _file:
    _MODEL_DATA = tomllib.load(_file)
# Written out field by field (models.toml's specs); more below, from HF_CONFIGS.
_MODELS = [ModelSpec(name=name, **fields) for name, fields in _MODEL_DATA["specs"].items()]
# The CPU calibration model, which calibration/ builds as a real PyTorch model.
TINY_MODEL = next(model for model in _MODELS if model.name == "tiny")
# servesim ModelSpec presets with the same layer shapes as an architecture preset.
MODEL_SPEC_ALIASES: Mapping[str, str] = MappingProxyType(_MODEL_DATA["aliases"])
HF_CONFIGS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(config) for name, config in _MODEL_DATA["configs"].items()}
)
_LONGER_RELEASES: dict[str, int] = _MODEL_DATA["longer_releases"]


def _known() -> dict[str, int]:
    known = {name: int(c["max_position_embeddings"]) for name, c in HF_CONFIGS.items()}
    known |= {alias: known[target] for alias, target in MODEL_SPEC_ALIASES.items()}
    return known | _LONGER_RELEASES


MAX_CONTEXT_TOKENS: Mapping[str, int] = MappingProxyType(_known())


def context_problem(
    model_name: str, max_model_len_tokens: int, own_limit_tokens: int | None = None
) -> str | None:
    """Why ``max_model_len_tokens`` is too long for the model, or ``None``.

    ``own_limit_tokens``: the model's own limit (a ``config.json``'s), which
    wins over the presets' table by name.
    """
    limit = own_limit_tokens if own_limit_tokens is not None else MAX_CONTEXT_TOKENS.get(model_name)
    if limit is None or max_model_len_tokens <= limit:
        return None
    whose = "its config.json" if own_limit_tokens is not None else "its longest release"
    return (
        f"engine.max_model_len_tokens {max_model_len_tokens} exceeds {model_name}'s context "
        f"length of {limit} tokens ({whose}); a real engine refuses it"
    )


def _from_config(
    *,
    intermediate_size: int,
    max_position_embeddings: int,
    moe: MoeSpec | None = None,
    **shapes: Any,
) -> ModelSpec:
    """The ``ModelSpec`` a ``config.json`` describes: bf16 weights and KV (the
    ``quantization:`` section changes them), ``max_position_embeddings`` as its
    context limit, an MoE's dense width as ``ModelSpec`` says."""
    if moe is not None:
        intermediate_size = moe.num_experts * moe.expert_intermediate_size + (
            moe.shared_expert_intermediate_size or 0
        )
    spec = ModelSpec(
        **shapes,
        intermediate_size=intermediate_size,
        max_context_tokens=max_position_embeddings,
        moe=moe,
    )
    # Every field set, defaults included, as a preset written in full: a scenario's
    # own-fields dump (sim.scenario.overridden) writes them all.
    return ModelSpec(**dict(spec))


def _field(config: dict[str, Any], where: str, *names: str) -> int:
    """The first of ``names`` present in ``config`` as a positive int."""
    for name in names:
        value = config.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{where}: field {name!r} must be a positive integer")
            return value
    raise ConfigError(f"{where}: missing field {names[0]!r}")


def _flag(config: dict[str, Any], where: str, name: str, default: bool) -> bool:
    """``config[name]`` as a bool, ``default`` when absent or null."""
    value = config.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: field {name!r} must be true or false")
    return value


def _activation(config: dict[str, Any], where: str, name: str, default: str) -> str:
    """The MLP's activation function's name (``hidden_act``, ``activation_function``)."""
    value = config.get(name, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: field {name!r} must be an activation name, e.g. {default!r}")
    return value


def _head_dim(config: dict[str, Any], where: str, hidden: int, heads: int) -> int:
    if config.get("head_dim") is not None:
        return _field(config, where, "head_dim")
    if hidden % heads:
        raise ConfigError(f"{where}: missing field 'head_dim' (hidden_size % heads != 0)")
    return hidden // heads


def _sliding_window(config: dict[str, Any], where: str, num_layers: int) -> dict[str, Any]:
    """``sliding_window_tokens`` and the layers that use it, as Hugging Face reads them.

    ``layer_types`` (newer configs: ``sliding_attention`` / ``full_attention``
    per layer) says which layers; else Qwen2's ``use_sliding_window: false``
    turns the window off, its ``max_window_layers`` keeps the first layers
    full, Gemma 3's ``sliding_window_pattern: N`` makes every N-th layer full,
    Gemma 2 slides on every other layer, and otherwise (Mistral) a
    ``sliding_window`` applies to every layer.
    """
    layer_types = config.get("layer_types")
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != num_layers:
            raise ConfigError(f"{where}: field 'layer_types' must list all {num_layers} layers")
        num_window_layers = sum(kind == "sliding_attention" for kind in layer_types)
    elif window is None:
        num_window_layers = 0
    elif config.get("sliding_window_pattern") is not None:
        num_window_layers = num_layers - num_layers // _field(
            config, where, "sliding_window_pattern"
        )
    elif config.get("model_type") == "gemma2":  # layers 0, 2, 4, ... slide
        num_window_layers = (num_layers + 1) // 2
    else:
        first = config.get("max_window_layers") if config.get("use_sliding_window") else None
        full = _field(config, where, "max_window_layers") if first is not None else 0
        num_window_layers = max(num_layers - full, 0)
    if num_window_layers == 0:
        return {}
    return {
        "sliding_window_tokens": _field(config, where, "sliding_window"),
        "num_sliding_window_layers": num_window_layers,
    }


def _gpt2(config: dict[str, Any], name: str, where: str) -> ModelSpec:
    """GPT-2 (``model_type: gpt2``): its own field names, Conv1D layers with biases,
    LayerNorms, a GELU MLP ``n_inner`` wide (null: 4 x ``n_embd``), learned
    positions, multi-head attention, the LM head tied to the token embedding."""
    hidden = _field(config, where, "n_embd", "hidden_size")
    heads = _field(config, where, "n_head", "num_attention_heads")
    positions = _field(config, where, "n_positions", "max_position_embeddings")
    inner = _field(config, where, "n_inner") if config.get("n_inner") is not None else 4 * hidden
    return _from_config(
        name=name,
        num_layers=_field(config, where, "n_layer", "num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=heads,
        head_dim=_head_dim(config, where, hidden, heads),
        intermediate_size=inner,
        vocab_size=_field(config, where, "vocab_size"),
        max_position_embeddings=positions,
        tied_embeddings=_flag(config, where, "tie_word_embeddings", True),
        mlp="non_gated",
        mlp_activation=_activation(config, where, "activation_function", "gelu_new"),
        linear_bias=True,
        norm="layer",
        num_learned_positions=positions,
    )


# OPT's learned position table has 2 rows more than positions (its offset).
OPT_POSITION_OFFSET = 2


def _opt(config: dict[str, Any], name: str, where: str) -> ModelSpec:
    """OPT (``model_type: opt``): pre-LayerNorm layers with biases, an MLP of
    ``ffn_dim`` (ReLU), learned positions, multi-head attention, tied LM head."""
    hidden = _field(config, where, "hidden_size")
    heads = _field(config, where, "num_attention_heads")
    projection = hidden
    if config.get("word_embed_proj_dim") is not None:
        projection = _field(config, where, "word_embed_proj_dim")
    if projection != hidden:  # OPT-350m: embeddings projected in and out
        raise ConfigError(
            f"{where}: word_embed_proj_dim {projection} != hidden_size {hidden} "
            "(projected embeddings) is not modelled"
        )
    if not _flag(config, where, "do_layer_norm_before", True):
        raise ConfigError(f"{where}: do_layer_norm_before false (post-norm OPT) is not modelled")
    positions = _field(config, where, "max_position_embeddings")
    return _from_config(
        name=name,
        num_layers=_field(config, where, "num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=heads,
        head_dim=_head_dim(config, where, hidden, heads),
        intermediate_size=_field(config, where, "ffn_dim"),
        vocab_size=_field(config, where, "vocab_size"),
        max_position_embeddings=positions,
        tied_embeddings=_flag(config, where, "tie_word_embeddings", True),
        mlp="non_gated",
        mlp_activation=_activation(config, where, "activation_function", "relu"),
        linear_bias=_flag(config, where, "enable_bias", True),
        norm="layer",
        num_learned_positions=positions + OPT_POSITION_OFFSET,
    )


# Model types whose config class ties the LM head unless told otherwise (a
# saved config.json omits a field equal to its class's default).
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})


def _llama_style(config: dict[str, Any], name: str, where: str) -> ModelSpec:
    """Llama, Mistral, Mixtral, Qwen2/3 (and MoE), Gemma: RMSNorm, rotary positions, a
    gated MLP (``hidden_act``, SiLU by default), GQA or MHA, optional window."""
    hidden = _field(config, where, "hidden_size")
    heads = _field(config, where, "num_attention_heads")
    layers = _field(config, where, "num_hidden_layers")
    num_experts = config.get("num_local_experts") or config.get("num_experts")
    moe = None
    if num_experts:
        # Qwen-MoE can keep some layers dense (mlp_only_layers, or MoE only every
        # decoder_sparse_step-th layer); every layer is priced as MoE, so refuse those.
        step = config.get("decoder_sparse_step") and _field(config, where, "decoder_sparse_step")
        if config.get("mlp_only_layers") or (step or 1) != 1:
            raise ConfigError(
                f"{where}: dense layers among MoE layers (mlp_only_layers, "
                "decoder_sparse_step != 1) are not modelled"
            )
        moe = MoeSpec(
            num_experts=_field(config, where, "num_local_experts", "num_experts"),
            top_k=_field(config, where, "num_experts_per_tok"),
            expert_intermediate_size=_field(
                config, where, "moe_intermediate_size", "intermediate_size"
            ),
            shared_expert_intermediate_size=_field(config, where, "shared_expert_intermediate_size")
            if config.get("shared_expert_intermediate_size")
            else None,
        )
    return _from_config(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=_field(config, where, "num_key_value_heads", "num_attention_heads"),
        head_dim=_head_dim(config, where, hidden, heads),
        intermediate_size=_field(config, where, "intermediate_size"),
        vocab_size=_field(config, where, "vocab_size"),
        max_position_embeddings=_field(config, where, "max_position_embeddings"),
        tied_embeddings=_flag(
            config, where, "tie_word_embeddings", config.get("model_type") in _TIED_BY_DEFAULT
        ),
        attention_qkv_bias=_flag(config, where, "attention_bias", False),
        mlp_activation=_activation(config, where, "hidden_act", "silu"),
        moe=moe,
        **_sliding_window(config, where, layers),
    )


# The model types servesim reads, each by name, and the rules it reads them by.
# Any other is refused: read as a Llama it would price a model that is not
# there (DeepSeek-V3's latent attention and shared experts as dense GQA, a BERT
# encoder as a generator).
_READERS = {
    "gpt2": _gpt2,
    "opt": _opt,
    **dict.fromkeys(
        [
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "gemma3",
            "gemma3_text",
        ],
        _llama_style,
    ),
}
SUPPORTED_MODEL_TYPES = frozenset(_READERS)
"""``config.json`` ``model_type`` values servesim models (``from_hf_config``)."""


def _model_type(config: dict[str, Any], where: str) -> str:
    """``config``'s ``model_type``; ConfigError naming it and the supported ones if not one."""
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in _READERS:
        return model_type
    supported = ", ".join(sorted(_READERS))
    if model_type is None:
        raise ConfigError(f"{where}: missing field 'model_type'; supported: {supported}")
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): KV is a compressed
    # latent, not K and V per head, so neither its KV bytes nor attention is priced.
    mla = " (multi-head latent attention, kv_lora_rank)" if "kv_lora_rank" in config else ""
    raise ConfigError(
        f"{where}: model_type {model_type!r}{mla} is not modelled; supported: {supported}"
    )


def from_hf_config(config: dict[str, Any], name: str, where: str = "config.json") -> ModelSpec:
    """Architecture from a Hugging Face ``config.json`` mapping, by its ``model_type``
    (``_READERS``; another is a ConfigError). Fields Hugging Face defaults default
    the same way; multimodal configs keep the language model under ``text_config``;
    a ``quantization_config`` is refused (the scenario's ``quantization:`` says)."""
    if isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}
    if config.get("quantization_config") is not None:
        method = config["quantization_config"]
        method = method.get("quant_method", "?") if isinstance(method, dict) else method
        raise ConfigError(
            f"{where}: quantization_config ({method}) is not read; remove it and set the "
            "scenario's quantization: weights instead"
        )
    read = _READERS[_model_type(config, where)]
    try:
        return read(config, name, where)
    except ValidationError as error:  # fields that parse but do not fit together
        problem = error.errors()[0]
        raise ConfigError(f"{where}: {problem['msg']}") from None


def read_hf_config(path: Path) -> ModelSpec:
    """The architecture in a ``config.json`` file (or a folder holding one).

    Named after the folder when the file is ``config.json``, else after the
    file's stem, lower-cased.
    """
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"{path}: no such config.json file")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: cannot read config.json: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    stem = path.parent.name if path.name == "config.json" else path.stem
    return from_hf_config(config, stem.lower(), str(path))


def load_architecture(name_or_path: str | Path) -> ModelSpec:
    """A preset (``llama-3.1-8b``) or a ``config.json`` path; ConfigError otherwise."""
    key = MODEL_SPEC_ALIASES.get(str(name_or_path), str(name_or_path))
    if key in HF_CONFIGS:
        return from_hf_config(dict(HF_CONFIGS[key]), key, f"preset {key}")
    path = Path(name_or_path)
    if not path.exists():
        known = ", ".join(sorted(HF_CONFIGS))
        raise ConfigError(f"architecture {key!r}: no such preset or file; presets: {known}")
    return read_hf_config(path)


class HardwareSpec(Frozen):
    """One accelerator as a cost model sees it.

    ``peak_flops_per_s`` is the datasheet dense (non-sparse) rate at the
    weight dtype; efficiencies are the fractions of peak FLOP/s and bandwidth
    a real engine reaches. The GPU's work only: the engine's CPU work per step
    is ``sim.cost.engine_cpu``'s.
    """

    name: str = Field(min_length=1)
    peak_flops_per_s: PositiveFloat
    memory_bandwidth_bytes_per_s: PositiveFloat
    memory_bytes: PositiveFloat
    # Total memory as CUDA reports it (torch.cuda.mem_get_info()[1]), what vLLM
    # multiplies by gpu_memory_utilization; a little below the datasheet figure
    # (the driver keeps some). None: use memory_bytes (sim.hardware.kv_capacity).
    cuda_memory_bytes: PositiveFloat | None = None
    compute_efficiency: Fraction = 0.6
    memory_efficiency: Fraction = 0.8
    # The GPU-to-GPU link its servers have (a ``sim.hardware.parallel`` preset
    # name): a scenario's ``parallelism.link`` defaults to it, and an NVLink is
    # refused for a GPU without one. None: not known (a CPU, a custom part).
    gpu_link: str | None = None

    @property
    def effective_flops_per_s(self) -> float:
        """The FLOP/s a real engine reaches: datasheet peak x compute efficiency."""
        return self.peak_flops_per_s * self.compute_efficiency

    @property
    def effective_bytes_per_s(self) -> float:
        """The bandwidth a real engine reaches: datasheet x memory efficiency."""
        return self.memory_bandwidth_bytes_per_s * self.memory_efficiency


_GIB = 2**30
_MIB = 2**20
# What the driver keeps of nvidia-smi's total where CUDA's is not known (gpus.toml).
_DRIVER_RESERVED_BYTES = 0.43 * _GIB
GPUS_FILE = Path(__file__).with_name("gpus.toml")


class GpuPreset(Frozen):
    """One table of ``gpus.toml``: a hardware preset and what else is known of the card
    (the names kernel tables give it, its price); the file's header says each field."""

    spec: HardwareSpec
    aiconfigurator_gpu: str | None = None
    kernel_table_gpus: frozenset[str] = frozenset()
    no_kernel_tables: str | None = None
    price_per_hour_usd: PositiveFloat | None = None

    @property
    def table_gpus(self) -> frozenset[str]:
        """Every name a kernel artifact's ``provenance.gpu`` may give this card."""
        aiconfigurator = self.aiconfigurator_gpu
        own = frozenset() if aiconfigurator is None else frozenset({aiconfigurator})
        return own | self.kernel_table_gpus


def _gpu_preset(name: str, table: Mapping[str, Any], path: Path) -> GpuPreset:
    """A ``gpus.toml`` table as a preset; CUDA's memory from whichever figure it gives."""
    fields = dict(table)
    cuda_memory_bytes = fields.pop("cuda_memory_bytes", None)
    if "cuda_memory_gib" in fields:
        cuda_memory_bytes = fields.pop("cuda_memory_gib") * _GIB
    if "nvidia_smi_memory_mib" in fields:
        cuda_memory_bytes = fields.pop("nvidia_smi_memory_mib") * _MIB - _DRIVER_RESERVED_BYTES
    card = {key: fields.pop(key) for key in tuple(GpuPreset.model_fields) if key in fields}
    link = fields.pop("link", None)
    spec = {"name": name, "cuda_memory_bytes": cuda_memory_bytes, "gpu_link": link}
    try:
        return GpuPreset(spec=HardwareSpec(**spec, **fields), **card)
    except ValidationError as error:
        raise ConfigError(format_error(f"{path} [{name}]", error, table)) from None


def load_gpu_presets(path: Path = GPUS_FILE) -> Mapping[str, GpuPreset]:
    """``gpus.toml``'s presets by name, in the file's order."""
    with path.open("rb") as f:
        tables = tomllib.load(f)
    return MappingProxyType({name: _gpu_preset(name, t, path) for name, t in tables.items()})


GPU_PRESETS = load_gpu_presets()
# servesim hardware preset -> the GPU's name in aiconfigurator-core's database.
AICONFIGURATOR_GPUS: Mapping[str, str] = MappingProxyType(
    {name: gpu.aiconfigurator_gpu for name, gpu in GPU_PRESETS.items() if gpu.aiconfigurator_gpu}
)
# servesim hardware preset -> names a kernel artifact's provenance.gpu may use.
SOURCE_GPU_NAMES: Mapping[str, frozenset[str]] = MappingProxyType(
    {name: gpu.table_gpus for name, gpu in GPU_PRESETS.items() if gpu.table_gpus}
)


# Hugging Face configs written in the repo (HF_CONFIGS above) are model
# presets too, as the dense ModelSpec with their weight and KV bytes, and so
# are their aliases (llama-3-8b is llama-3.1-8b's shapes under another name).
# Their context limit is the presets' table's (MAX_CONTEXT_TOKENS, by name), as any preset's.
_FROM_CONFIGS = {
    name: load_architecture(name).model_copy(update={"max_context_tokens": None})
    for name in HF_CONFIGS
}
_ALIASED = [
    _FROM_CONFIGS[to].model_copy(update={"name": a}) for a, to in MODEL_SPEC_ALIASES.items()
]
MODEL_PRESETS: Mapping[str, ModelSpec] = MappingProxyType(
    {m.name: m for m in [*_ALIASED, *_MODELS, *_FROM_CONFIGS.values()]}
)
HARDWARE_PRESETS: Mapping[str, HardwareSpec] = MappingProxyType(
    {name: gpu.spec for name, gpu in GPU_PRESETS.items()}
)

_Spec = TypeVar("_Spec", bound=BaseModel)


def lookup_preset(presets: Mapping[str, _Spec], kind: str, name: str) -> _Spec:
    """``presets[name]``; a ConfigError listing the known names if there is none."""
    try:
        return presets[name]
    except KeyError:
        known = ", ".join(sorted(presets))
        raise ConfigError(f"unknown {kind} preset {name!r}; known: {known}") from None


def model_preset(name: str) -> ModelSpec:
    """The model preset called ``name``; ConfigError listing known names if none."""
    return lookup_preset(MODEL_PRESETS, "model", name)


def hardware_preset(name: str) -> HardwareSpec:
    """The hardware preset called ``name``; ConfigError listing known names if none."""
    return lookup_preset(HARDWARE_PRESETS, "hardware", name)


def preset_validator(presets: Mapping[str, _Spec], kind: str) -> Any:
    """Before-validator turning a name or ``{preset: name, **overrides}`` into a dict."""

    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            return lookup_preset(presets, kind, value)
        if isinstance(value, dict) and "preset" in value:
            overrides = {k: v for k, v in value.items() if k != "preset"}
            return {**lookup_preset(presets, kind, value["preset"]).model_dump(), **overrides}
        return value

    return resolve


def _looks_like_path(name: str, base_dir: Path | None) -> bool:
    """A ``model:`` string naming a file or folder rather than a preset."""
    if name.endswith(".json") or "/" in name or "\\" in name:
        return True
    return anchored(name, base_dir).is_dir()


def resolve_model(name: str, base_dir: Path | None = None) -> ModelSpec:
    """A model preset, or the model of a ``config.json`` (a file or its folder; a
    relative path anchored at ``base_dir``, a scenario's folder). ConfigError naming
    the preset, the file or the field otherwise."""
    # An empty name is no path: anchored, it named the scenario's own folder.
    if name in MODEL_PRESETS or not name.strip() or not _looks_like_path(name, base_dir):
        try:
            return model_preset(name)
        except ConfigError as error:
            raise ConfigError(f"{error}; or a config.json path") from None
    return read_hf_config(anchored(name, base_dir))


def _resolve_model_field(value: Any, info: ValidationInfo) -> Any:
    """Before-validator of ``model:``: a preset, a path, ``{preset: either,
    **overrides}`` or an inline spec; paths anchored at the validation context's
    ``base_dir``."""
    base_dir = (info.context or {}).get("base_dir")
    if isinstance(value, str):
        return resolve_model(value, base_dir)
    if isinstance(value, dict) and "preset" in value:
        preset = value["preset"]
        if not isinstance(preset, str):
            raise ConfigError(f"preset must be a name or a config.json path, not {preset!r}")
        overrides = {k: v for k, v in value.items() if k != "preset"}
        return {**resolve_model(preset, base_dir).model_dump(), **overrides}
    if not isinstance(value, dict | ModelSpec):
        # Else pydantic's "Input should be a valid dictionary" names none of the forms.
        raise ConfigError(
            f"expected a preset name, a config.json path or a mapping (an inline spec), "
            f"not {value!r}"
        )
    return value


# Scenario field types. Inside pydantic a ConfigError from an unknown name is a
# ValueError, so it surfaces as a ValidationError carrying the same message and
# the field path; the scenario loader turns that into a one-line ConfigError.
ModelRef = Annotated[ModelSpec, BeforeValidator(_resolve_model_field)]
HardwareRef = Annotated[
    HardwareSpec, BeforeValidator(preset_validator(HARDWARE_PRESETS, "hardware"))
]


def model_from_ref(value: Any, base_dir: Path | None = None, where: str = "model") -> ModelSpec:
    """Whatever a scenario's ``model:`` accepts, resolved as it resolves it, for command
    lines (``calibrate --from-run --model``); ``where`` names the option in errors."""
    try:
        return _MODEL_REF.validate_python(value, context={"base_dir": base_dir})
    except ValidationError as error:
        raise ConfigError(format_error("", error, value, where)) from None


_MODEL_REF: TypeAdapter[ModelSpec] = TypeAdapter(ModelRef)
