"""A speculative decoding step priced from its parts, as vLLM v1 runs it.

Every step in which sequences decode speculatively (``k`` draft tokens each,
``sim.engine.speculative`` says how many are accepted) costs, in order::

    step_s = verify_s + propose_gpu_s + propose_cpu_s + rejection_s + bookkeeping_s   [s]

- ``verify_s``: the target's forward pass with each decoding sequence a chunk
  of ``k + 1`` tokens after its context (``SpeculativeCost.verify_shape``; an
  n-gram miss comes as a one-token chunk, ``sim.engine.speculative``), priced
  by the target's own cost model, plus the ``k`` LM-head rows of each drafting
  sequence beyond the one a chunk's shape gives (vLLM computes logits at all
  ``k + 1`` positions, ``_calc_spec_decode_metadata``): the target's own LM head
  at those rows and, with tensor parallelism, their logits all-gather
  (``step_and_rows_s`` of the roofline or the kernel tables, which prices the
  step and its rows at once; a fit of whole steps has no LM head to add them to);
- ``propose_gpu_s``: the proposer's ``k`` passes on the roofline, one over
  every token the step computed (the ``k + 1`` verified tokens of each decoding
  sequence and every prefill chunk), then ``k - 1`` one-token passes of every
  sequence of the step (vLLM's ``SpecDecodeBaseProposer.propose``, shared by
  EAGLE and the draft model), of its model: a ``draft_model`` as given, an EAGLE
  head (``eagle_head``), or none (``ngram``);
- ``propose_cpu_s``: ``PROPOSER_CPU_S_PER_PASS`` a pass of a model proposer;
  n-gram matching per step, per sequence and per context token (``NgramCpu``),
  over every sequence of the step, matched or not, decoding or prefilling;
- ``rejection_s``: the rejection sampler, ``3 x 4 B x num_seqs x (k + 1) x
  vocab`` over the effective memory bandwidth;
- ``bookkeeping_s``: vLLM's extra engine CPU work a drafting sequence
  (``DRAFT_BOOKKEEPING_S_PER_SEQ``: the scheduler scheduling its drafts,
  rolling back the rejected ones and taking the next; the runner parsing the
  rejection sampler's output), beyond the plain per-sequence work the
  target's engine-CPU model prices.

vLLM 0.19 runs a model proposer after every step, a prefill-only one too
(``vllm/v1/worker/gpu_model_runner.py`` ``sample_tokens``, lines 4203-4224 of the
0.19.0 wheel: ``propose_draft_token_ids`` whenever the step fits the drafter's
length, whatever it scheduled): the first pass over the prompt's tokens fills
the proposer's KV cache and drafts the first ``k`` tokens of a request whose
prefill completes, which its first decode step verifies; a chunk that does not
finish its prompt is run all the same, its drafts discarded. So a step with no
decoding sequence costs what the target says plus, for a model proposer, its
passes and their CPU work (no rejection sampler: nothing was drafted for it);
with an n-gram proposer, its CPU work. Each part's source, and the simplifications (the
proposer on one GPU at its own size, the sampler's work whatever the
temperature): ``docs/speculative.md``, "The parts of a step".
``draft_cost_fraction`` (a scenario's own figure: one draft decode step is that
fraction of the target's) prices the proposer by formula
instead, and no rejection sampler or bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from sim.cost.base import CostModel, StepShape, decode_run_s
from sim.cost.engine_cpu import EngineCpuCost, with_cpu_s
from sim.cost.kernels.config import kernel_cost_class
from sim.cost.roofline import RooflineCost
from sim.hardware.specs import HardwareSpec, ModelSpec

ProposerKind = Literal["draft_model", "eagle", "eagle3", "ngram"]

# EAGLE-3's heads predict over a reduced draft vocabulary ("draft_vocab_size" of the
# published Llama-3.1-8B / 3.3-70B heads), in tokens.
EAGLE3_DRAFT_VOCAB_TOKENS = 32_000

# CPU time to prepare and launch one forward pass of a model proposer, in s: an
# ESTIMATE from SpecDecode-Bench's EAGLE fit (docs/speculative.md).
PROPOSER_CPU_S_PER_PASS = 1.5e-4

# vLLM's extra engine CPU time a drafting sequence and step, in s: MEASURED from
# vLLM 0.19.0's own code (benchmarks/vllm_spec_scheduler_cpu.py, docs/speculative.md).
DRAFT_BOOKKEEPING_S_PER_SEQ = 3.5e-6

# Rejection sampler: bytes moved per logit (fp32 probabilities written from the
# logits, read back by the rejection and recovery kernels: 3 passes of 4 B).
REJECTION_BYTES_PER_LOGIT = 12.0


@dataclass(frozen=True)
class NgramCpu:
    """CPU time of vLLM's n-gram (prompt-lookup) proposer after a step, in s: per call,
    per sequence that sampled a token (matched or not) and per context token (its
    numba kernel scans each whole context). MEASURED on this project's CPU from vLLM
    0.19.0's own proposer (benchmarks/ngram_proposer_cpu.py, docs/speculative.md);
    0.24.0's, run alternately with it, is not told apart, so it holds for both."""

    per_step_s: float = 12.2e-6
    per_seq_s: float = 1.70e-6
    per_context_token_s: float = 1.05e-9

    def cpu_s(self, num_seqs: int, context_tokens: int) -> float:
        if num_seqs == 0:
            return 0.0
        return (
            self.per_step_s + self.per_seq_s * num_seqs + self.per_context_token_s * context_tokens
        )


