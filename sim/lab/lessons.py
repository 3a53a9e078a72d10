"""One click per lesson: presets that reproduce each notebook's asserted claim.

A lesson sets the page's controls (on top of the default chat scenario) and states
the claim its notebook asserts; ``check`` runs what the claim compares on the page's
current document and says, with the numbers, whether it holds. The thresholds are
the notebooks'.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.lab.controls import RATE_KEY, SOURCE, doc_for, values_of
from sim.lab.runs import KneeCache, knee
from sim.scenario import set_dotted

Check = Callable[[dict[str, Any], KneeCache, Path], tuple[bool, str]]


@dataclass(frozen=True)
class Lesson:
    """A preset: the controls it sets, its notebook, its claim and how to check it."""

    name: str
    title: str
    notebook: str
    values: dict[str, Any]
    claim: str
    check: Check

    def doc(self) -> dict[str, Any]:
        """The page's document for this lesson: the default scenario, its values set."""
        return doc_for({**values_of(doc_for({})), **self.values})

    def spec(self) -> dict[str, Any]:
        """The lesson as the page lists it."""
        return {
            "name": self.name,
            "title": self.title,
            "notebook": self.notebook,
            "claim": self.claim,
            "values": values_of(self.doc()),
        }


def _with(doc: dict[str, Any], keys: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``keys`` (dotted scenario keys, as ``--set`` takes them) set."""
    changed = copy.deepcopy(doc)
    for key, value in keys.items():
        set_dotted(changed, key, value, SOURCE)
    return changed


def _compare(
    doc: dict[str, Any], keys: dict[str, Any], metric: str, cache: KneeCache, base_dir: Path
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """The summaries of ``doc`` and of ``doc`` with ``keys`` set, and the first's ``metric``
    over the second's: what each claim compares."""
    first, second = cache.record(doc, base_dir), cache.record(_with(doc, keys), base_dir)
    return first, second, first[metric] / second[metric]


def _hockey_stick(doc: dict[str, Any], cache: KneeCache, base_dir: Path) -> tuple[bool, str]:
    at_30 = _with(doc, {RATE_KEY: 30})
    high, low, ratio = _compare(at_30, {RATE_KEY: 2}, "p99_ttft_ms", cache, base_dir)
    detail = (
        f"p99 TTFT {low['p99_ttft_ms']:.0f} ms at 2 req/s, {high['p99_ttft_ms']:.0f} ms at "
        f"30 req/s: {ratio:.1f}x"
    )
    return ratio > 5, detail


def _chunking(doc: dict[str, Any], cache: KneeCache, base_dir: Path) -> tuple[bool, str]:
    unchunked = {"scheduler.chunked_prefill": False, "scheduler.max_num_batched_tokens": 8192}
    on, off, ratio = _compare(doc, unchunked, "p99_itl_ms", cache, base_dir)
    detail = (
        f"p99 ITL {on['p99_itl_ms']:.1f} ms chunked, {off['p99_itl_ms']:.1f} ms unchunked "
        f"(budget 8192): {ratio:.2f}x; p50 TTFT {on['median_ttft_ms']:.0f} vs "
        f"{off['median_ttft_ms']:.0f} ms"
    )
    return ratio < 0.7, detail


ROOMY_KV_BLOCKS = 35_000  # notebook 04: a cache that never fills (68 GiB of Llama-3-8B KV)


def _kv_pressure(doc: dict[str, Any], cache: KneeCache, base_dir: Path) -> tuple[bool, str]:
    roomy_cache = {"engine.num_kv_blocks": ROOMY_KV_BLOCKS}
    tight, roomy, ratio = _compare(doc, roomy_cache, "median_ttft_ms", cache, base_dir)
    detail = (
        f"{tight['num_preemptions']} preemptions with {tight['num_kv_blocks']} blocks, "
        f"{roomy['num_preemptions']} with {ROOMY_KV_BLOCKS}; p50 TTFT "
        f"{tight['median_ttft_ms']:.0f} vs {roomy['median_ttft_ms']:.0f} ms: {ratio:.0f}x"
    )
    holds = tight["num_preemptions"] > 0 and roomy["num_preemptions"] == 0 and ratio > 50
    return holds, detail


def _bursts(doc: dict[str, Any], cache: KneeCache, base_dir: Path) -> tuple[bool, str]:
    poisson = {"kind": "poisson", "rate_per_s": doc["workload"]["arrival"]["rate_per_s"]}
    bursty, plain, ratio = _compare(
        doc, {"workload.arrival": poisson}, "p99_ttft_ms", cache, base_dir
    )
    detail = (
        f"p99 TTFT {bursty['p99_ttft_ms']:.0f} ms bursty, {plain['p99_ttft_ms']:.0f} ms "
        f"Poisson at the same rate: {ratio:.1f}x"
    )
    return ratio > 1.7, detail


def _capacity(doc: dict[str, Any], cache: KneeCache, base_dir: Path) -> tuple[bool, str]:
    found = {}
    for median in (200, 1600):
        short = _with(doc, {"workload.prompt_tokens.median_tokens": median})
        result = knee(short, cache, base_dir)
        assert result is not None  # never superseded here
        found[median] = result.capacity_rate_per_s
    low, high = found[1600], found[200]
    if low is None or high is None:
        return False, f"capacity not found on the knee's grid: {found}"
    ratio = high / low
    replicas = math.ceil(100 / high)
    detail = (
        f"capacity {high:.3g} req/s at 200-token prompts ({replicas} replicas for 100 req/s), "
        f"{low:.3g} at 1,600: {ratio:.1f}x lower"
    )
    return 3 < ratio < 12, detail


_NB = "notebooks/"
LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "batching",
        "Why TTFT explodes near saturation",
        _NB + "01_queueing_and_batching.ipynb",
        {RATE_KEY: 24},
        "p99 TTFT at 30 req/s is more than 5x p99 TTFT at 2 req/s (the hockey stick)",
        _hockey_stick,
    ),
    Lesson(
        "chunked-prefill",
        "Chunked prefill: the TTFT / TPOT trade-off",
        _NB + "03_chunked_prefill.ipynb",
        {
            RATE_KEY: 2.5,
            "workload.num_requests": 1000,
            "workload.prompt_tokens.median_tokens": 5000,
            "workload.prompt_tokens.sigma": 0.25,
            "workload.output_tokens.median_tokens": 200,
            "workload.output_tokens.sigma": 0.3,
            "scheduler.max_num_seqs": 128,
            "scheduler.max_num_batched_tokens": 1024,
            "scheduler.chunked_prefill": True,
            "slo.ttft_ms": 2000,
            "slo.tpot_ms": 60,
        },
        "1024-token chunks cut the p99 inter-token gap below 0.7x that of no chunking",
        _chunking,
    ),
    Lesson(
        "kv-pressure",
        "KV-cache pressure: preemption",
        _NB + "04_kv_pressure.ipynb",
        {
            RATE_KEY: 3,
            "workload.num_requests": 500,
            "workload.prompt_tokens.median_tokens": 2500,
            "workload.prompt_tokens.sigma": 0.5,
            "workload.output_tokens.median_tokens": 250,
            "workload.output_tokens.sigma": 0.6,
            "engine.num_kv_blocks": 700,
            "slo.ttft_ms": 2000,
        },
        "a cache far below the load's peak preempts, and its p50 TTFT is over 50x a roomy cache's",
        _kv_pressure,
    ),
    Lesson(
        "bursty-demand",
        "Bursty demand",
        _NB + "05_bursty_demand.ipynb",
        # A batch limit that makes bursts queue: with 256 sequences the batch absorbs
        # them (chat at 20-24 req/s: 1.4-1.5x), which the page shows when it is raised.
        {
            RATE_KEY: 10,
            "scheduler.max_num_seqs": 32,
            "workload.arrival.kind": "gamma",
            "workload.arrival.burstiness": 0.25,
        },
        "gamma arrivals with c_a² = 4 (burstiness 0.25) give over 1.7x the p99 TTFT of "
        "Poisson arrivals at the same rate, once requests queue (max_num_seqs 32)",
        _bursts,
    ),
    Lesson(
        "capacity",
        "Capacity planning from SLOs",
        _NB + "06_capacity_planning.ipynb",
        {RATE_KEY: 20, "slo.ttft_ms": 500, "slo.tpot_ms": 50},
        "8x longer prompts (median 200 to 1,600 tokens) cut the capacity under p99 TTFT "
        "<= 500 ms and p99 TPOT <= 50 ms by 3-12x",
        _capacity,
    ),
)
LESSON_BY_NAME = {lesson.name: lesson for lesson in LESSONS}
