"""Time ``LlamaModel.forward_step`` over a grid of step shapes.

A grid has three sections: prefill-only steps (one or several prompts, with
or without a cached prefix, i.e. chunked prefill), decode-only steps (batch
sizes x context lengths, all sequences of a batch at the same context) and
mixed steps (one prefill chunk plus a decode batch). Each point is timed
``num_repeats`` times after ``num_warmup`` untimed runs. Repeats run in
passes over the whole grid, each pass in a fresh shuffled order, so a slow
spell of the machine spreads over many points instead of biasing a few.

Timing is wall time around the full step (index tensors, forward pass, KV
writes, sampling, ids copied to the host), under ``torch.inference_mode``,
with ``torch.cuda.synchronize`` on both sides on CUDA. The KV cache contents
are random (never zeros); only lengths are set before each run, so a decode
point at context ``L`` costs what a real sequence of that length costs.
"""

from __future__ import annotations

import platform
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

import sim
from calibration.model import DecodeItem, KVCache, LlamaModel, PrefillChunk
from calibration.sampling import SamplingParams
from sim.cost.base import StepShape
from sim.cost.calibrated import CalibrationSample, HardwareInfo, Section, SoftwareInfo
from sim.cost.provenance import command_output
from sim.workload.size import available_bytes


@dataclass(frozen=True)
class GridPoint:
    """One step shape: prefill chunks ``(new, cached)`` and decode contexts.

    A decode context counts the token computed in the step, so its slot holds
    ``context - 1`` cached tokens beforehand.
    """

    section: Section
    prefill_chunks: tuple[tuple[int, int], ...] = ()
    decode_contexts: tuple[int, ...] = ()

    @property
    def shape(self) -> StepShape:
        return StepShape.build(list(self.prefill_chunks), list(self.decode_contexts))

    @property
    def num_slots(self) -> int:
        return len(self.prefill_chunks) + len(self.decode_contexts)

    @property
    def max_len_tokens(self) -> int:
        lengths = [c + p for c, p in self.prefill_chunks] + list(self.decode_contexts)
        return max(lengths)

    def inputs(
        self, prefill_ids: list[list[int]], decode_ids: list[int]
    ) -> tuple[list[PrefillChunk], list[DecodeItem]]:
        """The model's inputs: chunk i in slot i, decode j in slot (chunks + j)."""
        first = len(self.prefill_chunks)
        prefill = [PrefillChunk(i, ids) for i, ids in enumerate(prefill_ids)]
        return prefill, [DecodeItem(first + j, t) for j, t in enumerate(decode_ids)]


@dataclass(frozen=True)
class Grid:
    """Points plus how often to run each."""

    name: str
    points: tuple[GridPoint, ...]
    num_warmup: int
    num_repeats: int


