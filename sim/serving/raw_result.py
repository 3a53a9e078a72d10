"""A run's raw result: every replica's outputs (``CoreOutput``, arrays only, so a
worker process can send them back pickled) merged, as the client sees them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from sim.engine.columns import frame_of
from sim.engine.records import Records, RequestTable
from sim.engine.scheduler import EngineCore
from sim.engine.step_runs import StepRuns, StepTable
from sim.serving.frontend import Delivery, deliver
from sim.serving.replica_config import FrontendConfig

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd


@dataclass(frozen=True)
class CoreOutput:
    """One replica's records (in the order requests left the core), step log, queue
    series (with ``kv_cache_usage`` and ``replica``) and token gaps
    (``EngineCore.extra_itl_s``)."""

    replica: int
    records: Records
    rejections: dict[int, str]
    later_runs: dict[int, list[tuple[float, int]]]
    runs: StepRuns
    series: dict[str, npt.NDArray[Any]]
    extra_itl_s: npt.NDArray[np.float64]
    extra_itl_from_s: npt.NDArray[np.float64]

    @classmethod
    def of(cls, core: EngineCore) -> CoreOutput:
        """``core``'s outputs, once the run is over (after ``flush_unfinished``)."""
        series = core.series.views()
        series["kv_cache_usage"] = series["num_kv_blocks_used"] / core.kv.num_blocks
        series["replica"] = np.full(len(series["time_s"]), core.replica, dtype=np.int32)
        return cls(
            replica=core.replica,
            records=core.take_records(),  # the core keeps none: see take_records
            rejections=core.rejections,
            later_runs=core.later_runs,
            runs=core.steps.runs(core.replica),
            series=series,
            extra_itl_s=np.asarray(core.extra_itl_s, dtype=np.float64),
            extra_itl_from_s=np.asarray(core.extra_itl_from_s, dtype=np.float64),
        )


@dataclass
class RawResult:
    """What a run produced, before metrics.

    ``records``: one row per request (a disaggregated run's joined), with client
    ``first_token_s`` and ``finish_s`` and the engine's as ``engine_*``.
    ``step_table``: the compact step log with delivery times. ``series``: each
    replica's queue state. ``extra_itl_s``: client gaps the step log does not
    cover (after a break in a request's run). ``accelerator``: the speed path
    that ran it, where one says so. ``num_sent``: the requests the workload sent
    (None: not known). The frames (``requests``, ``timeseries``, ``steps``) are
    built on first use.
    """

    records: RequestTable
    step_table: StepTable
    series: dict[str, npt.NDArray[Any]]
    extra_itl_s: npt.NDArray[np.float64]
    later_runs: dict[int, list[tuple[float, int]]]
    num_replicas: int = 1
    accelerator: str | None = None
    num_sent: int | None = None

    @functools.cached_property
    def requests(self) -> pd.DataFrame:
        return self.records.frame()

    @functools.cached_property
    def timeseries(self) -> pd.DataFrame:
        return frame_of(self.series)

    @functools.cached_property
    def steps(self) -> pd.DataFrame:
        return self.step_table.frame()


def raw_result(
    outputs: Sequence[CoreOutput],
    frontend: FrontendConfig,
    disaggregated: Callable[[Records, Mapping[int, str]], RequestTable] | None = None,
) -> RawResult:
    """Every replica's records, step log and series, concatenated, with token times
    through the frontend. ``disaggregated``: the layout's ``requests_table``."""
    records = _concat([output.records for output in outputs])
    rejections: dict[int, str] = {}
    later_runs: dict[int, list[tuple[float, int]]] = {}
    for output in outputs:
        rejections.update(output.rejections)
        later_runs.update(output.later_runs)
    if disaggregated is None:
        order = np.argsort(records["request_id"], kind="stable")
        requests = RequestTable(
            {name: values[order] for name, values in records.items()}, rejections
        )
    else:
        requests = disaggregated(records, rejections)
    steps = StepTable(tuple(output.runs for output in outputs))
    steps = deliver(steps, frontend.output_step_s, frontend.detokenize_s_per_token)
    delivery = Delivery.of(steps)
    first_on = requests["replica"]
    if "prefill_replica" in requests:  # disaggregated: first token from there
        prefill = requests["prefill_replica"]
        first_on = np.where(np.isnan(prefill), first_on, np.nan_to_num(prefill)).astype(int)
    requests["engine_first_token_s"] = requests["first_token_s"]
    requests["engine_finish_s"] = requests["finish_s"]
    requests["first_token_s"] = delivery.client_s(requests["first_token_s"], first_on)
    requests["finish_s"] = delivery.client_s(requests["finish_s"], requests["replica"])
    gaps = []
    for output in outputs:
        gap, start = output.extra_itl_s, output.extra_itl_from_s
        owner = np.full(gap.shape, output.replica)
        client_gap = delivery.client_s(start + gap, owner) - delivery.client_s(start, owner)
        gaps.append(client_gap[client_gap > 0])  # 0: both tokens left in one chunk
    return RawResult(
        records=requests,
        step_table=steps,
        series=_concat([output.series for output in outputs]),
        extra_itl_s=np.concatenate(gaps),
        later_runs=later_runs,
        num_replicas=len(outputs),
    )


def _concat(tables: list[Records]) -> Records:
    """Tables of the same columns, one after another (one: itself)."""
    if len(tables) == 1:
        return dict(tables[0])
    return {name: np.concatenate([table[name] for table in tables]) for name in tables[0]}
