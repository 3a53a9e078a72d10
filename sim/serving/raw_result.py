"""A run's raw result: every replica's outputs merged, as the client sees them.

``Simulation`` hands ``raw_result`` one ``CoreOutput`` per replica, in replica
order, whether it simulated them itself or worker processes did.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from sim.engine.step_runs import StepTable
from sim.serving.core_output import CoreOutput
from sim.serving.engine_config import Frontend
from sim.serving.frontend import Delivery, deliver

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd


@dataclass
class RawResult:
    """What a run produced, before metrics: see ``sim.results``.

    ``requests``' ``first_token_s`` and ``finish_s`` are client times (after
    the frontend); ``engine_first_token_s`` and ``engine_finish_s`` the ends of
    the engine steps that produced those tokens. ``step_table`` is the step log
    with each step's ``delivered_s``, compact; ``steps`` expands it to one row per
    step on first use. ``extra_itl_s`` holds the client-side gaps the step
    log's weights do not cover (tokens after a break in a request's run).
    """

    requests: pd.DataFrame
    step_table: StepTable
    timeseries: pd.DataFrame
    extra_itl_s: npt.NDArray[np.float64]
    later_runs: dict[int, list[tuple[float, int]]]
    rejections: dict[int, str]
    frontend: Frontend
    num_replicas: int = 1

    @functools.cached_property
    def steps(self) -> pd.DataFrame:
        """The step log, one row per step (``StepTable.frame``: tens of millions of
        rows for a long run, so built only when asked)."""
        return self.step_table.frame()


def raw_result(
    outputs: Sequence[CoreOutput],
    frontend: Frontend,
    disaggregated: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
) -> RawResult:
    """Every replica's records, step log and series, concatenated (with ``replica``),
    and token times through the frontend: the run as the client sees it.

    ``disaggregated``: a disaggregated layout's ``requests_frame``, which joins
    each request's prefill and decode records into one row.
    """
    records = _concat([output.records for output in outputs])
    if disaggregated is not None:
        records = disaggregated(records)
    requests = records.sort_values("request_id", ignore_index=True)
    rejections: dict[int, str] = {}
    later_runs: dict[int, list[tuple[float, int]]] = {}
    for output in outputs:
        rejections.update(output.rejections)
        later_runs.update(output.later_runs)
    requests["rejection_reason"] = requests["request_id"].map(rejections)
    steps = StepTable(tuple(output.runs for output in outputs))
    steps = deliver(steps, frontend.output_step_s, frontend.detokenize_s_per_token)
    delivery = Delivery(steps)
    first_on = requests["replica"].to_numpy()
    if "prefill_replica" in requests.columns:  # disaggregated: first token from there
        prefill = requests["prefill_replica"].to_numpy(dtype=np.float64)
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
        requests=requests,
        step_table=steps,
        timeseries=_concat([output.series for output in outputs]),
        extra_itl_s=np.concatenate(gaps),
        later_runs=later_runs,
        rejections=rejections,
        frontend=frontend,
        num_replicas=len(outputs),
    )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Frames one after another (one: itself)."""
    import pandas as pd

    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
