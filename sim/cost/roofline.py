"""Roofline cost model: a step takes as long as the slower of its FLOPs and its bytes.

For a step of shape ``s`` on model ``m`` and hardware ``h``::

    tokens    = s.num_prefill_tokens + s.num_decode_seqs                      [tokens]
    seqs      = s.num_prefill_seqs + s.num_decode_seqs   (one logits position each)
    flops     = m.dense_flops_per_token * seqs                 layers + LM head [FLOP]
              + m.layer_flops_per_token
                  * (s.num_prefill_tokens - s.num_prefill_seqs)     layers only [FLOP]
              + 4 * layers * heads * head_dim
                  * (s.prefill_attention_pairs + s.num_decode_context_tokens) [FLOP]
    bytes     = m.weight_bytes                      (every weight read once)  [B]
              + m.kv_bytes_per_token
                  * (s.prefill_kv_read_tokens + s.num_decode_context_tokens)  [B] KV read
              + m.kv_bytes_per_token * tokens                                 [B] KV written
    compute_s = flops / (h.peak_flops_per_s * h.compute_efficiency)           [s]
    memory_s  = bytes / (h.memory_bandwidth_bytes_per_s * h.memory_efficiency)[s]
    step_s    = max(compute_s, memory_s)                                      [s]

The GPU's work only: the engine's CPU work per step (scheduling, input
preparation, output processing) is ``sim.cost.engine_cpu``'s, added or
overlapped by the cost factory. An empty step costs 0 s. Small decode batches
are memory-bound (about weight bytes / effective bandwidth per step); long
prefills are compute-bound.
Activations are ignored: they stay on chip or are small next to weights and KV.
Nor is the sampler priced (vLLM's, per sequence: about ``10 B x vocab`` moved
and a fixed launch cost, docs/kernels.md), nor a tensor-parallel replica's
logits all-gather (per sequence): the kernel tables price both.

``ModelSpec.dense_flops_per_token`` (``layer_flops_per_token`` plus
``lm_head_flops_per_token``) and ``weight_bytes`` say what the model's layers,
MLP kind and LM head count. The LM head runs at one position a sequence, not
at every token, as vLLM v1 runs it: ``vllm/v1/worker/gpu_model_runner.py``
(0.19.0), ``GPUModelRunner._prepare_inputs`` sets ``logits_indices =
query_start_loc[1:] - 1``, the last scheduled position of every request, and
``execute_model`` computes ``compute_logits(hidden_states[logits_indices])``;
a chunk that does not finish its prompt gets its logits too (vLLM samples and
discards them). Its weights are still read once a step. A decode-only step
is priced as ever (a decode's one token is its logits position). With drafts
scheduled vLLM computes ``k + 1`` positions of a drafting request
(``_calc_spec_decode_metadata``), where a verification's shape says one:
``sim.cost.speculative`` adds the other ``k`` rows' FLOPs (``step_and_rows_s``,
inside the step's max). A sliding window is not applied: attention
FLOPs and KV reads are full attention's, an over-estimate past the window (a
step's shape keeps only sums of context lengths).

Given a ``ParallelismConfig``, ``RooflineCost`` prices a replica split over GPUs
by tensor and pipeline parallelism.

Tensor parallel over ``tp`` GPUs: each GPU does 1/tp of the FLOPs and reads
1/tp of the weight bytes and of the KV bytes (KV heads replicated past
``tp = num_kv_heads``), and every layer ends its attention and its MLP with an
all-reduce of the activations, priced as NCCL runs it over the link
(``sim.cost.collectives``: its base latency, hops and the protocol it picks)::

    message_bytes = tokens / m * hidden * activation_bytes                  [B]
    comm_s        = 2 * layers * all_reduce(message_bytes, tp, link)         [s]

Pipeline parallel over ``pp`` stages of ``layers / pp`` layers. A step's batch
goes through the stages as ``m`` micro-batches (GPipe schedule; ``m`` is
``num_micro_batches`` capped by the step's sequences). With ``C``, ``W``, ``K``
the compute, weight-read and KV-read times of the whole model on one tp group,
and ``comm_s`` one micro-batch's all-reduces::

    stage_s = (max(C / m, W + K / m) + comm_s) / pp                   one micro-batch
    p2p_s   = send_recv(tokens / m * hidden * activation_bytes, link)  one stage-to-stage hop
    step_s  = (m + pp - 1) * stage_s + (pp - 1) * p2p_s

With ``m = 1`` this is the one-group roofline plus the all-reduces plus
``pp - 1`` hops; ``tp = pp = 1`` is exactly ``RooflineCost``.

Simplified: the engine runs one step at a time, so pipeline parallelism here
buys memory (more KV blocks) and, with micro-batches, a faster compute-bound
prefill, but never the throughput of several steps in flight (whose bound
would be the slowest stage, ``step_s / pp``). Stages are assumed equal
(embedding and LM head spread evenly). Micro-batches re-read each stage's
weights, so they slow memory-bound decode, as they do on real hardware.
"""

