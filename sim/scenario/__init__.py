"""Scenario files: one YAML document describing a whole experiment.

Validated at the edge by pydantic (unknown fields rejected); every problem
becomes a one-line ``ConfigError`` naming the file and the field (or line, for
YAML syntax errors). ``--set dotted.key=value`` overrides are applied to the
raw document before validation, so they are checked exactly like the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sim.config import Frozen
from sim.cost.config import AutoCostConfig, CostConfig
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig
from sim.cost.fitted_cpu import load_engine_cpu_artifact
from sim.engine.policies import ContinuousConfig, PolicyConfig
from sim.engine.policies.vllm_defaults import batch_defaults
from sim.engine.scheduler import ContinuousSettings
from sim.engine.speculative import SpeculativeConfig
from sim.errors import ConfigError, format_error
from sim.hardware.kv_capacity import block_size_problem
from sim.hardware.parallel import LINK_PRESETS, ParallelismConfig, layout_problem, link_preset
from sim.hardware.quantization import QuantizationConfig
from sim.hardware.specs import (
    HARDWARE_PRESETS,
    HardwareRef,
    HardwareSpec,
    ModelRef,
    context_problem,
    hardware_preset,
    model_preset,
    preset_validator,
)
from sim.metrics.stats import Slo
from sim.scenario.bench_flags import BenchFlags, apply_bench_flags
from sim.scenario.overrides import Overrides, apply_overrides, layered, set_dotted, set_keys
from sim.scenario.strict_yaml import read_yaml
from sim.scenario.vllm_versions import NEWEST, VllmVersion, version_problem, vllm_version
from sim.serving.cluster import ClusterConfig
from sim.serving.replica_config import FrontendConfig
from sim.workload.generate import WorkloadConfig

__all__ = [
    "BenchFlags",
    "EngineConfig",
    "Overrides",
    "Scenario",
    "apply_overrides",
    "layered",
    "load_scenario",
    "overridden",
    "read_yaml",
    "scenario_from_dict",
    "set_dotted",
    "set_keys",
]


def _refuse(problem: str | None) -> None:
    """A check's one-line ``problem``, if any, as the ValueError pydantic reports."""
    if problem is not None:
        raise ValueError(problem)


