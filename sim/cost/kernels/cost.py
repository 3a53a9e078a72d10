"""``KernelCost``: a step's time as the sum of the kernels vLLM runs for it.

The step formula, how a prefill of equal chunks is priced and what ``pp``
adds are in ``docs/kernels.md`` ("The step formula"). Dense ops come from a
per-layer profile (``ops.ProfileDense``) when the artifact has one, else from
the GEMM table at vLLM's per-GPU shapes (``ops``) plus the memory-bound ops
the tables leave out (norms, activation, rotary, KV-cache write, embedding,
final norm; the sampler when no table times it), priced from bytes and the
GPU's bandwidth (``memory_ops``; a profile times them itself). The GPU's
work only: the engine's CPU work per step is ``sim.cost.engine_cpu``'s. With
``expert_parallel_size`` > 1 the MoE term is one GPU's share of an
expert-parallel group (``expert_parallel``). A profile with a skew fit
(``attention_skew``) moves decode attention from the time at the batch's mean
KV towards the time at its longest (``skew_alpha``; off with ``skew=False``).
Tables of FA2's pure kernels price a mixed step's decodes with the factor a
profile measured in the varlen kernel, carried to this GPU (``mixed_factor``;
off with ``mixed_attention=False``).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice, repeat

import numpy as np

from sim.cost.base import FloatArray, StepShape, no_decode_run
from sim.cost.kernels.artifact import DTYPE_BYTES, KernelArtifact, model_matches
from sim.cost.kernels.expert_parallel import (
    ACTIVATION_BYTES,
    ExpertParallelMoE,
    check_expert_parallel,
)
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.memory_ops import LAYER_OPS, STEP_OPS, MemoryOps, hardware_for_gpu
from sim.cost.kernels.mixed_factor import MixedDecodeFactor, applies_to, transferred_factor
from sim.cost.kernels.ops import LayerShapes, ProfileDense, layer_shapes, prefill_chunk
from sim.cost.kernels.tables import (
    SkewFit,
    allreduce_grid,
    attention_grids,
    dram_floored,
    gemm_grid,
    mixed_attention_grids,
    moe_grid,
    op_grid,
)
from sim.errors import ConfigError
from sim.hardware.parallel import LinkSpec, link_preset
from sim.hardware.specs import HardwareSpec, ModelSpec


class KernelCost:
    """Step time from measured kernel tables (see the module docstring)."""

    def __init__(
        self,
        arch: ModelSpec,
        artifact: KernelArtifact,
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        link: LinkSpec | None = None,
        expert_parallel_size: int = 1,
        hardware: HardwareSpec | None = None,
        mixed_attention: bool = True,
        memory_ops: bool = True,
        skew: bool = True,
    ) -> None:
        """``hardware`` gives the bandwidth of the memory-bound ops (``memory_ops``);
        default: the hardware preset of the GPU the artifact was measured on.

        ``mixed_attention=False`` prices a mixed step's attention as pure prefill plus
        pure decode even where the tables have the one varlen kernel (or, for FA2
        tables without it, the factor ``mixed_factor`` carries from a profile), and
        ``memory_ops=False`` leaves the memory-bound ops out: what these tables
        priced before those fixes (ablations, ``benchmarks/public_runs.py``).
        ``skew=False`` does not apply the artifact's skew fit (an ablation)."""
        self.arch, self.artifact = arch, artifact
        self.tp, self.pp = tensor_parallel_size, pipeline_parallel_size
        self.ep = expert_parallel_size
        check_expert_parallel(arch, self.ep, self.tp)
        if self.pp > arch.num_layers:
            raise ConfigError(f"pipeline_parallel_size {self.pp} > {arch.num_layers} layers")
        self.link = link if link is not None else link_preset("nvlink4")
        try:
            self.shapes: LayerShapes = layer_shapes(arch, self.tp)
        except ValueError as error:
            raise ConfigError(f"model {arch.name}: {error}") from None
        provenance = artifact.provenance
        if not model_matches(provenance.model, arch.name):
            raise ConfigError(
                f"kernel artifact ({artifact.label}) was profiled on {provenance.model}, "
                f"not {arch.name}"
            )
        if (provenance.tensor_parallel_size or self.tp) != self.tp:
            raise ConfigError(
                f"kernel artifact ({artifact.label}) was profiled at tensor parallel "
                f"{provenance.tensor_parallel_size}, the layout asks for {self.tp}"
            )
        self._build_dense(hardware, memory_ops)
        # Attention: a per-model profile's varlen lattice (one kernel per step, its
        # KV lengths counting cached tokens before this step's), else the pure tables.
        self._mixed = artifact.has("mixed_attention")
        self._mixed_attn: Grid | None = None
        self._decode_history = 0  # tokens of a decode's context that are not its KV axis
        # What of the tables is derived rather than measured (one phrase each): the
        # label, cost-breakdown and a run's caveats say it.
        self.derived: tuple[str, ...] = ()
        if self._mixed:
            profile = mixed_attention_grids(artifact)
            self._mixed_attn, self._prefill_attn, self._decode_attn = profile
            self._decode_history = 1
            if not mixed_attention:
                self._mixed_attn = None  # the sum of the pure planes (attention_s)
        else:
            s = self.shapes
            grids = attention_grids(artifact, s.num_heads, s.num_kv_heads, s.head_dim)
            self._prefill_attn, decode = grids.prefill, grids.decode
            self.derived += () if grids.derived is None else (grids.derived,)
            # Decode attention never faster than its KV streamed from DRAM (the
            # tables time a cache-resident KV: tables.dram_floored).
            kv_bytes = 2.0 * s.num_kv_heads * s.head_dim * DTYPE_BYTES.get(provenance.kv_dtype, 2.0)
            bandwidth = self._gpu(hardware).memory_bandwidth_bytes_per_s
            self._decode_attn = dram_floored(decode, kv_bytes, bandwidth)
        # FA2 tables timing pure kernels only: a mixed step's decodes slowed down as
        # the RTX 4090 profile measured them in the one varlen kernel, carried to
        # this GPU by its FLOP/B balance (mixed_factor).
        transfers = not self._mixed and applies_to(artifact)
        self._mixed_factor: MixedDecodeFactor | None = None
        if transfers and mixed_attention:
            self._mixed_factor = transferred_factor(self._gpu(hardware))
        # Uneven decode KV lengths: the profile's fitted blend towards the longest
        # (a profile's table, looked up on its lattice's KV axes).
        self._skew: SkewFit | None = (
            SkewFit(artifact) if skew and self._mixed and artifact.has("attention_skew") else None
        )
        # The table's all-reduce when it timed this group size, else a ring over the link.
        measured = artifact.has("allreduce") and self.tp in set(
            artifact.tables["allreduce"]["num_gpus"]
        )
        self._allreduce = allreduce_grid(artifact, self.tp) if self.tp > 1 and measured else None
        link_bytes_per_s = self.link.bandwidth_bytes_per_s * self.link.efficiency
        self._link_s_per_byte = 1.0 / link_bytes_per_s
        self._dense_cache: dict[int, float] = {}
        self._lm_cache: dict[int, float] = {}
        # Ablations that change this model's prices, named in its label.
        off = (
            ("attention as two kernels", (self._mixed or transfers) and not mixed_attention),
            ("no memory-bound ops", self._profile is None and not memory_ops),
            ("no skew fit", self._mixed and artifact.has("attention_skew") and not skew),
        )
        self.ablations = tuple(name for name, applies in off if applies)

    def _gpu(self, hardware: HardwareSpec | None) -> HardwareSpec:
        """``hardware``, else the preset of the GPU the tables were measured on: its
        datasheet bandwidth prices the memory-bound ops and floors decode attention,
        and its FLOP/B balance carries the mixed-attention factor."""
        gpu = self.artifact.provenance.gpu
        spec = hardware if hardware is not None else hardware_for_gpu(gpu)
        if spec is None:
            raise ConfigError(
                f"kernel artifact ({self.artifact.label}) was measured on {gpu!r}, which no "
                "hardware preset names: the bandwidth of its norms, activation and rotary "
                "and of decode attention's KV reads, and the FLOP/s the mixed-attention "
                "factor needs, are unknown (give the scenario's hardware)"
            )
        return spec

    def _build_dense(self, hardware: HardwareSpec | None, memory_ops: bool = True) -> None:
        """The dense ops' sources: a per-layer profile, else GEMM (and MoE) tables
        and the memory-bound ops priced from bandwidth."""
        a, arch = self.artifact, self.arch
        self._profile: ProfileDense | None = None
        self._memory: MemoryOps | None = None
        self._gemm: Grid | None = None
        self._moe: Grid | ExpertParallelMoE | None = None
        self._lm_ops: list[Grid] = []
        if a.has("layer_ops"):
            if self.ep > 1:
                raise ConfigError(
                    f"cost.expert_parallel_size {self.ep}: kernel artifact ({a.label}) is a "
                    "per-layer profile; expert parallelism needs aiconfigurator's moe table"
                )
            self._profile = ProfileDense(a, arch)
        else:
            self._gemm = gemm_grid(a)
            if self.ep > 1:
                self._moe = ExpertParallelMoE(a, arch, self.ep, self.tp, self.link)
            elif arch.moe is not None:
                self._moe = moe_grid(a, arch.moe, arch.hidden_size, self.tp)
            if memory_ops:
                self._memory = MemoryOps.for_artifact(a, arch, self.shapes, self._gpu(hardware))
        if a.has("per_sequence"):
            self._lm_ops = [op_grid(a, "per_sequence", op) for op in ("lm_head", "sampler")]
        elif self._gemm is None:
            self._gemm = gemm_grid(a)

    # -- operator times (seconds) --------------------------------------------

    def dense_layer_s(self, num_tokens: int) -> float:
        """One layer's non-attention work (GEMMs or MoE, plus all-reduces) for T tokens."""
        cached = self._dense_cache.get(num_tokens)
        if cached is not None:
            return cached
        t = float(num_tokens)
        total = 0.0
        if self._profile is not None:
            total += self._profile.layer_s(t)
        else:
            assert self._gemm is not None
            for n, k in self.shapes.gemms.values():
                total += self.gemm_s(t, n, k)
            if self._moe is not None:
                total += self._moe(t)
            if self._memory is not None:
                total += self._memory.layer_s(t)
        total += 2.0 * self.allreduce_s(num_tokens * self.arch.hidden_size * ACTIVATION_BYTES)
        self._dense_cache[num_tokens] = total
        return total

    def gemm_s(self, m: float, n: int, k: int) -> float:
        """One GEMM from the table; one wider than any timed (n past the grid,
        e.g. a 128k-vocabulary LM head) is priced as equal column blocks that
        are inside it, as a tiled GEMM runs it, rather than extrapolated."""
        assert self._gemm is not None
        n_max = self._gemm.axes[1][-1]
        blocks = -(-n // int(n_max))
        return blocks * self._gemm(m, n / blocks, k)

    def allreduce_s(self, message_bytes: int) -> float:
        """One all-reduce across the tp group (0 on one GPU).

        From the table when it has this group size, else a ring all-reduce
        over the link: ``2 (tp-1)/tp * bytes / bandwidth + 2 (tp-1) * latency``.
        """
        if self.tp == 1 or message_bytes == 0:
            return 0.0
        if self._allreduce is not None:
            return self._allreduce(float(message_bytes))
        steps = 2 * (self.tp - 1)
        return steps / self.tp * message_bytes * self._link_s_per_byte + steps * self.link.latency_s

    def per_step_s(self, num_tokens: int, num_seqs: int) -> float:
        """Once-per-step ops: embedding, final norm, LM head and sampler, stage transfers.

        A profile times embedding and final norm; otherwise they (and the
        sampler, without a ``per_sequence`` table) are priced from bandwidth,
        with the vocab-parallel embedding's all-reduce under tensor parallelism.
        """
        key = num_tokens * 1_000_003 + num_seqs
        cached = self._lm_cache.get(key)
        if cached is not None:
            return cached
        total = 0.0 if self._profile is None else self._profile.step_s(float(num_tokens))
        if self._memory is not None:
            total += self._memory.step_s(float(num_tokens), float(num_seqs), not self._lm_ops)
            total += self.allreduce_s(num_tokens * self.arch.hidden_size * ACTIVATION_BYTES)
        if num_seqs:
            if self._lm_ops:
                for grid in self._lm_ops:
                    total += grid(float(num_seqs))
            else:
                assert self._gemm is not None
                n, k = self.shapes.lm_head
                total += self.gemm_s(float(num_seqs), n, k)
        if self.pp > 1:
            hop_bytes = num_tokens * self.arch.hidden_size * ACTIVATION_BYTES
            total += (self.pp - 1) * (hop_bytes * self._link_s_per_byte + self.link.latency_s)
        self._lm_cache[key] = total
        return total

    def attention_s(self, shape: StepShape) -> float:
        """One layer's attention for the step.

        With a mixed-batch profile, a step with both prefill and decodes is one
        varlen kernel (``mixed_attention_s``); otherwise the pure parts add, the
        decodes of a mixed step on FA2 tables slowed by ``mixed_decode_factor``.
        """
        if self._mixed_attn is not None and shape.num_prefill_tokens and shape.num_decode_seqs:
            return self.mixed_attention_s(shape)
        decode = self.decode_attention_s(
            shape.num_decode_seqs,
            shape.num_decode_context_tokens,
            shape.max_decode_context_tokens,
            shape.min_decode_context_tokens,
        )
        if self._mixed_factor is not None and shape.num_prefill_tokens and shape.num_decode_seqs:
            decode = decode * self.mixed_decode_factor(shape)
        return self.prefill_attention_s(shape) + decode

    def mixed_decode_factor(self, shape: StepShape) -> float:
        """How much longer a mixed step's decodes take in FA2's varlen kernel than in
        the pure decode kernel (``mixed_factor``; 1.0 without a factor), looked up at
        the step's mean chunk and cached prefill, its decode count and mean KV
        (cached tokens, the profile's axis)."""
        factor = self._mixed_factor
        if factor is None or not (shape.num_prefill_tokens and shape.num_decode_seqs):
            return 1.0
        b, n = shape.num_prefill_seqs, shape.num_decode_seqs
        chunk, cached = prefill_chunk(b, shape.num_prefill_tokens, shape.prefill_kv_read_tokens)
        return factor(chunk, cached, float(n), (shape.num_decode_context_tokens - n) / n)

    def skew_alpha(
        self,
        prefill_chunk_tokens: float,
        kv_prefill_tokens: float,
        num_decode_seqs: int,
        kv_mean_tokens: float,
        kv_max_tokens: int,
        kv_min_tokens: int,
    ) -> float:
        """The skew fit's alpha for ``num_decode_seqs`` decodes of mean, longest and
        shortest KV ``kv_*_tokens`` (the profile's axis: cached tokens) beside a
        prefill chunk (0: none) after ``kv_prefill_tokens``; 0 with no fit, one
        decode, or no decode longer than the mean (as LLMServingSim)."""
        skew = self._skew
        if skew is None or num_decode_seqs < 2 or kv_max_tokens <= kv_mean_tokens:
            return 0.0
        rate = (kv_mean_tokens - kv_min_tokens) / (kv_max_tokens - kv_min_tokens)
        return skew.alpha(
            prefill_chunk_tokens, num_decode_seqs, rate, float(kv_max_tokens), kv_prefill_tokens
        )

    def mixed_attention_s(self, shape: StepShape) -> float:
        """One layer's varlen attention over prefill chunks and decodes, from the profile.

        The profile times one prefill chunk of ``c`` new tokens after ``p``
        cached, beside ``n`` decodes after ``kv`` cached each, in one kernel
        (``tables.mixed_attention_grids``). A step is looked up at its own
        decode count and mean decode KV (``kv = context / n - 1``: the
        profile's KV excludes the token being computed) and at one of its
        ``b`` equal prefill chunks (``ops.prefill_chunk``); each further chunk
        adds its pure-prefill time ``pre(c, p)``:
        ``mixed(c, p, n, kv) + (b - 1) * pre(c, p)``. Why not one chunk of all
        ``b`` chunks' tokens (what LLMServingSim looks up): the kernel tiles
        each sequence's queries separately, so ``b`` chunks of ``c`` do about
        ``b c^2 / 2`` causal query-key pairs, not ``(b c)^2 / 2``, and the
        decodes' extra cost in a mixed batch (their one-query rows padded to a
        tile) barely depends on the chunk (``docs/kernels.md``).
        """
        assert self._mixed_attn is not None
        b, n = shape.num_prefill_seqs, shape.num_decode_seqs
        chunk, cached = prefill_chunk(b, shape.num_prefill_tokens, shape.prefill_kv_read_tokens)
        kv = (shape.num_decode_context_tokens - n) / n
        one = self._mixed_attn(chunk, cached, float(n), kv)
        if self._skew is not None:  # uneven decodes: towards the longest (skew_alpha)
            kv_max = shape.max_decode_context_tokens - 1
            alpha = self.skew_alpha(
                chunk, cached, n, kv, kv_max, shape.min_decode_context_tokens - 1
            )
            if alpha != 0.0:
                one = SkewFit.blend_s(
                    one, self._mixed_attn(chunk, cached, float(n), float(kv_max)), alpha
                )
        if b == 1:
            return one
        return one + (b - 1) * self._prefill_attn(chunk, cached)

    def prefill_attention_s(self, shape: StepShape) -> float:
        """One layer's attention over the step's prefill chunks, without its decodes."""
        b = shape.num_prefill_seqs
        if b == 0 or shape.num_prefill_tokens == 0:
            return 0.0
        chunk, cached = prefill_chunk(b, shape.num_prefill_tokens, shape.prefill_kv_read_tokens)
        if self._mixed:
            return b * self._prefill_attn(chunk, cached)
        total = chunk + cached
        full = self._prefill_attn(float(b), total)
        pairs_full = b * total * (total + 1.0) / 2.0
        scaled = full * shape.prefill_attention_pairs / pairs_full
        floor = self._prefill_attn(float(b), chunk)
        return scaled if scaled > floor else floor

    def decode_attention_s(
        self,
        num_seqs: int,
        context_tokens: int,
        max_context_tokens: int = 0,
        min_context_tokens: int = 0,
    ) -> float:
        """One layer's attention for ``num_seqs`` decodes with ``context_tokens`` in all,
        the longest and shortest ``max_context_tokens`` / ``min_context_tokens`` (as in
        ``StepShape``), without a prefill (a profile's KV axis excludes the token
        being computed). Looked up at the mean KV, moved towards the longest's time
        by the skew fit's alpha when the profile has one."""
        if num_seqs == 0:
            return 0.0
        history = context_tokens - self._decode_history * num_seqs
        kv = history / num_seqs
        mean_s = self._decode_attn(float(num_seqs), kv)
        if self._skew is None:
            return mean_s
        return self._skewed_decode_s(mean_s, num_seqs, kv, max_context_tokens, min_context_tokens)

    def _skewed_decode_s(
        self, mean_s: float, num_seqs: int, kv: float, max_context_tokens: int,
        min_context_tokens: int,
    ) -> float:  # fmt: skip
        """Pure decode attention ``mean_s`` (at mean KV ``kv``) with the skew term:
        the same operations for a step and for a run's steps."""
        kv_max = max_context_tokens - self._decode_history
        kv_min = min_context_tokens - self._decode_history
        alpha = self.skew_alpha(0.0, 0.0, num_seqs, kv, kv_max, kv_min)
        if alpha == 0.0:
            return mean_s
        return SkewFit.blend_s(mean_s, self._decode_attn(float(num_seqs), float(kv_max)), alpha)

    # -- per-op breakdown ----------------------------------------------------------

    def breakdown_s(self, shape: StepShape) -> dict[str, float]:
        """Each op's seconds in the step ``shape`` (all layers together): the
        layer's ops (a profile's in name order), attention, collectives, then
        the once-per-step ops. They add up to ``step_s`` (to rounding): the same
        functions price them."""
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return {}
        t, num_layers = float(tokens), self.arch.num_layers
        seqs = shape.num_prefill_seqs + shape.num_decode_seqs
        layer: list[tuple[str, float]] = []
        step: list[tuple[str, float]] = []
        if self._profile is not None:
            layer += self._profile.layer_terms(t)
            step += self._profile.step_terms(t)
        else:
            layer += [(name, self.gemm_s(t, n, k)) for name, (n, k) in self.shapes.gemms.items()]
            if self._moe is not None:
                layer.append(("moe", self._moe(t)))
            if self._memory is not None:
                layer += self._memory.layer_terms(t)
                memory_step = dict(self._memory.step_terms(t, float(seqs), not self._lm_ops))
                step += [("embedding", memory_step["embedding"])]
                message_bytes = tokens * self.arch.hidden_size * ACTIVATION_BYTES
                step += [("embedding_allreduce", self.allreduce_s(message_bytes))]
                step += [(name, memory_step[name]) for name in ("final_norm", "sampler")]
        layer.append(
            (
                "allreduce",
                2.0 * self.allreduce_s(tokens * self.arch.hidden_size * ACTIVATION_BYTES),
            )
        )
        if self._mixed_attn is not None and shape.num_prefill_tokens and shape.num_decode_seqs:
            # One varlen kernel over prefill chunks and decodes (attention_s).
            layer.append(("mixed_attention", self.mixed_attention_s(shape)))
        else:
            decode = self.decode_attention_s(
                shape.num_decode_seqs,
                shape.num_decode_context_tokens,
                shape.max_decode_context_tokens,
                shape.min_decode_context_tokens,
            )
            decode = decode * self.mixed_decode_factor(shape)  # attention_s's product (x1.0: none)
            layer += [("prefill_attention", self.prefill_attention_s(shape))]
            layer += [("decode_attention", decode)]
        if seqs and self._lm_ops:
            step += [
                (name, grid(float(seqs)))
                for name, grid in zip(("lm_head", "sampler"), self._lm_ops, strict=True)
            ]
        elif seqs:
            n, k = self.shapes.lm_head
            step.append(("lm_head", self.gemm_s(float(seqs), n, k)))
        if self.pp > 1:
            hop_bytes = tokens * self.arch.hidden_size * ACTIVATION_BYTES
            hop_s = hop_bytes * self._link_s_per_byte + self.link.latency_s
            step.append(("pipeline_transfer", (self.pp - 1) * hop_s))
        out: dict[str, float] = {}
        for name, seconds in [(n, num_layers * s) for n, s in layer] + step:
            out[name] = out.get(name, 0.0) + seconds
        return out

    def op_source(self, name: str) -> str:
        """What ``breakdown_s``'s op ``name`` is priced from, in a word: ``measured`` (a
        table's rows), ``derived`` (another head layout's rows, ``derived``),
        ``bandwidth`` (its bytes at the GPU's datasheet rate, ``memory_ops``) or
        ``link`` (a ring over the link: no table timed this group or hop), ``measured+link``
        (expert-parallel MoE: its experts from the table, its collectives over the link);
        ``none`` for an all-reduce on one GPU (0 s)."""
        if name == "decode_attention" and self.derived:
            return "derived"
        if self._memory is not None and (
            name in LAYER_OPS or (name in STEP_OPS and (name != "sampler" or not self._lm_ops))
        ):
            return "bandwidth"
        if name in ("allreduce", "embedding_allreduce"):
            return "none" if self.tp == 1 else ("link" if self._allreduce is None else "measured")
        if name == "moe" and isinstance(self._moe, ExpertParallelMoE):
            return "measured" if self._moe.collectives_measured else "measured+link"
        return "link" if name == "pipeline_transfer" else "measured"

    # -- CostModel ---------------------------------------------------------------

    @property
    def label(self) -> str:
        p = self.artifact.provenance
        layout = "" if self.tp * self.pp == 1 else f"x{self.tp * self.pp}(tp{self.tp},pp{self.pp})"
        layout += f"(ep{self.ep})" if self.ep > 1 else ""
        kernel = p.kernels.get("attention") or p.kernels.get("engine", "")
        detail = f"; {kernel}" if kernel else ""
        if self._mixed_factor is not None:
            detail += f"; {self._mixed_factor.label}"
        if self.derived:  # said in the label: every report of the run names it
            detail += "; " + "; ".join(self.derived)
        ablated = f" [{', '.join(self.ablations)}]" if self.ablations else ""
        return f"kernels:{self.arch.name}@{p.gpu}{layout} ({self.artifact.label}{detail}){ablated}"

    def step_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return 0.0
        layer = self.dense_layer_s(tokens) + self.attention_s(shape)
        seqs = shape.num_prefill_seqs + shape.num_decode_seqs
        return self.arch.num_layers * layer + self.per_step_s(tokens, seqs)

    def decode_steps_s(
        self,
        num_seqs: int,
        context_tokens: int,
        num_steps: int,
        *,
        max_context_tokens: int = 0,
        min_context_tokens: int = 0,
    ) -> FloatArray:
        if (zeros := no_decode_run(num_seqs, context_tokens, num_steps)) is not None:
            return zeros
        if self._skew is not None:  # a bucket lookup a step: priced one at a time
            spread = (max_context_tokens, min_context_tokens)
            steps = self._durations(num_seqs, context_tokens, *spread)
            return np.fromiter(islice(steps, num_steps), np.float64, num_steps)
        # Only decode attention's KV length changes from step to step.
        contexts = context_tokens + np.arange(num_steps, dtype=np.float64) * num_seqs
        history = contexts - self._decode_history * num_seqs
        attention = self._decode_attn.many(float(num_seqs), history / num_seqs)
        layer = self.dense_layer_s(num_seqs) + 0.0 + attention
        out: FloatArray = self.arch.num_layers * layer + self.per_step_s(num_seqs, num_seqs)
        return out

    def decode_durations_s(
        self,
        num_seqs: int,
        context_tokens: int,
        num_steps: int,
        *,
        max_context_tokens: int = 0,
        min_context_tokens: int = 0,
    ) -> Iterator[float]:
        """``decode_steps_s``'s durations one at a time, each priced when taken
        (``sim.cost.base``: none past a run's cut, and an open-loop run
        usually stops at the next arrival, long before)."""
        if no_decode_run(num_seqs, context_tokens, num_steps) is not None:
            return repeat(0.0)  # steps of no sequence take no time
        return self._durations(num_seqs, context_tokens, max_context_tokens, min_context_tokens)

    def _durations(
        self, num_seqs: int, context_tokens: int, max_context_tokens: int,
        min_context_tokens: int,
    ) -> Iterator[float]:  # fmt: skip
        dense_s, seqs = self.dense_layer_s(num_seqs), float(num_seqs)
        per_step_s = self.per_step_s(num_seqs, num_seqs)
        num_layers, attention = self.arch.num_layers, self._decode_attn
        history = context_tokens - self._decode_history * num_seqs
        skewed = self._skewed_decode_s if self._skew is not None else None
        j = 0
        while True:  # step_s's operations, in its order
            kv = (history + j * num_seqs) / num_seqs
            decode_s = attention(seqs, kv)
            if skewed is not None:  # every context one longer a step: so are both ends
                decode_s = skewed(
                    decode_s, num_seqs, kv, max_context_tokens + j, min_context_tokens + j
                )
            layer = dense_s + 0.0 + decode_s
            yield num_layers * layer + per_step_s
            j += 1

    def __repr__(self) -> str:
        return f"KernelCost({self.label!r})"
