"""Several replicas behind a router, or disaggregated prefill and decode pools.

The ``cluster:`` section of a scenario. Each replica has its own engine core,
KV pool and step log; results concatenate them with a ``replica`` column.
Examples: ``scenarios/replicas.yaml``, ``scenarios/disaggregated.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from pydantic import Field, model_validator

from sim.config import FloatArray, Frozen
from sim.engine.columns import frame_of
from sim.engine.policies.static import Static
from sim.engine.records import RequestTable, completed_mask
from sim.engine.request import Request
from sim.engine.scheduler import Continuous, Scheduler
from sim.engine.step_runs import StepTable
from sim.engine.tokens import token_times_s
from sim.errors import ConfigError
from sim.serving.disagg import Disaggregated, DisaggregationConfig
from sim.serving.pool import Pool, ReplicaFactory
from sim.serving.router import RouterKind, make_router

if TYPE_CHECKING:
    import pandas as pd

    from sim.serving.replica_config import ReplicaConfig


class ClusterConfig(Frozen):
    """How many replicas, how requests are spread over them, and disaggregation."""

    num_replicas: int = Field(default=1, ge=1, description="identical replicas (model servers)")
    router: RouterKind = Field(default="round_robin", description="how a replica is chosen")
    central_queue_slots: int | None = Field(
        default=None,
        ge=1,
        description="central_queue: requests a replica holds at most "
        "(default: the scheduler's max_num_seqs or max_batch_size)",
    )
    lockstep: bool = Field(
        default=False,
        description="replicas are data-parallel ranks of one MoE model that step together "
        "(vLLM DP with expert parallelism): each step lasts as long as the slowest rank's",
    )
    disaggregation: DisaggregationConfig | None = None

    @model_validator(mode="after")
    def _check_replicas(self) -> ClusterConfig:
        split = self.disaggregation
        if self.central_queue_slots is not None and self.router != "central_queue":
            # Another router sends each request at once: the figure would change nothing.
            raise ValueError(
                f"central_queue_slots is router central_queue's, not {self.router}'s "
                "(set router: central_queue, or remove central_queue_slots)"
            )
        if split is not None and self.lockstep:
            raise ValueError("lockstep is for one pool of data-parallel ranks, not disaggregation")
        if split is not None and "num_replicas" in self.model_fields_set:
            total = split.num_prefill_replicas + split.num_decode_replicas
            if self.num_replicas != total:
                raise ValueError(
                    f"num_replicas ({self.num_replicas}) must equal num_prefill_replicas + "
                    f"num_decode_replicas ({total}) with disaggregation, or be left out"
                )
        return self

    @property
    def total_replicas(self) -> int:
        split = self.disaggregation
        if split is None:
            return self.num_replicas
        return split.num_prefill_replicas + split.num_decode_replicas


@dataclass(frozen=True)
class Cluster:
    """A cluster config with what a run of it needs from the rest of the scenario."""

    config: ClusterConfig
    rng: np.random.Generator  # router draws (power_of_two), spawned from the scenario seed
    kv_bytes_per_token: float = 0.0  # the model's: sizes KV transfers


def batch_limit(policy: Scheduler) -> int:
    """Requests one replica runs at once under ``policy`` (for central-queue slots)."""
    if isinstance(policy, Continuous):
        return policy.max_num_seqs
    if isinstance(policy, Static):  # and Dynamic, its subclass
        return policy.max_batch_size
    raise ConfigError(
        "cluster.central_queue_slots: must be set for a scheduler without "
        "max_num_seqs or max_batch_size"
    )


def build_layout(
    env: simpy.Environment,
    replica_config: ReplicaConfig,
    cluster: Cluster,
    on_done: Callable[[Request], None],
    new_replica: ReplicaFactory,
) -> Pool | Disaggregated:
    """The replicas of ``cluster``: one routed pool, or prefill and decode pools."""
    config = cluster.config
    slots = None
    if config.router == "central_queue":
        slots = config.central_queue_slots or batch_limit(replica_config.core.make_policy())
    split = config.disaggregation
    if split is None:
        router = make_router(config.router, cluster.rng)
        numbers = range(config.num_replicas)
        return Pool(
            env, replica_config, new_replica, numbers, router, on_done, slots, config.lockstep
        )
    routers = (make_router(config.router, cluster.rng), make_router(config.router, cluster.rng))
    return Disaggregated(
        env, replica_config, split, cluster.kv_bytes_per_token, routers, on_done, new_replica, slots
    )


def _imbalance(counts: list[int]) -> float | None:
    """max / mean of per-replica counts: 1.0 when even, ``n`` when one replica did all."""
    mean = sum(counts) / len(counts) if counts else 0.0
    return max(counts) / mean if mean > 0 else None


def cluster_summary(requests: RequestTable, config: ClusterConfig) -> dict[str, Any]:
    """Summary keys of a cluster run: replicas, router, completed per replica, imbalance
    (with disaggregation a request counts at both its replicas, prefill ones first,
    and the imbalance is the larger of the two pools')."""
    done = completed_mask(requests)
    replica = np.asarray(requests["replica"])[done]
    total = config.total_replicas
    summary: dict[str, Any] = {"num_replicas": total, "router": config.router}
    split = config.disaggregation
    if split is None:
        counts = np.bincount(replica, minlength=total).tolist()
        summary |= {"replica_completed": counts, "replica_imbalance": _imbalance(counts)}
        return summary
    num_prefill = split.num_prefill_replicas
    prefill = requests["prefill_replica"][done]
    prefill_counts = np.bincount(
        prefill[np.isfinite(prefill)].astype(np.int64), minlength=num_prefill
    )[:num_prefill].tolist()
    decode_counts = np.bincount(replica[replica >= num_prefill], minlength=total)[
        num_prefill:
    ].tolist()
    imbalances = [x for x in (_imbalance(prefill_counts), _imbalance(decode_counts)) if x]
    transfer_s = requests["kv_transfer_s"]
    transfer_s = transfer_s[np.isfinite(transfer_s)]
    summary |= {
        "replica_completed": prefill_counts + decode_counts,
        "replica_imbalance": max(imbalances) if imbalances else None,
        "num_prefill_replicas": num_prefill,
        "num_decode_replicas": split.num_decode_replicas,
        "num_kv_transfers": int(transfer_s.size),
        "mean_kv_transfer_ms": float(transfer_s.mean() * 1e3) if transfer_s.size else None,
        "p99_kv_transfer_ms": (
            float(np.percentile(transfer_s, 99) * 1e3) if transfer_s.size else None
        ),
    }
    return summary


def total_over_replicas(series: pd.DataFrame) -> pd.DataFrame:
    """The time series of several replicas as one: queues summed, KV usage averaged,
    each replica's samples holding until its next (0 before its first)."""
    if "replica" not in series.columns or series["replica"].nunique() <= 1:
        return series
    columns = [c for c in ("num_waiting", "num_running", "kv_cache_usage") if c in series]
    wide = series.pivot_table(index="time_s", columns="replica", values=columns, aggfunc="last")
    wide = wide.sort_index().ffill().fillna(0.0)
    out = {"time_s": wide.index.to_numpy()}
    for column in columns:
        part = wide[column].to_numpy()
        out[column] = part.mean(axis=1) if column == "kv_cache_usage" else part.sum(axis=1)
    return frame_of(out)


def request_token_times_s(
    steps: StepTable,
    first_token_s: float,
    num_generated_tokens: int,
    later_runs: list[tuple[float, int]] | None,
    replica: int,
    prefill_replica: int | None = None,
) -> FloatArray:
    """Engine token times of one request from its replica's steps (``sim.engine.tokens``);
    with disaggregation the first token is on ``prefill_replica``, the rest on ``replica``."""

    def ends(index: int) -> FloatArray:
        return steps.part(index).end_s

    runs = later_runs or []
    if prefill_replica is None or prefill_replica == replica:
        return token_times_s(ends(replica), first_token_s, num_generated_tokens, runs)
    num_first = runs[0][1] if runs else num_generated_tokens
    head = token_times_s(ends(prefill_replica), first_token_s, num_first)
    if not runs:
        return head
    start_s, before = runs[0]
    tail_runs = [(t, n - before) for t, n in runs[1:]]
    tail = token_times_s(ends(replica), start_s, num_generated_tokens - before, tail_runs)
    return np.concatenate([head, tail])
