"""``KernelCost``: a step's time as the sum of the kernels vLLM runs for it.

The step formula, how a prefill of equal chunks is priced and what ``pp`` adds:
``docs/kernels.md`` ("The step formula"). Dense ops come from a per-layer profile
(``ops.ProfileDense``), else from the GEMM table at vLLM's per-GPU shapes plus the
memory-bound ops the tables leave out, priced from bytes (``memory_ops``). The GPU's
work only: the engine's CPU work is ``sim.cost.engine_cpu``'s. The step's terms,
each with its source, are listed once (``terms``, built by ``_build_terms``): the
price, the per-op breakdown and the label all read that list.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from sim.cost.base import StepShape
from sim.cost.collectives import collective_s
from sim.cost.kernels import price
from sim.cost.kernels.artifact import DTYPE_BYTES, KernelArtifact
from sim.cost.kernels.expert_parallel import (
    ACTIVATION_BYTES,
    ExpertParallelMoE,
    check_expert_parallel,
)
from sim.cost.kernels.grid import Grid, warn_notes
from sim.cost.kernels.memory_ops import LAYER_OPS, STEP_OPS, MemoryOps, hardware_for_gpu
from sim.cost.kernels.mixed_factor import MixedDecodeFactor, applies_to, transferred_factor
from sim.cost.kernels.ops import LayerShapes, ProfileDense, layer_shapes
from sim.cost.kernels.price import NUM_PAST, attention_s, decode_attention_s
from sim.cost.kernels.tables import (
    allreduce_grid,
    attention_grids,
    dram_floored,
    gemm_grid,
    mixed_attention_grids,
    moe_grid,
    op_grid,
    put_skew_fit,
)
from sim.cost.kernels.terms import ABLATIONS, Kind, Source, Term, term
from sim.errors import ConfigError
from sim.hardware.model_names import same_model
from sim.hardware.parallel import LinkSpec, link_preset
from sim.hardware.specs import HardwareSpec, ModelSpec


class KernelCost:
    """Step time from measured kernel tables (see the module docstring)."""

    # ``breakdown_s``'s ops that are collectives between GPUs (the step's communication).
    COLLECTIVE_OPS = (
        "allreduce", "embedding_allreduce", "logits_all_gather", "moe_all_gather",
        "moe_reduce_scatter", "pipeline_transfer",
    )  # fmt: skip

    def __init__(
        self,
        arch: ModelSpec,
        artifact: KernelArtifact,
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        link: LinkSpec | None = None,
        expert_parallel_size: int = 1,
        hardware: HardwareSpec | None = None,
        disabled_terms: frozenset[str] = frozenset(),
    ) -> None:
        """``hardware``: the GPU's datasheet (``_gpu``); ``disabled_terms``: parts of
        the term list switched off (``terms.ABLATIONS``)."""
        unknown = sorted(disabled_terms - set(ABLATIONS))
        if unknown:
            known = ", ".join(ABLATIONS)
            raise ConfigError(f"cost: no term {unknown[0]!r} to disable; known: {known}")
        mixed_attention = "mixed_attention" not in disabled_terms
        skew = "skew" not in disabled_terms
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
        if not same_model(arch.name, provenance.model):
            raise ConfigError(
                f"kernel artifact ({artifact.label}) was profiled on {provenance.model}, "
                f"not {arch.name}"
            )
        if (provenance.tensor_parallel_size or self.tp) != self.tp:
            raise ConfigError(
                f"kernel artifact ({artifact.label}) was profiled at tensor parallel "
                f"{provenance.tensor_parallel_size}, the layout asks for {self.tp}"
            )
        self._build_dense(hardware, "memory_ops" not in disabled_terms)
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
        self._skew = skew and self._mixed and artifact.has("attention_skew")
        # The attention grids and skew fit laid out flat (``price``): what
        # ``attention_s`` reads, and the head of the compiled loop's tables.
        self.price_tables, self.price_layout = self._price_tables()
        self.price_grids = price.grids_of(self.price_layout)
        # The table's all-reduce when it timed this group size, else NCCL's model over
        # the link (sim.cost.collectives).
        measured = artifact.has("allreduce") and self.tp in set(
            artifact.tables["allreduce"]["num_gpus"]
        )
        self._allreduce = allreduce_grid(artifact, self.tp) if self.tp > 1 and measured else None
        self._dense_cache: dict[int, float] = {}
        self._lm_cache: dict[int, float] = {}
        self.terms: tuple[Term, ...] = self._build_terms()
        self._layer_prices = [t.price for t in self.terms if t.scope == "layer"]
        self._step_prices = [t.price for t in self.terms if t.scope == "step"]
        # Each breakdown row's source (a row two terms share: the later's, which prices it).
        self._sources = {row: src for t in self.terms for row, src in t.sources.items()}
        # Ablations that change this model's prices, named in its label.
        applies = {
            "mixed_attention": self._mixed or transfers,
            "memory_ops": self._profile is None,
            "skew": self._mixed and artifact.has("attention_skew"),
        }
        self.ablations = tuple(
            ABLATIONS[n] for n in ABLATIONS if n in disabled_terms and applies[n]
        )

    def _gpu(self, hardware: HardwareSpec | None) -> HardwareSpec:
        """``hardware``, else the preset of the GPU the tables were measured on (its
        bandwidth prices memory-bound ops and floors decode attention; its FLOP/B
        balance carries the mixed-attention factor)."""
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
            if self.ep > 1 and not a.has("moe_layer"):
                raise ConfigError(
                    f"cost.expert_parallel_size {self.ep}: kernel artifact ({a.label}) is a "
                    "per-layer profile without MoE rows (moe.csv)"
                )
            # Under expert parallelism the MoE term is the group's (ExpertParallelMoE).
            self._profile = ProfileDense(a, arch, with_moe=self.ep == 1)
            if self.ep > 1:
                self._moe = ExpertParallelMoE(a, arch, self.ep, self.tp, self.link)
        else:
            self._gemm = gemm_grid(a)
            if self.ep > 1:
                self._moe = ExpertParallelMoE(a, arch, self.ep, self.tp, self.link)
            elif arch.moe is not None:
                self._moe = moe_grid(a, arch.moe, arch.hidden_size, self.tp)
            if memory_ops:
                # Activations are 16-bit unless the tables were timed in fp32 (fp8
                # weights still compute in 16 bits); the KV cache has its own dtype.
                activation = 4.0 if a.provenance.dtype == "float32" else 2.0
                kv = DTYPE_BYTES.get(a.provenance.kv_dtype, 2.0)
                gpu = self._gpu(hardware)
                self._memory = MemoryOps.build(arch, self.shapes, gpu, activation, kv)
        if a.has("per_sequence"):
            self._lm_ops = [op_grid(a, "per_sequence", op) for op in ("lm_head", "sampler")]
        elif self._gemm is None:
            self._gemm = gemm_grid(a)

    # -- operator times (seconds) --------------------------------------------

    def _build_terms(self) -> tuple[Term, ...]:
        """The step's terms in pricing order (``terms``): the layer's dense ops and
        all-reduces, its attention, then the once-a-step ops."""
        arch, tp = self.arch, self.tp
        activation_bytes = arch.hidden_size * ACTIVATION_BYTES  # one token's, for collectives
        allreduce: Source = "link" if self._allreduce is None else "measured"
        allreduce = "none" if tp == 1 else allreduce
        terms: list[Term] = []
        profile, memory = self._profile, self._memory
        moe = self._moe

        def grouped(
            name: str, kind: Kind, rows: dict[str, Source], ops: ProfileDense | MemoryOps
        ) -> Term:
            """A per-layer term of several ops, ``ops``' ``layer_terms`` its ``rows``."""
            layer_s, layer_terms = ops.layer_s, ops.layer_terms
            return Term(
                name, kind, "layer", rows,
                lambda tokens: layer_s(float(tokens)),
                lambda tokens: layer_terms(float(tokens)),
            )  # fmt: skip

        if profile is not None:
            names = [name for name, _ in profile.layer_terms(1.0)]
            terms.append(grouped("layer_ops", "profile", dict.fromkeys(names, "measured"), profile))
            if moe is not None:  # expert parallel: the group's MoE, from the profile's moe.csv
                terms.append(self._moe_term(moe))
        else:
            for name, (n, k) in self.shapes.gemms.items():
                terms.append(term(name, "gemm", "layer", "measured", partial(self._gemm_at, n, k)))
            if moe is not None:
                terms.append(self._moe_term(moe))
            if memory is not None:
                rows: dict[str, Source] = dict.fromkeys(LAYER_OPS, "bandwidth")
                terms.append(grouped("memory_ops", "memory", rows, memory))

        def layer_allreduce_s(tokens: int) -> float:  # attention's output and the MLP's
            return 2.0 * self.allreduce_s(tokens * activation_bytes)

        terms.append(term("allreduce", "communication", "layer", allreduce, layer_allreduce_s))
        decode: Source = "derived" if self.derived else "measured"
        attention: dict[str, Source] = dict.fromkeys(
            ("mixed_attention", "prefill_attention"), "measured"
        )
        terms.append(
            Term(
                "attention", "attention", "attention", {**attention, "decode_attention": decode},
                self.attention_s, self._attention_rows,
            )
        )  # fmt: skip
        if profile is not None:
            names = [name for name, _ in profile.step_terms(1.0)]
            terms.append(
                Term(
                    "step_ops", "profile", "step", dict.fromkeys(names, "measured"),
                    lambda tokens, seqs: profile.step_s(float(tokens)),
                    lambda tokens, seqs: profile.step_terms(float(tokens)),
                )
            )  # fmt: skip
        lm_ops = self._lm_ops
        if memory is not None:
            step_ops = STEP_OPS if not lm_ops else tuple(n for n in STEP_OPS if n != "sampler")
            terms.append(
                Term(
                    "step_memory_ops", "memory", "step", dict.fromkeys(step_ops, "bandwidth"),
                    lambda tokens, seqs: memory.step_s(float(tokens), float(seqs), not lm_ops),
                    lambda tokens, seqs: memory.step_terms(float(tokens), float(seqs), not lm_ops),
                )
            )  # fmt: skip

        if tp > 1:  # two collectives a step that a one-GPU table or profile never timed

            def embedding_allreduce_s(tokens: int, seqs: int) -> float:  # vocab-parallel
                return self.allreduce_s(tokens * activation_bytes)

            def logits_all_gather_s(tokens: int, seqs: int) -> float:  # before sampling
                return self.logits_all_gather_s(seqs)

            name = "embedding_allreduce"
            terms.append(term(name, "communication", "step", allreduce, embedding_allreduce_s))
            name = "logits_all_gather"
            terms.append(term(name, "communication", "step", "link", logits_all_gather_s))
        terms.append(
            term("lm_head", "gemm", "step", "measured", partial(_per_seq_s, self.lm_head_s))
        )
        if lm_ops:
            sampler = partial(_per_seq_s, lm_ops[1])
            terms.append(term("sampler", "sampler", "step", "measured", sampler))
        if self.pp > 1:

            def pipeline_transfer_s(tokens: int, seqs: int) -> float:  # pp - 1 hops
                return self.pipeline_transfer_s(tokens)

            terms.append(
                term("pipeline_transfer", "communication", "step", "link", pipeline_transfer_s)
            )
        return tuple(terms)

    def _moe_term(self, moe: Grid | ExpertParallelMoE) -> Term:
        """The MoE layer's term: one table row, or under expert parallelism the
        group's dispatch, local experts and combine, each its own breakdown row."""
        if not isinstance(moe, ExpertParallelMoE):
            return term("moe", "moe", "layer", "measured", lambda tokens: moe(float(tokens)))
        collectives: Source = "measured" if moe.collectives_measured else "link"
        sources: dict[str, Source] = {
            "moe_all_gather": collectives,
            "moe": "measured",
            "moe_reduce_scatter": collectives,
        }
        return Term(
            "moe", "moe", "layer", sources,
            lambda tokens: moe(float(tokens)),
            lambda tokens: moe.terms(float(tokens)),
        )  # fmt: skip

    def _gemm_at(self, n: int, k: int, tokens: float) -> float:
        return self.gemm_s(float(tokens), n, k)

    def lm_head_s(self, num_rows: float) -> float:
        """The LM head's GEMM at ``num_rows`` logits rows: the per-sequence table's,
        else the GEMM table's at the head's shape (the ``lm_head`` term, at a step's
        sequences; a verification's drafts add rows, ``sim.cost.speculative``)."""
        if self._lm_ops:
            return self._lm_ops[0](float(num_rows))
        n, k = self.shapes.lm_head
        return self._gemm_at(n, k, num_rows)

    def step_and_rows_s(self, shape: StepShape, num_rows: int) -> tuple[float, float]:
        """``step_s(shape)`` and the seconds ``num_rows`` more LM-head rows (logits
        positions) add to it (a verification's drafts, ``sim.cost.speculative``): its
        one LM-head GEMM at the step's sequences plus those rows, less at its
        sequences, never less than 0 s (a measured table need not rise at every row:
        the H100 aiconfigurator table's LM head at 1 row is 0.42 ms, at 4 rows
        0.38 ms, and more rows are never priced as a faster GEMM); and with tensor
        parallelism the logits all-gather at those rows too, less at its sequences
        (vLLM 0.19 ``LogitsProcessor._gather_logits`` gathers every row computed)."""
        step = self.step_s(shape)
        seqs = shape.num_prefill_seqs + shape.num_decode_seqs
        if not num_rows:
            return step, 0.0
        gemm = self.lm_head_s(seqs + num_rows) - (self.lm_head_s(seqs) if seqs else 0.0)
        gather = self.logits_all_gather_s(seqs + num_rows) - self.logits_all_gather_s(seqs)
        return step, (gemm if gemm > 0.0 else 0.0) + gather

    def dense_layer_s(self, num_tokens: int) -> float:
        """One layer's non-attention work for T tokens: the ``layer`` terms, in order."""
        cached = self._dense_cache.get(num_tokens)
        if cached is not None:
            return cached
        total = 0.0
        for layer_s in self._layer_prices:
            total += layer_s(num_tokens)
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
        """One all-reduce across the tp group (0 on one GPU): the table's at this
        group size, else NCCL's model over the link (``sim.cost.collectives``)."""
        if self.tp == 1 or message_bytes == 0:
            return 0.0
        if self._allreduce is not None:
            return self._allreduce(float(message_bytes))
        return collective_s("all_reduce", message_bytes, self.tp, self.link)

    def logits_all_gather_s(self, num_seqs: int) -> float:
        """The LM head's logits gathered across the tp group (0 on one GPU): the
        vocab-parallel head's ``vocab / tp`` columns per GPU, all-gathered before
        sampling (vLLM 0.19 ``LogitsProcessor._gather_logits``), ``num_seqs x padded
        vocab x 2 B``. No table times it: NCCL over the link."""
        if self.tp == 1 or num_seqs == 0:
            return 0.0
        vocab_per_gpu, _ = self.shapes.lm_head
        message_bytes = num_seqs * vocab_per_gpu * self.tp * ACTIVATION_BYTES
        return collective_s("all_gather", message_bytes, self.tp, self.link)

    def pipeline_transfer_s(self, num_tokens: int) -> float:
        """The hidden states of ``num_tokens`` tokens sent from each stage to the next:
        ``pp - 1`` send/recv hops over the link (0 without pipeline stages)."""
        if self.pp == 1:
            return 0.0
        hop_bytes = num_tokens * self.arch.hidden_size * ACTIVATION_BYTES
        return (self.pp - 1) * collective_s("send_recv", hop_bytes, 2, self.link)

    def per_step_s(self, num_tokens: int, num_seqs: int) -> float:
        """Once-per-step ops (embedding, final norm, LM head, sampler, tensor
        parallelism's two collectives, stage transfers): the ``step`` terms, in order."""
        key = num_tokens * 1_000_003 + num_seqs
        cached = self._lm_cache.get(key)
        if cached is not None:
            return cached
        total = 0.0
        for step_s in self._step_prices:
            total += step_s(num_tokens, num_seqs)
        self._lm_cache[key] = total
        return total

    def _price_tables(self) -> tuple[list[float], list[int]]:
        """The attention grids and the skew fit as ``price``'s flat ``tables`` and
        ``layout`` (extrapolating past a grid, with room for the notes of that)."""
        tables: list[float] = [0.0] * price.MAX_PAST  # the notes' coordinates
        layout = [0] * price.LAYOUT_SIZE
        layout[price.KIND], layout[price.EXTRAPOLATES] = price.KERNELS, 1
        grids = {price.PREFILL_GRID: self._prefill_attn, price.DECODE_GRID: self._decode_attn}
        layout[price.DECODE_HISTORY] = self._decode_history
        layout[price.PROFILE_ATTENTION] = self._mixed
        factor = self._mixed_factor
        # FA2 tables: the decodes' factor in the lattice's place (a factor only where none).
        mixed = self._mixed_attn if factor is None else factor.grid
        layout[price.HAS_MIXED] = self._mixed_attn is not None
        layout[price.HAS_MIXED_FACTOR] = factor is not None
        if mixed is not None:
            grids[price.MIXED_GRID] = mixed
        for g, grid in grids.items():
            grid.put(tables, layout, g)
        self._grids_at = grids  # (whose warning a note past a grid's edge gives)
        if self._skew:
            put_skew_fit(self.artifact, tables, layout)
        return tables, layout

    def _priced(self, price_s: Callable[..., float], *counts: int) -> float:
        """``price_s`` (a ``price`` function) of ``counts``, warning of each lookup
        past a grid's last point."""
        seconds = price_s(self.price_tables, self.price_layout, self.price_grids, *counts)
        if self.price_layout[price.NUM_PAST]:
            warn_notes(self.price_tables, self.price_layout, self._grids_at)
        return seconds

    def attention_s(self, shape: StepShape) -> float:
        """One layer's attention for the step (``price.attention_s``)."""
        return self._priced(
            price.attention_s, shape.num_prefill_seqs, shape.num_prefill_tokens,
            shape.prefill_attention_pairs, shape.prefill_kv_read_tokens, shape.num_decode_seqs,
            shape.num_decode_context_tokens, shape.max_decode_context_tokens,
            shape.min_decode_context_tokens,
        )  # fmt: skip

    def mixed_decode_factor(self, shape: StepShape) -> float:
        """``price.mixed_decode_factor`` of the step (1.0 without a factor)."""
        return self._priced(
            price.mixed_decode_factor, shape.num_prefill_seqs, shape.num_prefill_tokens,
            shape.prefill_kv_read_tokens, shape.num_decode_seqs, shape.num_decode_context_tokens,
        )  # fmt: skip

    def mixed_attention_s(self, shape: StepShape) -> float:
        """``price.mixed_attention_s``: the profile's one varlen kernel for the step."""
        assert self._mixed_attn is not None
        return self._priced(
            price.mixed_attention_s, shape.num_prefill_seqs, shape.num_prefill_tokens,
            shape.prefill_kv_read_tokens, shape.num_decode_seqs, shape.num_decode_context_tokens,
            shape.max_decode_context_tokens, shape.min_decode_context_tokens,
        )  # fmt: skip

    def prefill_attention_s(self, shape: StepShape) -> float:
        """One layer's attention over the step's prefill chunks, without its decodes
        (``price.prefill_attention_s``: floored for chunks no longer than their cache)."""
        return self._priced(
            price.prefill_attention_s, shape.num_prefill_seqs, shape.num_prefill_tokens,
            shape.prefill_attention_pairs, shape.prefill_kv_read_tokens,
        )  # fmt: skip

    def decode_attention_s(
        self,
        num_seqs: int,
        context_tokens: int,
        max_context_tokens: int = 0,
        min_context_tokens: int = 0,
    ) -> float:
        """One layer's attention for ``num_seqs`` decodes of ``context_tokens`` in all
        (``price.decode_attention_s``)."""
        return self._priced(
            price.decode_attention_s, num_seqs, context_tokens, max_context_tokens,
            min_context_tokens,
        )  # fmt: skip

    # -- per-op breakdown ----------------------------------------------------------

    def _attention_rows(self, shape: StepShape) -> list[tuple[str, float]]:
        """``attention_s`` by phase: one varlen kernel, or prefill and decode apart
        (the decodes times ``mixed_decode_factor``, 1.0 without one)."""
        if self._mixed_attn is not None and shape.num_prefill_tokens and shape.num_decode_seqs:
            return [("mixed_attention", self.mixed_attention_s(shape))]
        decode = self.decode_attention_s(
            shape.num_decode_seqs,
            shape.num_decode_context_tokens,
            shape.max_decode_context_tokens,
            shape.min_decode_context_tokens,
        )
        decode = decode * self.mixed_decode_factor(shape)
        prefill = self.prefill_attention_s(shape)
        return [("prefill_attention", prefill), ("decode_attention", decode)]

    def breakdown_s(self, shape: StepShape) -> dict[str, float]:
        """Each op's seconds in the step (all layers): ``terms``' rows in order, adding
        up to ``step_s`` (to rounding)."""
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return {}
        seqs = shape.num_prefill_seqs + shape.num_decode_seqs
        out: dict[str, float] = {}
        for t in self.terms:
            if t.scope == "step":
                rows = t.breakdown(tokens, seqs)
            else:
                rows = [
                    (name, self.arch.num_layers * seconds)
                    for name, seconds in t.breakdown(shape if t.scope == "attention" else tokens)
                ]
            for name, seconds in rows:
                out[name] = out.get(name, 0.0) + seconds
        return out

    def op_source(self, name: str) -> str:
        """What ``breakdown_s``'s row ``name`` is priced from (its term's source)."""
        return self._sources.get(name, "measured")

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
        """``num_layers x (layer terms + attention) + step terms``, with the sums'
        caches read inline (this runs every step; a decode-only step's attention is
        its decode part, to which ``price.attention_s`` adds 0.0)."""
        num_decodes = shape.num_decode_seqs
        prefill_tokens = shape.num_prefill_tokens
        tokens = prefill_tokens + num_decodes
        if tokens == 0:
            return 0.0
        dense = self._dense_cache.get(tokens)
        if dense is None:
            dense = self.dense_layer_s(tokens)
        tables, layout, grids = self.price_tables, self.price_layout, self.price_grids
        context = shape.num_decode_context_tokens
        longest, shortest = shape.max_decode_context_tokens, shape.min_decode_context_tokens
        if prefill_tokens:
            attention = attention_s(
                tables, layout, grids, shape.num_prefill_seqs, prefill_tokens,
                shape.prefill_attention_pairs, shape.prefill_kv_read_tokens, num_decodes,
                context, longest, shortest,
            )  # fmt: skip
        else:
            attention = decode_attention_s(
                tables, layout, grids, num_decodes, context, longest, shortest
            )
        if layout[NUM_PAST]:  # (``_priced``'s check, without its call: this runs each step)
            warn_notes(tables, layout, self._grids_at)
        seqs = shape.num_prefill_seqs + num_decodes
        step = self._lm_cache.get(tokens * 1_000_003 + seqs)
        if step is None:
            step = self.per_step_s(tokens, seqs)
        return self.arch.num_layers * (dense + attention) + step

    def __repr__(self) -> str:
        return f"KernelCost({self.label!r})"


def _per_seq_s(price: Callable[[float], float], tokens: int, seqs: int) -> float:
    """A once-a-step op run once per sequence that gets logits (0 s with none)."""
    return price(float(seqs)) if seqs else 0.0