from __future__ import annotations

from sim.cost.base import StepShape
from sim.cost.collectives import collective_s
from sim.errors import ConfigError
from sim.hardware.kv_capacity import activation_dtype_bytes
from sim.hardware.parallel import ParallelismConfig, kv_heads_per_gpu, layout_problem
from sim.hardware.specs import HardwareSpec, ModelSpec


class RooflineCost:
    """Step time from model and hardware specs by the roofline formula (see module),
    on one GPU, or (``parallelism``) per GPU of a tensor/pipeline-parallel replica
    plus its all-reduces and pipeline stages.

    Always a guess: its label says "(uncalibrated)", whether a scenario asked
    for it or ``kind: auto`` fell back to it, so that no report passes it off
    as a measurement.
    """

    __slots__ = (
        "_activation_bytes_per_token",
        "_fixed_cache",
        "_max_micro_batches",
        "_num_allreduces",
        "_p2p_hops",
        "_pp",
        "_s_per_attention_pair",
        "_s_per_dense_token",
        "_s_per_kv_token",
        "_s_per_layer_token",
        "_s_per_lm_head_row",
        "_weight_s",
        "hardware",
        "model",
        "parallelism",
    )

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareSpec,
        parallelism: ParallelismConfig | None = None,
    ) -> None:
        self.model = model
        self.hardware = hardware
        self.parallelism = parallelism
        tp = 1
        if parallelism is not None:
            problem = layout_problem(model, parallelism)
            if problem is not None:
                raise ConfigError(problem)
            tp = parallelism.tensor_parallel_size
            self._activation_bytes_per_token = model.hidden_size * activation_dtype_bytes(model)
            self._num_allreduces = 2 * model.num_layers  # attention output and MLP output
            self._pp = parallelism.pipeline_parallel_size
            self._max_micro_batches = parallelism.num_micro_batches
            self._p2p_hops = self._pp - 1
            self._fixed_cache: dict[tuple[int, int], tuple[float, float, float]] = {}
        # Everything is folded into seconds-per-count constants once, so that
        # step_s is a handful of float operations. One GPU of a tp group does 1/tp
        # of the FLOPs and weight reads (x / 1 is exact: tp = 1 is the plain roofline).
        flops_per_s = hardware.effective_flops_per_s
        bytes_per_s = hardware.effective_bytes_per_s
        kv_share = kv_heads_per_gpu(model, tp) / model.num_kv_heads
        # A token with logits (its layers and the LM head's), one without (layers only).
        self._s_per_dense_token = model.dense_flops_per_token / tp / flops_per_s
        self._s_per_layer_token = model.layer_flops_per_token / tp / flops_per_s
        self._s_per_lm_head_row = model.lm_head_flops_per_token / tp / flops_per_s
        self._s_per_attention_pair = model.attention_flops_per_pair / tp / flops_per_s
        self._weight_s = model.weight_bytes / tp / bytes_per_s
        self._s_per_kv_token = model.kv_bytes_per_token * kv_share / bytes_per_s

    @property
    def label(self) -> str:
        p = self.parallelism
        where = (
            self.hardware.name if p is None else f"{self.hardware.name}x{p.num_gpus}({p.layout})"
        )
        return f"roofline:{self.model.name}@{where} (uncalibrated)"

    def compute_s(self, shape: StepShape) -> float:
        """Seconds the step's FLOPs take at effective peak (a GPU's)."""
        seqs = shape.num_prefill_seqs + shape.num_decode_seqs  # one logits position each
        pairs = shape.prefill_attention_pairs + shape.num_decode_context_tokens
        return (
            self._s_per_dense_token * seqs
            + self._s_per_layer_token * (shape.num_prefill_tokens - shape.num_prefill_seqs)
            + self._s_per_attention_pair * pairs
        )

    def memory_s(self, shape: StepShape) -> float:
        """Seconds the step's weight and KV traffic take at effective bandwidth (a GPU's)."""
        return self._weight_s + self._kv_s(shape)

    def _kv_s(self, shape: StepShape) -> float:
        """Seconds of the step's KV traffic (read and written) at effective bandwidth."""
        kv_tokens = (
            shape.prefill_kv_read_tokens
            + shape.num_decode_context_tokens
            + shape.num_prefill_tokens
            + shape.num_decode_seqs
        )
        return self._s_per_kv_token * kv_tokens

    def step_and_rows_s(self, shape: StepShape, num_rows: int) -> tuple[float, float]:
        """``step_s(shape)`` and the seconds ``num_rows`` more LM-head rows (logits
        positions) add to it, from one evaluation of the step's compute and memory:
        the rows' FLOPs inside the step's max, hidden where it is memory-bound (the
        head's weights are read once a step whatever its rows). A verification's
        drafts are such rows (``sim.cost.speculative``). No logits all-gather is
        priced for them, as none is for a step's own rows (the module docstring):
        the kernel tables price it."""
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return 0.0, 0.0
        compute, kv = self.compute_s(shape), self._kv_s(shape)
        extra = self._s_per_lm_head_row * num_rows
        if self.parallelism is None:
            memory = self._weight_s + kv
            step = compute if compute > memory else memory
            return step, max(compute + extra, memory) - step
        # Per micro-batch, in each of the pipeline's slots (``step_s``).
        m = max(1, min(self._max_micro_batches, shape.num_prefill_seqs + shape.num_decode_seqs))
        slots, comm, p2p = self._fixed_s(tokens, m)
        memory = self._weight_s + kv / m
        bound = max(compute / m, memory)
        return slots * (bound + comm) + p2p, slots * (max((compute + extra) / m, memory) - bound)

    def step_s(self, shape: StepShape) -> float:
        # compute_s and memory_s inlined: this runs millions of times per run.
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return 0.0
        context = shape.num_decode_context_tokens
        # The LM head at one position a sequence, the layers at every token.
        prefill_seqs = shape.num_prefill_seqs
        seqs = prefill_seqs + shape.num_decode_seqs
        headless = shape.num_prefill_tokens - prefill_seqs
        if self.parallelism is None:
            compute = (
                self._s_per_dense_token * seqs
                + self._s_per_layer_token * headless
                + self._s_per_attention_pair * (shape.prefill_attention_pairs + context)
            )
            memory = self._weight_s + self._s_per_kv_token * (
                shape.prefill_kv_read_tokens + context + tokens
            )
            # A conditional expression is several times cheaper than calling max().
            return compute if compute > memory else memory
        # A parallel replica (the module's): m micro-batches through the stages.
        m = max(1, min(self._max_micro_batches, seqs))
        slots, comm, p2p = self._fixed_s(tokens, m)
        compute = (
            self._s_per_dense_token * seqs
            + self._s_per_layer_token * headless
            + self._s_per_attention_pair * (shape.prefill_attention_pairs + context)
        ) / m
        memory = (
            self._weight_s
            + self._s_per_kv_token * (shape.prefill_kv_read_tokens + context + tokens) / m
        )
        return slots * ((compute if compute > memory else memory) + comm) + p2p

    def _fixed_s(self, tokens: int, m: int) -> tuple[float, float, float]:
        """(slots, per-micro-batch all-reduce, pipeline transfers) for a parallel step."""
        cached = self._fixed_cache.get((tokens, m))
        if cached is not None:
            return cached
        assert self.parallelism is not None  # (only a parallel replica's step_s calls it)
        slots = (m + self._pp - 1) / self._pp
        link, tp = self.parallelism.link, self.parallelism.tensor_parallel_size
        message_bytes = tokens / m * self._activation_bytes_per_token
        comm = self._num_allreduces * collective_s("all_reduce", message_bytes, tp, link)
        p2p = 0.0
        if self._p2p_hops:
            p2p = self._p2p_hops * collective_s("send_recv", message_bytes, 2, link)
        self._fixed_cache[(tokens, m)] = out = (slots, comm, p2p)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"