def _prefill(
    singles: Iterable[int],
    multi: Iterable[tuple[int, int]],
    chunked: Iterable[tuple[int, int]],
) -> list[GridPoint]:
    """Single prompts of n tokens; k prompts sharing ``total``; one chunk (c, p)."""
    points = [GridPoint("prefill", ((n, 0),)) for n in singles]
    points += [GridPoint("prefill", ((total // k, 0),) * k) for k, total in multi]
    points += [GridPoint("prefill", ((c, p),)) for c, p in chunked]
    return points


def _decode(batches: Iterable[int], contexts: Iterable[int], max_tokens: int) -> list[GridPoint]:
    """Batch x context, skipping batches whose KV exceeds ``max_tokens`` in all."""
    contexts = list(contexts)
    return [
        GridPoint("decode", decode_contexts=(ctx,) * b)
        for b in batches
        for ctx in contexts
        if b * ctx <= max_tokens
    ]


def _mixed(
    chunks: Iterable[tuple[int, int]], batches: Iterable[int], context: int
) -> list[GridPoint]:
    batches = list(batches)
    return [GridPoint("mixed", ((c, p),), (context,) * b) for c, p in chunks for b in batches]


def build_grid(name: str) -> Grid:
    """The named grid (``calibration.cli.GRID_HELP`` says what each is for)."""
    if name == "small":
        points = (
            _prefill(
                [16, 32, 64, 128, 256, 512, 1024],
                [(2, 256), (4, 256), (4, 512), (8, 512)],
                [(64, 512), (128, 256), (256, 768)],
            )
            + _decode([1, 2, 3, 4, 6, 8, 12, 16, 24, 32], [64, 512, 1024], 32 * 1024)
            + _mixed([(32, 0), (128, 256)], [2, 8, 16], 256)
        )
        return Grid("small", tuple(points), num_warmup=1, num_repeats=5)
    if name == "default":
        singles = [16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048]
        multi = [(k, t) for k in (2, 4, 8, 16) for t in (256, 1024, 2048)]
        chunked = [(c, p) for c in (32, 128, 512) for p in (256, 1024, 2048)]
        batches = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 48, 64]
        points = (
            _prefill(singles, multi, chunked)
            + _decode(batches, [32, 128, 512, 1024, 2048], 64 * 2048)
            + _mixed([(32, 0), (128, 0), (256, 512), (512, 0)], [1, 4, 16, 48], 512)
            + _mixed([(64, 1024)], [2, 8, 32], 2048)
        )
        return Grid("default", tuple(points), num_warmup=1, num_repeats=7)
    if name == "compact":  # a ~100M model's steps take 0.05-0.5 s: fewer points
        points = (
            _prefill(
                [16, 32, 64, 96, 128, 192, 256, 384, 512],
                [(2, 128), (2, 256), (4, 256), (4, 512)],
                [(64, 128), (128, 128), (128, 384), (64, 512)],
            )
            # Every batch size to 16: CPU GEMM kernels switch with the row count
            # (SmolLM2-135M: batch 4 costs 1.5x batch 3, batch 16 less than 12),
            # so interpolating between sparse batch knots misses by up to 40 %.
            + _decode([*range(1, 17), 18, 20, 22, 24, 28, 32], [32, 224, 640], 32 * 384)
            + _mixed([(32, 0), (128, 0), (128, 256)], [1, 6, 16, 30], 192)
        )
        return Grid("compact", tuple(points), num_warmup=1, num_repeats=3)
    if name == "ci":
        # The CPU validation test (tests/test_validate.py: SmolLM2-135M, chunk budget
        # 128 tokens, prompts <= 256 tokens, contexts <= 384, 1 req/s) reaches decode
        # batch 5, and batch 8 when priced 1.5x too slow; batch 12 leaves room. Every
        # batch size has its own points (the CPU kernels switch with the row count, see
        # compact), three contexts each so that one held out leaves a knot. It holds the
        # probe's three shapes (calibration.compare_measured.PROBE_POINTS), so the curve
        # interpolates there.
        points = (
            _prefill([16, 32, 64, 96, 128], [(2, 128)], [(64, 128), (128, 128)])
            + _decode(range(1, 13), [32, 160, 384], 12 * 384)
            + _mixed([(32, 0), (64, 0), (128, 0)], [1, 4, 8, 12], 160)
        )
        return Grid("ci", tuple(points), num_warmup=1, num_repeats=3)
    if name == "gpu":
        singles = [16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192]
        multi = [(k, t) for k in (2, 4, 8, 16, 32) for t in (1024, 4096, 8192)]
        chunked = [(c, p) for c in (64, 512, 2048) for p in (1024, 4096, 8192)]
        batches = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
        points = (
            _prefill(singles, multi, chunked)
            + _decode(batches, [128, 512, 1024, 2048, 4096, 8192], 256 * 2048)
            + _mixed([(128, 0), (512, 0), (2048, 0), (512, 1536)], [8, 64, 192], 1024)
        )
        return Grid("gpu", tuple(points), num_warmup=2, num_repeats=10)
    raise ValueError(f"unknown grid {name!r}; known: small, default, compact, ci, gpu")


def time_step(
    model: LlamaModel,
    cache: KVCache,
    point: GridPoint,
    prefill: list[PrefillChunk],
    decode: list[DecodeItem],
    **sampling: Any,
) -> float:
    """Wall time (s) of one step of ``point``, its slots' cached lengths set first."""
    for slot, (_, cached) in enumerate(point.prefill_chunks):
        cache.lengths[slot] = cached
    first = len(point.prefill_chunks)
    for j, ctx in enumerate(point.decode_contexts):
        cache.lengths[first + j] = ctx - 1  # the step computes the last one
    cuda = model.device_.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    model.forward_step(cache, prefill, decode, **sampling)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def profile_grid(
    model: LlamaModel,
    grid: Grid,
    rng: np.random.Generator,
    *,
    temperature: float = 1.0,
    max_kv_tokens: int | None = None,
    progress: bool = True,
) -> list[CalibrationSample]:
    """Time the points of ``grid`` on ``model``; one sample per point, grid order.

    Points whose KV cache (slots x longest sequence) exceeds ``max_kv_tokens``
    are skipped with a warning, so a grid cannot run a device out of memory.
    """
    points = tuple(
        p
        for p in grid.points
        if max_kv_tokens is None or p.num_slots * p.max_len_tokens <= max_kv_tokens
    )
    if len(points) < len(grid.points):
        warnings.warn(
            f"skipped {len(grid.points) - len(points)} of {len(grid.points)} grid points "
            f"whose KV cache exceeds {max_kv_tokens} tokens",
            stacklevel=2,
        )
    if not points:
        raise ValueError("no grid point fits in the KV budget")
    capacity = max(p.num_slots * p.max_len_tokens for p in points)
    cache = model.new_cache(1, capacity, seed=int(rng.integers(2**31)))
    sampler = torch.Generator(device=model.device_).manual_seed(int(rng.integers(2**31)))
    sampling = SamplingParams(temperature=temperature)
    vocab = model.spec.vocab_size
    inputs = [
        p.inputs(
            [rng.integers(0, vocab, c).tolist() for c, _ in p.prefill_chunks],
            [int(t) for t in rng.integers(0, vocab, len(p.decode_contexts))],
        )
        for p in points
    ]
    times: list[list[float]] = [[] for _ in points]

    def run(i: int) -> float:
        point = points[i]
        if (cache.num_slots, cache.max_len_tokens) != (point.num_slots, point.max_len_tokens):
            cache.reshape(point.num_slots, point.max_len_tokens)
        return time_step(model, cache, point, *inputs[i], sampling=sampling, generator=sampler)

    total = (grid.num_warmup + grid.num_repeats) * len(points)
    with (
        torch.inference_mode(),
        tqdm(total=total, desc=f"calibrate {grid.name}", unit="step", disable=not progress) as bar,
    ):
        for _ in range(grid.num_warmup):
            for i in range(len(points)):
                run(i)
                bar.update()
        for _ in range(grid.num_repeats):
            for i in rng.permutation(len(points)):
                # An engine runs similar steps back to back; the first step after a
                # different shape pays cold caches (~25 % at decode batch 1 on this
                # CPU), so each timed step follows an untimed one of the same shape.
                # Passes stay shuffled so that a slow spell of the machine spreads
                # over many points.
                run(int(i))
                times[int(i)].append(run(int(i)))
                bar.update()
    return [
        CalibrationSample.from_times(p.section, p.shape, t)
        for p, t in zip(points, times, strict=True)
    ]


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def free_memory_bytes(device: torch.device) -> int:
    """Memory ``device`` can still give: CUDA's free bytes, or the host's ``MemAvailable``
    (unknown: 2**62, so that nothing is refused for want of a figure)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_bytes() or 1 << 62


def hardware_info(device: torch.device) -> HardwareInfo:
    """Device name and count, driver/CUDA versions on GPU, CPU model and threads."""
    cpu = cpu_model()
    threads = torch.get_num_threads()
    if device.type == "cuda":
        driver = command_output(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        )
        return HardwareInfo(
            device="cuda",
            device_name=torch.cuda.get_device_name(device),
            device_count=torch.cuda.device_count(),
            cpu_model=cpu,
            num_threads=threads,
            driver_version=driver.splitlines()[0] if driver else None,
            cuda_version=torch.version.cuda,
        )
    return HardwareInfo(
        device="cpu", device_name=cpu, device_count=1, cpu_model=cpu, num_threads=threads
    )


def software_info() -> SoftwareInfo:
    """Versions of Python, torch, numpy and servesim."""
    return SoftwareInfo(
        python=platform.python_version(),
        numpy=np.__version__,
        servesim=sim.__version__,
        torch=torch.__version__,
    )