class EngineConfig(Frozen):
    """KV cache and request limits of each replica (vLLM's cache/model flags)."""

    vllm_version: str = Field(
        default=NEWEST,
        description=(
            f"the vLLM version the scenario stands for ('0.19', '0.19.0'; default {NEWEST}):"
            " the fields left unset and the engine's CPU estimate follow its defaults"
        ),
    )
    cpu: EngineCpuConfig | None = Field(
        default=None,
        description=(
            "the engine's CPU work per step (sim.cost.engine_cpu), added to or overlapped"
            " with a GPU-only cost model's step; None: the vllm_version's estimate"
        ),
    )
    cpu_artifact: str | None = Field(
        default=None,
        description=(
            "a fitted engine-CPU artifact (servesim calibrate --from-run --fit-kind engine-cpu;"
            " relative to the scenario's folder): sets cpu, and frontend.way_in_s_per_request"
            " when the fit identified it (sim.cost.fitted_cpu)"
        ),
    )

    block_size_tokens: int = Field(
        default=16,
        description=(
            "tokens per KV block, one of vLLM's block sizes"
            " (sim.hardware.kv_capacity.VLLM_BLOCK_SIZES_TOKENS: 1, 8, 16, 32, 64, 128)"
        ),
    )
    num_kv_blocks: int | None = Field(
        default=None,
        ge=1,
        description=(
            "KV blocks per replica, used verbatim: the count vLLM logged ('# GPU blocks', or"
            " 'GPU KV cache size: N tokens' / block_size_tokens); None: estimated as vLLM's"
            " start-up memory profile would size it (sim.hardware.kv_capacity)"
        ),
    )
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    estimate_cudagraph_memory: bool = Field(
        default=True,
        description=(
            "subtract an estimate of CUDA-graph memory from the KV budget, as vLLM >= 0.21 does"
            " (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1); unset: the vllm_version's default;"
            " false for enforce-eager"
        ),
    )
    max_model_len_tokens: int = Field(default=8192, ge=2)
    skip_ahead: bool = Field(
        default=True, description="advance many decode steps per event (False: step by step)"
    )
    enable_prefix_caching: bool = Field(
        default=True,
        description=(
            "cache every full KV block (prompt and output) for reuse by shared prefixes and"
            " preempted requests, evicted in vLLM v1's free-queue order (sim.engine.kv_cache)"
        ),
    )
    # Preemption by swap (scheduler.preemption: swap): CPU memory for swapped KV
    # (vLLM's --swap-space, 4 GiB) and the host link's copy bandwidth, one way
    # (PCIe 4.0 x16 moves ~25 GB/s in practice; PCIe 5.0 ~50 GB/s). At least 1 MB/s,
    # far below any host link (PCIe 1.0 x1: 250 MB/s): a smaller figure is a typo, and
    # one near 0 (1e-300) makes every swap last ~1e300 s and the run's clock overflow.
    swap_space_bytes: float = Field(default=4 * 2**30, ge=0)
    swap_bandwidth_bytes_per_s: float = Field(default=25e9, ge=1e6)
    # How vLLM was started: `vllm serve` (the OpenAI API server) or the offline
    # `LLM` class. Picks the default batch limits (vLLM's get_batch_defaults).
    usage_context: Literal["openai_api_server", "llm_class"] = "openai_api_server"
    async_scheduling: bool | None = Field(
        default=None,
        description=(
            "plan step N+1 while step N runs (vLLM's --async-scheduling); None: vLLM's"
            " default (Scenario.async_scheduling)"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _version_defaults(cls, data: Any) -> Any:
        """Unset fields whose vLLM default changed between versions: the version's."""
        if not isinstance(data, dict) or "estimate_cudagraph_memory" in data:
            return data
        name = data.get("vllm_version", NEWEST)
        if not isinstance(name, str) or version_problem(name) is not None:
            return data  # the field's own check names the problem
        return {**data, "estimate_cudagraph_memory": vllm_version(name).estimate_cudagraph_memory}

    @field_validator("vllm_version", mode="before")
    @classmethod
    def _known_version(cls, name: Any) -> Any:
        if isinstance(name, int | float) and not isinstance(name, bool):
            # An unquoted YAML number (--set engine.vllm_version=0.19): fine when it
            # names a known version, but 0.20 reads as 0.2, so say to quote it.
            problem = version_problem(str(name))
            if problem is not None:
                raise ValueError(f"{problem}; quote it (YAML reads 0.20 as the number 0.2)")
            return str(name)
        if isinstance(name, str):
            _refuse(version_problem(name))
        return name

    @field_validator("block_size_tokens")
    @classmethod
    def _vllm_block_size(cls, block_size_tokens: int) -> int:
        _refuse(block_size_problem(block_size_tokens))
        return block_size_tokens

    @property
    def version(self) -> VllmVersion:
        """The modelled vLLM version ``vllm_version`` stands for."""
        return vllm_version(self.vllm_version)


_RESOLVE_HARDWARE = preset_validator(HARDWARE_PRESETS, "hardware")


def _gpu_link(hardware: Any) -> str | None:
    """The link of a scenario's raw ``hardware`` entry (a preset name, ``{preset:
    name, **overrides}`` or inline), resolved as the field itself resolves it;
    None where it names none, or an unknown preset or link (``_check`` says which)."""
    try:
        spec = _RESOLVE_HARDWARE(hardware)
    except ConfigError:
        return None
    link = None
    if isinstance(spec, HardwareSpec):
        link = spec.gpu_link
    elif isinstance(spec, dict):
        link = spec.get("gpu_link")
    return link if isinstance(link, str) and link in LINK_PRESETS else None


class Scenario(Frozen):
    """A complete experiment: workload, model, hardware, cost model, policy, SLOs."""

    name: str = Field(
        default="scenario",
        description="the run's name: its default folder is runs/<name>, so one folder name",
    )
    description: str = ""
    seed: int = Field(default=0, ge=0)
    model: ModelRef = Field(default_factory=lambda: model_preset("llama-3-8b"))
    hardware: HardwareRef = Field(default_factory=lambda: hardware_preset("h100"))
    cost: CostConfig = Field(default_factory=AutoCostConfig)
    # Multi-GPU layout and storage dtypes; the defaults (one GPU, the model's
    # own dtypes) change nothing. See sim.hardware.parallel and sim.hardware.quantization.
    parallelism: ParallelismConfig = Field(default_factory=ParallelismConfig)
    quantization: QuantizationConfig = Field(default_factory=QuantizationConfig)
    scheduler: PolicyConfig = Field(default_factory=ContinuousConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    frontend: FrontendConfig = Field(default_factory=FrontendConfig)
    workload: WorkloadConfig
    slo: Slo | None = None
    # Several replicas behind a router, or disaggregated prefill/decode pools;
    # None: one replica (see sim.serving.cluster).
    cluster: ClusterConfig | None = None
    # k draft tokens per decode step accepted at rate α; None: plain decoding
    # (see sim.engine.speculative).
    speculative: SpeculativeConfig | None = None
    # The folder its relative paths are read from (``base_dir``); not a field: a dump,
    # and so the scenario written beside a run, holds none.
    _base_dir: Path | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _a_name_not_a_path(cls, name: str) -> str:
        """A name is a name: ``runs/<name>`` must not climb out of ``runs/`` (``../x``),
        land elsewhere (``/etc/x``) or nest (``a/b``)."""
        if name in ("", ".", "..") or any(c in name for c in "/\\") or not name.isprintable():
            raise ValueError(
                f"{name!r} is not a name (it names the run's folder runs/<name>): no '/', "
                "'\\', control characters, '.' or '..'; --out picks another folder"
            )
        return name

    @model_validator(mode="before")
    @classmethod
    def _link_of_the_hardware(cls, data: Any) -> Any:
        """Without a ``parallelism.link``, the GPUs' own (an RTX 4090 has no NVLink)."""
        if not isinstance(data, dict):
            return data
        parallelism = data.get("parallelism", {})
        if not isinstance(parallelism, dict) or "link" in parallelism:
            return data
        link = _gpu_link(data.get("hardware", "h100"))
        if link is None:
            return data
        return {**data, "parallelism": {**parallelism, "link": link}}

    def _filled(self, **sections: Any) -> Self:
        """This scenario with ``sections`` replaced by their filled-in values: a new frozen
        value, already validated, whose set fields stay those the document set (so
        ``model_dump(exclude_unset=True)`` writes what was written, not the defaults)."""
        return type(self).model_construct(self.model_fields_set, **{**dict(self), **sections})

    @model_validator(mode="wrap")
    @classmethod
    def _fill_scheduler_defaults(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        """Fill ``None`` scheduler settings with vLLM's defaults: the batch limits for
        this hardware, the full-sequence admission check for ``engine.vllm_version``
        (a new value: docs/dev/house-rules.md)."""
        scenario = handler(data)
        policy = scenario.scheduler
        if not isinstance(policy, ContinuousSettings):
            return scenario
        update: dict[str, Any] = {}
        if policy.scheduler_reserve_full_isl is None:
            update["scheduler_reserve_full_isl"] = (
                scenario.engine.version.scheduler_reserve_full_isl
            )
        if policy.max_num_seqs is None or policy.max_num_batched_tokens is None:
            limits = batch_defaults(
                scenario.hardware.name,
                scenario.hardware.memory_bytes,
                scenario.parallelism.num_gpus,
                scenario.engine.usage_context,
                scenario.engine.max_model_len_tokens,
                policy.chunked_prefill,
                policy.max_num_batched_tokens,
                policy.max_num_seqs,
            )
            update["max_num_seqs"] = limits.max_num_seqs
            update["max_num_batched_tokens"] = limits.max_num_batched_tokens
        if not update:
            return scenario
        return scenario._filled(scheduler=policy.model_copy(update=update))

    @model_validator(mode="wrap")
    @classmethod
    def _fitted_engine_cpu(
        cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo
    ) -> Self:
        """``engine.cpu_artifact``'s coefficients into ``engine.cpu`` (and its fitted way in
        into ``frontend``); a different value the scenario also sets is refused (the same
        one is a scenario validated again after this filled it in)."""
        scenario = handler(data)
        name = scenario.engine.cpu_artifact
        if name is None:
            return scenario
        artifact = load_engine_cpu_artifact(name, (info.context or {}).get("base_dir"))
        # As kernel tables (sim.cost.kernels.config): coefficients fitted to another
        # model's or GPU's runs would price another engine's steps, silently.
        fitted = (artifact.provenance.model, artifact.provenance.hardware)
        if fitted != (scenario.model.name, scenario.hardware.name):
            raise ValueError(
                f"engine.cpu_artifact {name} was fitted on model {fitted[0]} on {fitted[1]}, "
                f"the scenario runs {scenario.model.name} on {scenario.hardware.name}: it would "
                "price another engine's CPU work (fit one on runs of this model and hardware)"
            )
        engine, frontend = scenario.engine, scenario.frontend
        if artifact.cpu is not None:
            if engine.cpu is not None and engine.cpu != artifact.cpu:
                raise ValueError(f"engine.cpu and engine.cpu_artifact {name} both set; keep one")
            engine = engine.model_copy(update={"cpu": artifact.cpu})
        way_in = artifact.way_in_s_per_request
        if way_in is not None:
            given = frontend.way_in_s_per_request
            if "way_in_s_per_request" in frontend.model_fields_set and given != way_in:
                raise ValueError(
                    f"frontend.way_in_s_per_request and engine.cpu_artifact {name} (which "
                    "fitted it) both set; keep one"
                )
            frontend = frontend.model_copy(update={"way_in_s_per_request": way_in})
        return scenario._filled(engine=engine, frontend=frontend)

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        """Checks across sections; the first problem found is the error."""
        _refuse(
            context_problem(
                self.model.name, self.engine.max_model_len_tokens, self.model.max_context_tokens
            )
        )
        policy = self.scheduler
        if (
            isinstance(policy, ContinuousSettings)
            and not policy.chunked_prefill
            and policy.limits.max_num_batched_tokens < self.engine.max_model_len_tokens
        ):
            # As vLLM: without chunking, a prompt must fit in one step's budget.
            raise ValueError(
                f"scheduler.max_num_batched_tokens ({policy.max_num_batched_tokens}) must be "
                f">= engine.max_model_len_tokens ({self.engine.max_model_len_tokens}) "
                "when chunked_prefill is off"
            )
        if (
            isinstance(policy, ContinuousSettings)
            and policy.max_num_seqs is not None
            and policy.limits.max_num_batched_tokens < policy.max_num_seqs
        ):
            # As vLLM (SchedulerConfig._verify_args), which refuses to start: every
            # running sequence needs at least one token of a step's budget.
            raise ValueError(
                f"scheduler.max_num_batched_tokens ({policy.max_num_batched_tokens}) must be "
                f">= scheduler.max_num_seqs ({policy.max_num_seqs}), as vLLM requires"
            )
        if self.speculative is not None and not isinstance(policy, ContinuousSettings):
            raise ValueError(
                f"speculative decoding needs a continuous-batching scheduler, not {policy.kind!r}"
            )
        if self.engine.async_scheduling and not isinstance(policy, ContinuousSettings):
            # async_scheduling (below) plans ahead only in vLLM v1's scheduler: a true
            # here would be dropped without a word.
            raise ValueError(
                f"engine.async_scheduling: true, but scheduler {policy.kind} plans no step "
                "ahead (only continuous batching does); remove it"
            )
        if self.engine.async_scheduling and self.speculative is not None:
            # Every speculative method is simulated step by step (docs/speculative.md,
            # Simplifications; vLLM itself refuses it with draft-model or n-gram drafts).
            raise ValueError(
                "engine.async_scheduling: true, but servesim runs speculative decoding with "
                "async scheduling off (docs/speculative.md); remove it"
            )
        link, own = self.parallelism.link.name, self.hardware.gpu_link
        if own is not None and own not in LINK_PRESETS:
            try:
                link_preset(own)
            except ConfigError as error:  # the presets' own message, naming the known ones
                raise ValueError(f"hardware.gpu_link: {error}") from None
        if (
            self.parallelism.num_gpus > 1
            and link.startswith("nvlink")
            and own is not None
            and not own.startswith("nvlink")
        ):
            raise ValueError(
                f"parallelism.link: {link}, but {self.hardware.name} GPUs have no NVLink "
                f"(their link: {own})"
            )
        _refuse(layout_problem(self.model, self.parallelism))
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _read_from(
        cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo
    ) -> Self:
        """Remembers the folder validation read the relative paths from (defined last, so
        it wraps the validators that fill in a new value)."""
        scenario = handler(data)
        scenario._base_dir = (info.context or {}).get("base_dir")
        return scenario

    def __eq__(self, other: object) -> bool:
        # The same scenario wherever it was read from: its fields, not its base_dir.
        return type(other) is type(self) and self.__dict__ == other.__dict__

    @property
    def base_dir(self) -> Path | None:
        """The folder every relative path the scenario names is read from: its model and
        ``engine.cpu_artifact`` at validation, its cost's and workload's files when a run is
        built (``sim.api.build``); its file's folder, None: the working directory."""
        return self._base_dir

    @property
    def num_gpus(self) -> int:
        """GPUs the whole deployment holds: each replica's (``parallelism``) times its
        replicas (``cluster``, prefill and decode pools included); what a fleet is priced by."""
        replicas = 1 if self.cluster is None else self.cluster.total_replicas
        return self.parallelism.num_gpus * replicas

    @property
    def async_scheduling(self) -> bool:
        """Whether steps are planned one ahead (vLLM's async scheduling) in this run: by
        default from vLLM 0.14, but not with pipeline parallelism or (draft-model)
        speculative decoding, as vLLM; only continuous batching (vLLM v1's scheduler)
        plans ahead, the other policies model other systems."""
        wanted = self.engine.async_scheduling
        if wanted is None:
            wanted = (
                self.engine.version.async_scheduling
                and self.parallelism.pipeline_parallel_size == 1
                and self.speculative is None
            )
        # Lockstep data-parallel ranks plan ahead too: vLLM 0.19 agrees each step's
        # padding over Gloo on the CPU, not NCCL (disable_nccl_for_dp_synchronization).
        return (
            wanted and isinstance(self.scheduler, ContinuousSettings) and self.speculative is None
        )

    @property
    def engine_cpu(self) -> EngineCpu:
        """The engine's CPU work per step in this run, and whether it overlaps the GPU
        step (async scheduling); the scenario's ``engine.cpu``, else its vLLM
        version's estimate, labelled as one."""
        engine = self.engine
        if engine.cpu_artifact is not None and engine.cpu is not None:
            source = f"fitted, {Path(engine.cpu_artifact).name}"
            return EngineCpu(engine.cpu, self.async_scheduling, source, given=True)
        if engine.cpu is not None:
            return EngineCpu(engine.cpu, self.async_scheduling, "engine.cpu", given=True)
        source = f"estimate, vLLM {engine.vllm_version}"
        return EngineCpu(engine.version.cpu, self.async_scheduling, source)


def scenario_from_dict(
    doc: Any, source: str = "<scenario>", base_dir: Path | None = None
) -> Scenario:
    """Validate a parsed document; ConfigError names ``source`` and the field.
    ``base_dir``: where relative paths read at validation start (None: the cwd)."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping of scenario fields at the top level")
    try:
        return Scenario.model_validate(doc, context={"base_dir": base_dir})
    except ValidationError as error:
        raise ConfigError(format_error(source, error, doc)) from None
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None


def load_scenario(
    path: str | Path,
    overrides: Overrides | None = (),
    bench_flags: BenchFlags | None = None,
    base_dir: Path | None = None,
) -> Scenario:
    """Read, override (``sim.scenario.overrides``) and validate a scenario file;
    ``bench_flags``: ``vllm bench serve``'s workload flags, written after the overrides
    (``sim.scenario.bench_flags``); ``base_dir``: where its relative paths are read
    (default: the file's folder)."""
    path = Path(path)
    doc = read_yaml(path, "scenario")
    apply_overrides(doc, overrides, str(path))
    if bench_flags is not None:
        apply_bench_flags(doc, bench_flags, overrides, str(path))
    return scenario_from_dict(doc, str(path), path.parent if base_dir is None else base_dir)


def overridden(
    scenario: Scenario, overrides: Overrides | None, source: str, base_dir: Path | None
) -> Scenario:
    """``scenario`` with ``overrides`` applied and its relative paths read from
    ``base_dir``: its fields as set, overridden, validated again (as it is without
    either)."""
    moved = _folder(base_dir) != _folder(scenario.base_dir)
    if not overrides and not moved:
        return scenario
    doc = scenario.model_dump(exclude_unset=True)
    engine, frontend = doc.get("engine", {}), doc.get("frontend", {})
    if moved and engine.get("cpu_artifact") is not None:
        # What the artifact filled in, read again from its copy in the new folder.
        engine.pop("cpu", None)
        frontend.pop("way_in_s_per_request", None)
    apply_overrides(doc, overrides, source)
    return scenario_from_dict(doc, source, base_dir)


def _folder(base_dir: Path | None) -> Path:
    """``base_dir`` as a folder to compare (None: the working directory)."""
    return (Path.cwd() if base_dir is None else Path(base_dir)).resolve()