NGRAM_CPU = NgramCpu()


def eagle_head(target: ModelSpec, kind: Literal["eagle", "eagle3"]) -> ModelSpec:
    """The EAGLE head of ``target`` as a one-layer model the roofline can price: one
    decoder layer of the target's width (a mixture-of-experts target's expert width),
    the LM head over the target's vocabulary (EAGLE-3: its draft vocabulary). The
    embedding table is the target's (``tied_embeddings``: rows looked up, not read)."""
    vocab = target.vocab_size
    if kind == "eagle3":
        vocab = min(vocab, EAGLE3_DRAFT_VOCAB_TOKENS)
    intermediate = (
        target.moe.expert_intermediate_size if target.moe is not None else target.intermediate_size
    )
    return target.model_copy(
        update={
            "name": f"{kind}-head({target.name})",
            "num_layers": 1,
            "intermediate_size": intermediate,
            "vocab_size": vocab,
            "tied_embeddings": True,
            "moe": None,
            "num_learned_positions": 0,
            "sliding_window_tokens": None,
            "num_sliding_window_layers": 0,
        }
    )


@dataclass(frozen=True)
class Proposer:
    """What proposes the ``k`` draft tokens and how it is priced (module docstring).

    ``model``: the draft model's or EAGLE head's GPU cost (None for n-gram);
    ``cost_fraction``: a scenario's own formula instead of parts (then ``kind``
    is None and nothing else is priced)."""

    kind: ProposerKind | None
    model: CostModel | None = None
    cpu_s_per_pass: float = PROPOSER_CPU_S_PER_PASS
    ngram: NgramCpu = NGRAM_CPU
    cost_fraction: float | None = None

    @property
    def label(self) -> str:
        if self.cost_fraction is not None:
            return f"draft {self.cost_fraction}x target"
        if self.model is not None:
            return f"{self.kind} {self.model.label}"
        return f"{self.kind} (CPU)"


@dataclass(frozen=True)
class StepParts:
    """One speculative step's time by part, in s (module docstring)."""

    verify_s: float
    propose_gpu_s: float
    propose_cpu_s: float
    rejection_s: float
    bookkeeping_s: float

    @property
    def total_s(self) -> float:
        return (
            self.verify_s
            + self.propose_gpu_s
            + self.propose_cpu_s
            + self.rejection_s
            + self.bookkeeping_s
        )


