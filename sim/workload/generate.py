"""The workload: which requests arrive, when, and how long they are.

Three kinds, tagged by ``kind``:

* ``synthetic``: an arrival process (:mod:`sim.workload.arrivals`) and two length
  distributions (:mod:`sim.workload.lengths`), for ``num_requests`` requests or for
  every arrival before ``duration_s``.
* ``trace``: replay of a trace file (:mod:`sim.workload.traces.workload`: Azure, CSV,
  BurstGPT, Mooncake with prefix hash ids, ShareGPT length lists), lengths from the trace.
* ``closed_loop``: ``num_users`` users who each send a request, wait for its
  response, think, and send the next, ``num_requests`` in all; the simulator
  pulls lengths, think times and prefix groups from a :class:`ClosedLoopSource`.

``workload: {profile: ...}`` (:mod:`sim.workload.profiles`) expands into one of
these before validation. An open loop's ``max_concurrency`` caps the requests
in flight as ``vllm bench serve --max-concurrency`` does (docs/vllm-fidelity.md,
"Arrivals as ``vllm bench serve`` sends them").

Random streams: the generator passed in is split with ``rng.spawn(3)`` into one
child per stream (synthetic: arrivals, prompt lengths, output lengths; closed loop:
think times, prompt lengths, output lengths), and further children (prefix groups,
priorities) are spawned only when used. So changing the arrival rate, or one length
distribution, leaves the other streams' draws unchanged: request ``i`` keeps its
lengths. (``spawn`` advances the parent: two calls on one generator differ.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BeforeValidator, Field, model_validator

from sim.config import FloatArray, Frozen, IntArray
from sim.workload.arrivals import ArrivalConfig, arrival_times_s, check_clock
from sim.workload.lengths import (
    FixedThinkTime,
    LengthConfig,
    ThinkTimeConfig,
    make_length_sampler,
    sample_think_times_s,
)
from sim.workload.profiles import expand_profile
from sim.workload.trace import HashIds
from sim.workload.traces.workload import TraceWorkload, trace_requests

CLOSED_LOOP_BLOCK = 4096
"""Draws pre-made per numpy call by :class:`ClosedLoopSource`."""


class PrefixGroupsConfig(Frozen):
    """Shared system prompts: each request picks one of ``num_groups`` groups
    uniformly at random; its prompt is the group's ``shared_prefix_tokens``
    followed by the drawn ``prompt_tokens`` (the user's part)."""

    num_groups: int = Field(gt=0)
    shared_prefix_tokens: int = Field(gt=0)


class PriorityClassesConfig(Frozen):
    """Per-request priority classes: class ``i`` is drawn with probability
    ``weights[i] / sum(weights)`` and gets priority ``values[i]`` (default ``i``;
    lower is more urgent, as in vLLM, see :mod:`sim.engine.policies.priority`)."""

    kind: Literal["classes"] = "classes"
    weights: list[float] = Field(min_length=1)
    values: list[int] | None = None

    @model_validator(mode="after")
    def _check_classes(self) -> PriorityClassesConfig:
        if not all(w >= 0 for w in self.weights) or not sum(self.weights) > 0:
            raise ValueError("weights must be >= 0 with a positive sum")
        if self.values is not None and len(self.values) != len(self.weights):
            raise ValueError("values must have one entry per weight")
        return self

    def sample(self, rng: np.random.Generator, size: int) -> IntArray:
        """``size`` priorities drawn independently."""
        weights = np.asarray(self.weights, dtype=np.float64)
        values = np.asarray(
            self.values if self.values is not None else range(len(weights)), dtype=np.int64
        )
        return values[rng.choice(len(weights), size=size, p=weights / weights.sum())]


class SyntheticWorkload(Frozen):
    """Requests from an arrival process with independently drawn lengths.

    ``prefix_groups`` (optional) makes requests share prompt prefixes, which
    a prefix cache (``engine.enable_prefix_caching``) can reuse.
    """

    kind: Literal["synthetic"] = "synthetic"
    arrival: ArrivalConfig
    prompt_tokens: LengthConfig
    output_tokens: LengthConfig
    num_requests: int | None = Field(default=None, gt=0)
    duration_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    prefix_groups: PrefixGroupsConfig | None = None
    priority: PriorityClassesConfig | None = None
    # At most this many requests in flight (sent, not yet answered); a later
    # arrival waits client-side for a slot (vllm bench serve --max-concurrency).
    max_concurrency: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check_extent(self) -> SyntheticWorkload:
        if (self.num_requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of num_requests and duration_s")
        if self.duration_s is not None and math.isinf(self.arrival.rate_per_s):
            raise ValueError("arrival.rate_per_s .inf (all at once) needs num_requests")
        return self


class ClosedLoopWorkload(Frozen):
    """``num_users`` users in a send / wait / think loop, ``num_requests`` requests in all."""

    kind: Literal["closed_loop"] = "closed_loop"
    num_users: int = Field(gt=0)
    think_time_s: ThinkTimeConfig
    prompt_tokens: LengthConfig
    output_tokens: LengthConfig
    num_requests: int = Field(gt=0)
    # Shared system prompts, as for a synthetic workload: request i's group is
    # the i-th draw of a fourth stream, its prompt the group's prefix + its own.
    prefix_groups: PrefixGroupsConfig | None = None


OpenLoopWorkload = SyntheticWorkload | TraceWorkload

WorkloadConfig = Annotated[
    SyntheticWorkload | TraceWorkload | ClosedLoopWorkload,
    Field(discriminator="kind"),
    BeforeValidator(expand_profile),
]
"""Any workload, chosen by its ``kind`` (or a ``profile``, expanded into one)."""


def shared_prefixes(workload: WorkloadConfig) -> str | None:
    """What makes ``workload``'s requests share prompt prefixes (the setting, in words),
    or None: a written-out trace of lengths and times alone would drop it."""
    if workload.kind == "trace":
        if workload.format == "mooncake":
            return "the Mooncake trace's hash_ids"
        if workload.hash_ids_column is not None:
            return f"the trace's hash ids (workload.hash_ids_column {workload.hash_ids_column!r})"
        return None
    return "workload.prefix_groups" if workload.prefix_groups is not None else None


def unsaved_by_trace(workload: WorkloadConfig, keeps_hash_ids: bool) -> str | None:
    """What of ``workload``'s requests a written-out trace of times and lengths (and
    hash ids where ``keeps_hash_ids``) would drop, in words, or None: its replay would
    run other requests."""
    if workload.kind == "synthetic" and workload.priority is not None:
        return "their priorities (workload.priority), which no trace format keeps"
    shared = shared_prefixes(workload)
    if shared is None:
        return None
    if not keeps_hash_ids:
        return f"their shared prompt prefixes ({shared}), which the format does not keep"
    return None


@dataclass(frozen=True, slots=True)
class RequestArrays:
    """An open-loop workload: request ``i`` arrives at ``arrival_s[i]`` seconds.

    The arrays are read-only, of one length, ``arrival_s`` non-decreasing, token
    counts at least 1. Optionally request ``i`` shares its first
    ``num_shared_prefix_tokens[i]`` prompt tokens with group ``prefix_group[i]``, or
    (a trace's hash ids) its prompt blocks of ``block_hash_tokens`` have ids
    ``block_hash_ids[i]``.
    """

    arrival_s: FloatArray
    num_prompt_tokens: IntArray
    num_output_tokens: IntArray
    prefix_group: IntArray | None = None
    num_shared_prefix_tokens: IntArray | None = None
    priority: IntArray | None = None  # optional per-request priority (lower: more urgent)
    block_hash_ids: HashIds | None = None
    block_hash_tokens: int | None = None  # tokens per hash id (None: the engine's block)
    # At most this many requests in flight; an arrival beyond waits for a slot
    # and is sent (its arrival_s in the results) when it gets one. None: no cap.
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        n = self.arrival_s.shape
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("RequestArrays: max_concurrency must be >= 1")
        if len(n) != 1 or self.arrival_s.dtype != np.float64:
            raise ValueError("RequestArrays: arrival_s must be 1-D float64")
        if (self.prefix_group is None) != (self.num_shared_prefix_tokens is None):
            raise ValueError("RequestArrays: give both prefix arrays or neither")
        self.arrival_s.setflags(write=False)
        for array in (
            self.num_prompt_tokens,
            self.num_output_tokens,
            self.prefix_group,
            self.num_shared_prefix_tokens,
            self.priority,
        ):
            if array is not None:
                if array.shape != n or array.dtype != np.int64:
                    raise ValueError("RequestArrays: integer arrays: int64, one length")
                array.setflags(write=False)
        if self.block_hash_ids is not None and len(self.block_hash_ids) != n[0]:
            raise ValueError("RequestArrays: block_hash_ids must have one entry per request")

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    def hash_ids(self) -> tuple[HashIds, int | None] | None:
        """The shared prefixes as a csv trace's hash ids, and the tokens an id covers
        (None: the engine's block), or None where none is shared: a trace's own ids,
        or prefix group ``g`` of ``N`` tokens as the one id ``g`` of ``N`` tokens (the
        same blocks shared: ``sim.engine.kv_blocks``)."""
        if self.block_hash_ids is not None:
            return self.block_hash_ids, self.block_hash_tokens
        if self.prefix_group is None or not len(self):
            return None
        assert self.num_shared_prefix_tokens is not None
        (num_tokens,) = set(self.num_shared_prefix_tokens.tolist())  # one config's
        return tuple((group,) for group in self.prefix_group.tolist()), num_tokens


def generate_open_loop(
    config: OpenLoopWorkload, rng: np.random.Generator, base_dir: Path | str | None = None
) -> RequestArrays:
    """All requests of a ``synthetic`` or ``trace`` workload; ``base_dir`` (the scenario
    file's folder) anchors relative paths."""
    if isinstance(config, TraceWorkload):
        rows = trace_requests(config, rng, base_dir)
        if len(rows.arrival_s):
            scale = "arrival.rate_per_s" if config.arrival is not None else "time_scale"
            scale = "rate_per_s" if config.rate_per_s is not None else scale
            check_clock(float(np.max(rows.arrival_s)), f"workload.{scale}")
        return RequestArrays(
            np.array(rows.arrival_s),
            np.array(rows.num_prompt_tokens),
            np.array(rows.num_output_tokens),
            block_hash_ids=rows.block_hash_ids,
            block_hash_tokens=rows.block_hash_tokens,
            max_concurrency=config.max_concurrency,
        )
    # Build samplers first so a bad empirical file fails before any drawing.
    prompt_sampler = make_length_sampler(config.prompt_tokens, base_dir)
    output_sampler = make_length_sampler(config.output_tokens, base_dir)
    arrival_rng, prompt_rng, output_rng = rng.spawn(3)
    arrival_s = arrival_times_s(
        config.arrival, arrival_rng, num_requests=config.num_requests, duration_s=config.duration_s
    )
    size = arrival_s.shape[0]
    if size:
        extent = "duration_s" if config.duration_s is not None else "arrival.rate_per_s"
        check_clock(float(arrival_s[-1]), f"workload.{extent}")
    prompts = prompt_sampler.sample(prompt_rng, size)
    outputs = output_sampler.sample(output_rng, size)
    groups = config.prefix_groups
    if groups is None:
        arrays = RequestArrays(arrival_s, prompts, outputs)
    else:
        # A fourth child stream: the three above draw exactly as without groups.
        (group_rng,) = rng.spawn(1)
        shared = np.full(size, groups.shared_prefix_tokens, dtype=np.int64)
        arrays = RequestArrays(
            arrival_s,
            prompts + shared,
            outputs,
            prefix_group=np.asarray(
                group_rng.integers(0, groups.num_groups, size=size, dtype=np.int64)
            ),
            num_shared_prefix_tokens=shared,
        )
    arrays = replace(arrays, max_concurrency=config.max_concurrency)
    if config.priority is None:
        return arrays
    (priority_rng,) = rng.spawn(1)  # a further stream: the others draw as without it
    return replace(arrays, priority=config.priority.sample(priority_rng, len(arrays)))


def _one_by_one(draw: Callable[[int], npt.NDArray[Any]]) -> Iterator[Any]:
    """``draw(CLOSED_LOOP_BLOCK)``'s values one at a time, as Python scalars: one numpy
    call per block, a generator step per value."""
    while True:
        yield from draw(CLOSED_LOOP_BLOCK).tolist()


class ClosedLoopSource:
    """Lengths and think times for a closed-loop run, drawn lazily in blocks.

    Each stream has its own generator (module docstring), so the ``i``-th call of
    :meth:`next_lengths` returns the same pair for a given seed whatever the think
    times or the order of calls. With prefix groups, the ``i``-th prompt includes
    the group's shared prefix and the ``i``-th call of :meth:`next_prefix` names it.
    """

    def __init__(
        self,
        config: ClosedLoopWorkload,
        rng: np.random.Generator,
        base_dir: Path | str | None = None,
    ) -> None:
        think = config.think_time_s
        # Each user thinks before each of its requests: its pauses alone take the clock
        # this far (on average), whatever the server does.
        mean_think_s = think.value_s if isinstance(think, FixedThinkTime) else think.mean_s
        rounds = -(-config.num_requests // config.num_users)
        check_clock(rounds * mean_think_s, "workload.think_time_s")
        self.num_users = config.num_users
        self.num_requests = config.num_requests
        prompt_sampler = make_length_sampler(config.prompt_tokens, base_dir)
        output_sampler = make_length_sampler(config.output_tokens, base_dir)
        think_rng, prompt_rng, output_rng = rng.spawn(3)
        self._prompts = _one_by_one(partial(prompt_sampler.sample, prompt_rng))
        self._outputs = _one_by_one(partial(output_sampler.sample, output_rng))
        self._thinks = _one_by_one(partial(sample_think_times_s, think, think_rng))
        groups = config.prefix_groups
        self._groups: Iterator[int] | None = None
        self._shared_tokens = 0
        self._drawn_groups: list[int] = []  # request i's group, as drawn (``hash_ids``)
        if groups is not None:
            # A fourth stream, spawned only with groups: the others draw as without.
            (group_rng,) = rng.spawn(1)
            num_groups = groups.num_groups
            self._groups = _one_by_one(
                lambda size: group_rng.integers(0, num_groups, size=size, dtype=np.int64)
            )
            self._shared_tokens = groups.shared_prefix_tokens

    def next_lengths(self) -> tuple[int, int]:
        """``(num_prompt_tokens, num_output_tokens)`` of the next request."""
        return next(self._prompts) + self._shared_tokens, next(self._outputs)

    def next_prefix(self) -> tuple[int, int] | None:
        """``(prefix_group, num_shared_prefix_tokens)`` of the next request, or None
        without prefix groups (call it once per request, next to :meth:`next_lengths`)."""
        if self._groups is None:
            return None
        self._drawn_groups.append(next(self._groups))
        return self._drawn_groups[-1], self._shared_tokens

    def hash_ids(self) -> tuple[HashIds, int | None] | None:
        """The groups drawn so far as a csv trace's hash ids (``RequestArrays.hash_ids``:
        request ``i`` is the ``i``-th drawn), or None without prefix groups."""
        if self._groups is None or not self._drawn_groups:
            return None
        return tuple((group,) for group in self._drawn_groups), self._shared_tokens

    def next_think_s(self) -> float:
        """The next think time in seconds (>= 0)."""
        return next(self._thinks)
