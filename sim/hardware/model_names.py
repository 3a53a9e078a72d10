"""Whether a name a record gives (a measured run, a kernel profile) is the model priced.

A record of another model must be refused, not priced: ``servesim validate`` (a run
against its scenario), ``calibrate --from-run`` (a run against ``--model``) and the
kernel tables (a profile against the architecture it prices) ask this one rule.

Two names are the same model when, after the organisation (``meta-llama/``), letter
case, a ``Meta-`` prefix and the alias table (``models.toml``'s ``[aliases]``: the
same shapes under another name) are set aside, they differ only in trailing
fine-tune words (``instruct``, ``chat``, ...) and a release date
(``Qwen/Qwen3-30B-A3B-Instruct-2507`` is ``qwen3-30b-a3b``). Any other word is
another model: ``Qwen3-30B`` (dense) is not ``qwen3-30b-a3b`` (MoE), nor is
``llama-3-8b-longer-context-thing`` ``llama-3-8b``.

A quantization word (``AWQ``, ``FP8``, ``quantized.w8a8``, ...) is other weight
bytes, so another price: it is the model only when the scenario's
``quantization.weights`` is a dtype the word can mean, or both names carry the
same words. A name without one says nothing about the weights (vLLM may quantize a
full-precision checkpoint as it loads it), so it contradicts no quantization.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from sim.hardware.quantization import WeightDtype
from sim.hardware.specs import MODEL_SPEC_ALIASES

# Name parts of fine-tuned variants that keep the base model's shapes.
_VARIANT_WORDS = frozenset({"instruct", "chat", "base", "it", "hf", "thinking"})

# Quantization words of checkpoint names -> the weight dtypes (sim.hardware.quantization)
# each can mean: GPTQ and bitsandbytes come in 4 and 8 bits, w8a8 in int8 and fp8.
_QUANTIZATION_WORDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "awq": frozenset({"int4"}),
        "gptq": frozenset({"int4", "int8"}),
        "bnb": frozenset({"int4", "int8"}),
        "4bit": frozenset({"int4"}),
        "8bit": frozenset({"int8"}),
        "int4": frozenset({"int4"}),
        "w4a16": frozenset({"int4"}),
        "int8": frozenset({"int8"}),
        "w8a16": frozenset({"int8", "fp8"}),
        "w8a8": frozenset({"int8", "fp8"}),
        "fp8": frozenset({"fp8"}),
        "dynamic": frozenset({"fp8", "int8"}),  # FP8-dynamic: activation scales at run time
        "quantized": frozenset({"fp8", "int8", "int4"}),  # RedHatAI's quantized.w8a8
    }
)

# A release date: 2507 (Qwen's yymm), 0528, 20240229. Shorter numbers are versions.
_DATE = re.compile(r"\d{4}(\d{2}(\d{2})?)?")


def _parts(name: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """The name's identifying parts and its quantization words (lower case)."""
    short = name.strip().lower().rsplit("/", 1)[-1].removeprefix("meta-")
    for alias, preset in MODEL_SPEC_ALIASES.items():
        if short == alias or short.startswith(alias + "-"):
            short = preset + short[len(alias) :]
            break
    # Words split at - and _, and at a dot before a letter (quantized.w8a8), never
    # inside a number (llama-3.1, qwen2.5).
    parts = re.split(r"[-_]|\.(?=[a-z])", short)
    quantization = set()
    while len(parts) > 1:  # the first part always names something
        last = parts[-1]
        if last in _QUANTIZATION_WORDS:
            quantization.add(last)
        elif last not in _VARIANT_WORDS and not _DATE.fullmatch(last):
            break
        parts.pop()
    return tuple(parts), frozenset(quantization)


def same_model(model: str, named: str | None, weights: WeightDtype | None = None) -> bool:
    """Whether ``named`` (what a record says it served or profiled, in its own
    spelling) is ``model`` (a preset or architecture name) with weights stored as
    ``weights`` (the scenario's ``quantization.weights``; ``None``: the model's own).

    ``None`` for ``named`` (a record that names no model) contradicts nothing; a
    caller that needs a name (``validate``) asks for one before it asks this.
    """
    if named is None:
        return True
    (core, words), (named_core, named_words) = _parts(model), _parts(named)
    if named_core != core:
        return False
    if named_words == words:
        return True
    return weights is not None and all(weights in _QUANTIZATION_WORDS[w] for w in named_words)