class SpeculativeCost:
    """A cost model's steps with every decoding sequence verifying k + 1 tokens,
    plus the proposer and the rejection sampler (module docstring)."""

    def __init__(
        self,
        target: CostModel,
        num_draft_tokens: int,
        proposer: Proposer,
        *,
        vocab_size: int = 0,
        rejection_s_per_logit: float = 0.0,
    ) -> None:
        self.target = target
        self.num_draft_tokens = num_draft_tokens
        self.proposer = proposer
        # The proposer's GPU cost, for what walks the cost models it wraps.
        self.draft = proposer.model
        self.vocab_size = vocab_size
        self.rejection_s_per_logit = rejection_s_per_logit
        # The target's GPU model prices a verification with its extra LM-head rows
        # (the engine's CPU work, if any, then added by its one rule, ``with_cpu_s``);
        # a fit of whole steps (calibrated, fitted, linear) has no LM head to add rows to.
        cpu = target if isinstance(target, EngineCpuCost) else None
        gpu = target if cpu is None else cpu.gpu
        self._cpu_costs = None if cpu is None else cpu.costs
        kernels = kernel_cost_class()  # (None: no kernel tables were built)
        self._step_and_rows_s = (
            gpu.step_and_rows_s
            if isinstance(gpu, RooflineCost) or (kernels and isinstance(gpu, kernels))
            else None
        )

    @property
    def label(self) -> str:
        return (
            f"{self.target.label} + speculative(k={self.num_draft_tokens}, {self.proposer.label})"
        )

    def verify_shape(self, shape: StepShape) -> StepShape:
        """``shape`` with each decode sequence turned into a chunk of k + 1 tokens.

        A sequence of context ``p + 1`` (``p`` cached) verifies ``c = k + 1``
        tokens: ``c p + c (c + 1) / 2`` attention pairs, ``p + c`` KV tokens read.
        """
        n = shape.num_decode_seqs
        cached = shape.num_decode_context_tokens - n  # sum of p
        c = self.num_draft_tokens + 1
        return StepShape(
            num_prefill_seqs=shape.num_prefill_seqs + n,
            num_prefill_tokens=shape.num_prefill_tokens + c * n,
            prefill_attention_pairs=shape.prefill_attention_pairs
            + c * cached
            + n * c * (c + 1) // 2,
            prefill_kv_read_tokens=shape.prefill_kv_read_tokens + cached + c * n,
        )

    def verify_s(self, shape: StepShape) -> float:
        """Seconds of the target's verification of a step of ``shape`` (a decode):
        its forward pass over ``verify_shape``, whose LM head runs at one position
        a sequence, plus the ``k`` more rows of each drafting sequence: vLLM computes
        logits at all ``k + 1`` of its positions (``_calc_spec_decode_metadata``),
        and with tensor parallelism gathers them all (``step_and_rows_s``)."""
        verify = self.verify_shape(shape)
        if self._step_and_rows_s is None:
            return self.target.step_s(verify)
        # The step and its rows from one pricing of the verification (its GPU model's).
        gpu_s, rows_s = self._step_and_rows_s(verify, self.num_draft_tokens * shape.num_decode_seqs)
        tokens = verify.num_prefill_tokens + verify.num_decode_seqs
        if self._cpu_costs is None or tokens == 0:
            return gpu_s + rows_s
        seqs = verify.num_prefill_seqs + verify.num_decode_seqs
        return with_cpu_s(self._cpu_costs, gpu_s, seqs, tokens) + rows_s

    def draft_s(self, shape: StepShape) -> float:
        """Seconds of the proposer's GPU passes after a step of ``shape``, as vLLM's
        ``SpecDecodeBaseProposer.propose`` runs them: a pass over every token the step
        computed (each decoding sequence's k + 1 verified tokens, each prefill chunk
        after its cached tokens), then k − 1 one-token passes of every sequence;
        or a scenario's ``draft_cost_fraction`` of k target steps of its decodes."""
        k = self.num_draft_tokens
        n = shape.num_decode_seqs
        fraction = self.proposer.cost_fraction
        if fraction is not None:
            if n == 0:
                return 0.0  # the formula drafts for decodes only
            decode = StepShape(0, 0, 0, 0, *shape[4:])  # the decodes alone
            return fraction * k * self.target.step_s(decode)
        model = self.proposer.model
        if model is None or shape.is_empty:
            return 0.0
        first = model.step_s(self.verify_shape(shape))
        if k == 1:
            return first
        # The next passes decode one token a sequence after the first pass's
        # (at most; the rejected are overwritten): a decoding sequence's context
        # k further on, a prefill chunk's its cached and new tokens. The longest
        # and shortest are known for the decodes alone (a chunk's is not kept).
        alone = shape.num_prefill_seqs == 0
        num_seqs = n + shape.num_prefill_seqs
        context = shape.num_decode_context_tokens + k * n + shape.prefill_kv_read_tokens
        longest = (
            shape.max_decode_context_tokens + k if alone and shape.max_decode_context_tokens else 0
        )
        shortest = (
            shape.min_decode_context_tokens + k if alone and shape.min_decode_context_tokens else 0
        )
        rest = decode_run_s(model, num_seqs, context, longest, shortest)
        # numpy's sum (pairwise past 8 terms): the passes' seconds as ever summed.
        return first + float(np.fromiter(rest, np.float64, k - 1).sum())

    def parts_s(self, shape: StepShape) -> StepParts:
        """The step's time by part (with no decode: the target's, a model proposer's
        passes after it and their CPU work, or an n-gram proposer's CPU work)."""
        n = shape.num_decode_seqs
        context = shape.num_decode_context_tokens
        proposer = self.proposer
        cpu_s = 0.0
        if proposer.kind == "ngram":
            # Every sequence of the step, drafting or not: an undrafted decode and a
            # prompt's last chunk are its one-token and longer chunks, whose KV read
            # is their context (a chunk that samples nothing is priced all the same).
            cpu_s = proposer.ngram.cpu_s(
                shape.num_prefill_seqs + n, shape.prefill_kv_read_tokens + context
            )
        if proposer.model is not None and not shape.is_empty:
            cpu_s = proposer.cpu_s_per_pass * self.num_draft_tokens
        if n == 0:
            # Nothing to verify: the target's step, then the proposer's passes over
            # its prompts' tokens (the drafts their first decode step verifies).
            return StepParts(self.target.step_s(shape), self.draft_s(shape), cpu_s, 0.0, 0.0)
        if proposer.cost_fraction is not None:
            rejection_s = bookkeeping_s = 0.0
        else:
            logits = n * (self.num_draft_tokens + 1) * self.vocab_size
            rejection_s = self.rejection_s_per_logit * logits
            bookkeeping_s = DRAFT_BOOKKEEPING_S_PER_SEQ * n
        return StepParts(
            verify_s=self.verify_s(shape),
            propose_gpu_s=self.draft_s(shape),
            propose_cpu_s=cpu_s,
            rejection_s=rejection_s,
            bookkeeping_s=bookkeeping_s,
        )

    def step_s(self, shape: StepShape) -> float:
        return self.parts_s(shape).total_s


