"""Disaggregated prefill and decode: two pools, the KV cache moved between them.

A request goes to a prefill replica as a one-output-token copy of itself, which
frees its blocks once it has the first token; its KV cache
(``num_prompt_tokens × kv_bytes_per_token`` bytes) then moves to a decode
replica in

    kv_transfer_s = kv_transfer_latency_s + bytes / kv_transfer_bandwidth_bytes_per_s

over an uncontended link, and queues there with its prompt computed and one
token generated. TTFT is the prefill replica's; the transfer shows in the first
inter-token gap. One-token requests never move.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import simpy
from pydantic import Field

from sim.config import Frozen
from sim.engine.columns import Columns
from sim.engine.records import Records, RequestTable, rows_of
from sim.engine.request import Request
from sim.serving.pool import Pool, ReplicaFactory
from sim.serving.router import Router

if TYPE_CHECKING:
    from sim.serving.replica_config import ReplicaConfig

TRANSFER_COLUMNS = {"request_id": "i8", "kv_transfer_start_s": "f8", "kv_transfer_s": "f8"}


class DisaggregationConfig(Frozen):
    """Separate prefill and decode replicas and the link that carries the KV cache."""

    num_prefill_replicas: int = Field(default=1, ge=1)
    num_decode_replicas: int = Field(default=1, ge=1)
    # 50 GB/s: one 400 Gb/s RDMA NIC per GPU; NVLink within a node is ~10x faster.
    kv_transfer_bandwidth_bytes_per_s: float = Field(default=50e9, gt=0)
    # Finite: an infinite latency delivers no KV cache, and no request would finish.
    kv_transfer_latency_s: float = Field(default=1e-4, ge=0, allow_inf_nan=False)

    def transfer_s(self, num_tokens: int, kv_bytes_per_token: float) -> float:
        """Seconds to move the KV cache of ``num_tokens`` tokens over the link."""
        num_bytes = num_tokens * kv_bytes_per_token
        return self.kv_transfer_latency_s + num_bytes / self.kv_transfer_bandwidth_bytes_per_s


class Disaggregated:
    """A prefill pool (replicas ``0..P-1``) and a decode pool (``P..P+D-1``)."""

    def __init__(
        self,
        env: simpy.Environment,
        replica_config: ReplicaConfig,
        config: DisaggregationConfig,
        kv_bytes_per_token: float,
        routers: tuple[Router, Router],
        on_done: Callable[[Request], None],
        new_replica: ReplicaFactory,
        central_slots: int | None = None,
    ) -> None:
        self.env = env
        self.config = config
        self.kv_bytes_per_token = kv_bytes_per_token
        self.on_done = on_done
        num_prefill = config.num_prefill_replicas
        num_replicas = num_prefill + config.num_decode_replicas
        prefill_numbers, decode_numbers = range(num_prefill), range(num_prefill, num_replicas)
        common = (env, replica_config, new_replica)
        self.prefill = Pool(*common, prefill_numbers, routers[0], self._prefilled, central_slots)
        self.decode = Pool(*common, decode_numbers, routers[1], self._decoded, central_slots)
        self.cores = self.prefill.cores + self.decode.cores
        self.front_replicas = self.prefill.replicas
        self.num_done = 0
        # Requests whose one-token copy is on a prefill replica, by id.
        self._pending: dict[int, Request] = {}
        self.transfers = Columns(TRANSFER_COLUMNS)

    def submit(self, request: Request) -> None:
        """To a prefill replica (or rejected at once if it can never fit)."""
        if self.decode.cores[0].rejection_reason(request) is not None:
            self.decode.submit(request)  # rejected there, and recorded
            return
        if request.num_output_tokens == 1:
            self.prefill.submit(request)
            return
        self._pending[request.request_id] = request
        self.prefill.submit(replace(request, num_output_tokens=1))

    def _prefilled(self, copy: Request) -> None:
        full = self._pending.get(copy.request_id)
        if full is None or copy.finish_s is None:  # a one-token request, or never prefilled
            self._decoded(copy)
            return
        del self._pending[copy.request_id]
        first_token_s = copy.first_token_s
        full.num_computed_tokens = full.num_prompt_tokens
        full.num_generated_tokens = 1
        full.first_token_s = first_token_s
        full.last_token_s = first_token_s  # so the first gap on the decode side is an ITL
        full.num_preemptions = copy.num_preemptions
        full.num_swaps = copy.num_swaps
        delay_s = self.config.transfer_s(full.num_prompt_tokens, self.kv_bytes_per_token)
        self.transfers.append(full.request_id, self.env.now, delay_s)
        self.env.timeout(delay_s).callbacks.append(lambda _: self.decode.submit(full))

    def _decoded(self, request: Request) -> None:
        self.num_done += 1
        self.on_done(request)

    def flush(self) -> None:
        """After the run: central queues into their cores, to be recorded unfinished."""
        self.prefill.flush()
        self.decode.flush()

    def requests_table(self, records: Records, rejections: Mapping[int, str]) -> RequestTable:

        is_prefill = records["replica"] < self.config.num_prefill_replicas
        outputs = {rid: r.num_output_tokens for rid, r in self._pending.items()}
        prefill = {name: values[is_prefill] for name, values in records.items()}
        decode = {name: values[~is_prefill] for name, values in records.items()}
        columns = merge_records(prefill, decode, self.transfers.views(), outputs)
        return RequestTable(columns, rejections, nullable={"prefill_replica": "Int32"})


def merge_records(
    prefill: Records,
    decode: Records,
    transfers: Records,
    stranded_outputs: Mapping[int, int] | None = None,
) -> Records:
    """Join each request's prefill record (a one-token copy) and decode record, in
    request id order: the decode record with the prefill side's ``ready_s`` and
    ``first_scheduled_s``, plus ``decode_ready_s``, ``decode_first_scheduled_s``,
    ``prefill_replica``, ``kv_transfer_start_s`` and ``kv_transfer_s`` (NaN:
    none). A request seen by one pool only keeps that record;
    ``stranded_outputs``: the true output length of those left on the prefill side.
    """
    pre_ids, dec_ids = prefill["request_id"], decode["request_id"]  # unique, in no order
    rows, both = rows_of(pre_ids, dec_ids, np.argsort(pre_ids))
    alone = ~rows_of(dec_ids, pre_ids, np.argsort(dec_ids))[1]  # prefill side only
    joined: Records = {}
    for name, values in decode.items():
        head = values.copy()
        if name in ("ready_s", "first_scheduled_s", "num_cached_tokens"):  # prefill side's
            head[both] = prefill[name][rows[both]]
        elif name in ("num_prefix_lookups", "num_prefix_query_tokens", "num_prefix_hit_tokens"):
            head[both] += prefill[name][rows[both]]  # lookups on either side count
        joined[name] = np.concatenate([head, prefill[name][alone]])
    stranded = stranded_outputs or {}
    ids, num_outputs = pre_ids[alone].tolist(), prefill["num_output_tokens"][alone].tolist()
    outputs = [stranded.get(i, n) for i, n in zip(ids, num_outputs, strict=True)]
    joined["num_output_tokens"][len(dec_ids) :] = outputs
    missing = np.full(int(alone.sum()), np.nan)
    joined["decode_ready_s"] = np.concatenate([decode["ready_s"], missing])
    joined["decode_first_scheduled_s"] = np.concatenate([decode["first_scheduled_s"], missing])
    prefill_replica = _gathered(prefill["replica"], rows, both)
    joined["prefill_replica"] = np.concatenate([prefill_replica, prefill["replica"][alone]])
    sent_ids = transfers["request_id"]
    rows, sent = rows_of(sent_ids, joined["request_id"], np.argsort(sent_ids))
    for name in ("kv_transfer_start_s", "kv_transfer_s"):
        joined[name] = _gathered(transfers[name], rows, sent)
    order = np.argsort(joined["request_id"], kind="stable")
    return {name: values[order] for name, values in joined.items()}


def _gathered(
    values: npt.NDArray[Any], rows: npt.NDArray[np.intp], found: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """``values`` at ``rows`` as floats, NaN where not ``found``."""
    out = np.full(len(rows), np.nan)
    out[found] = values[rows[found]]
    return out