def rejection_s_per_logit(hardware: HardwareSpec) -> float:
    """Seconds the rejection sampler spends a logit on ``hardware`` (memory-bound)."""
    return REJECTION_BYTES_PER_LOGIT / hardware.effective_bytes_per_s


def speculative_step_cost(
    target: CostModel,
    target_model: ModelSpec,
    hardware: HardwareSpec,
    num_draft_tokens: int,
    kind: ProposerKind | None,
    draft_model: ModelSpec | None = None,
    draft_cost_fraction: float | None = None,
) -> SpeculativeCost:
    """``target``'s cost model made speculative: ``kind``'s proposer (its model priced
    by the roofline on ``hardware``: ``draft_model`` as given, an EAGLE head derived
    from ``target_model``), the rejection sampler over ``target_model``'s vocabulary;
    or, with ``kind`` None, ``draft_cost_fraction``'s formula."""
    if kind is None:
        if draft_cost_fraction is None:
            raise ValueError("a proposer kind or a draft_cost_fraction is needed")
        return SpeculativeCost(
            target, num_draft_tokens, Proposer(None, cost_fraction=draft_cost_fraction)
        )
    model: CostModel | None = None
    if kind == "draft_model":
        if draft_model is None:
            raise ValueError("the draft_model proposer needs a draft model")
        model = RooflineCost(draft_model, hardware)
    elif kind in ("eagle", "eagle3"):
        model = RooflineCost(eagle_head(target_model, kind), hardware)
    return SpeculativeCost(
        target,
        num_draft_tokens,
        Proposer(kind, model),
        vocab_size=target_model.vocab_size,
        rejection_s_per_logit=rejection_s_per_logit(hardware),
    )
