"""A run's outputs in a folder, its summary table, and a warning when most were rejected.

``write_outputs``: ``requests.parquet``, ``summary.json``, ``timeseries.csv``, the
figures and, only on request, ``steps.parquet`` (tens of millions of rows). The
figures can be drawn apart from the tables (``FigureJob``, ``prepare_figures``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt

from sim.engine.records import RequestTable
from sim.errors import ConfigError
from sim.metrics import plots
from sim.metrics.figure_data import Figures, figure_caption
from sim.metrics.stats import TEXT_COLUMNS, TTFT_PARTS, Slo
from sim.metrics.table_files import write_csv, write_parquet

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

    from sim.metrics.lifecycle import SpanRow

    # A frame, or columns by name (written without pandas: ``sim.metrics.table_files``).
    Table: TypeAlias = pd.DataFrame | Mapping[str, npt.NDArray[Any]]

TableFormat = Literal["parquet", "csv"]
TABLE_FORMATS: tuple[TableFormat, ...] = ("parquet", "csv")

_WIDTH = 50  # vllm's result block is 50 characters wide, labels padded to 40
_SECTIONS = (
    ("ttft", "TTFT", "Time to First Token"),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl", "ITL", "Inter-token Latency"),
    ("e2el", "E2EL", "End-to-end Latency"),
)
PERCENTILE_KEY = re.compile(r"^p\d+(?:\.\d+)?_(ttft|tpot|itl|e2el)_ms$")
"""A per-request percentile's summary key (``percentile_key``'s spelling), its metric
the group."""


def caveat_metric(caveat: str) -> str | None:
    """The metric whose percentile ``caveat`` is about (it starts with the key:
    ``percentile_caveats``), None for a caveat about no one metric (the cost model's)."""
    match = PERCENTILE_KEY.match(caveat.split(" ")[0])
    return None if match is None else match.group(1)


def have_parquet_engine() -> bool:
    """Whether pandas can write parquet here (pyarrow installed)."""
    return importlib.util.find_spec("pyarrow") is not None


def _write_table(table: Table, base: Path, formats: Sequence[TableFormat]) -> list[Path]:
    """Write ``table`` to ``base`` + ``.parquet`` / ``.csv``; parquet falls back to CSV."""
    suffixes: list[str] = []
    for fmt in formats:
        if fmt == "parquet" and not have_parquet_engine():
            warnings.warn(
                f"pyarrow missing: writing {base.name}.csv instead of parquet", stacklevel=3
            )
            fmt = "csv"
        if fmt not in suffixes:
            suffixes.append(fmt)
    return [_write_file(table, base.with_suffix(f".{fmt}")) for fmt in suffixes]


def _write_file(table: Table, path: Path) -> Path:
    """``table`` as ``path``'s suffix says: a frame through pandas, columns through
    ``sim.metrics.table_files`` (the same files without importing pandas; ``TEXT_COLUMNS``
    as text, as a frame holds them)."""
    parquet = path.suffix == ".parquet"
    if isinstance(table, Mapping):
        if parquet:
            write_parquet(table, path, text=TEXT_COLUMNS)
        else:
            write_csv(table, path)
    elif parquet:
        table.to_parquet(path, index=False)
    else:
        table.to_csv(path, index=False)
    return path


def jsonable(value: object) -> object:
    """Plain JSON types: numpy scalars to Python, NaN/inf to None (JSON null)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


VLLM_INF_KEYS = ("request_rate", "burstiness")
"""Keys ``vllm bench serve``'s result JSON spells ``"inf"`` when infinite (all at once,
constant gaps), where other infinities are null."""


def vllm_spelling(summary: Mapping[str, object]) -> dict[str, object]:
    """``summary`` with an infinite value of ``VLLM_INF_KEYS`` as ``"inf"``."""
    return {
        key: "inf"
        if key in VLLM_INF_KEYS and isinstance(value, float) and math.isinf(value)
        else value
        for key, value in summary.items()
    }


def summary_to_json(summary: Mapping[str, object]) -> str:
    """``summary`` as strict JSON (indent 2): NaN and infinities become null, but
    an infinite rate or burstiness ``"inf"`` (``vllm_spelling``)."""
    return json.dumps(jsonable(vllm_spelling(summary)), indent=2, allow_nan=False)


@dataclass(frozen=True)
class FigureJob:
    """What a run's figures are drawn from (frames, or columns and span rows: no pandas),
    and the folder they go to; ``waterfall``: (phase spans, request records), or none.
    """

    out_dir: Path
    requests: RequestTable
    timeseries: pd.DataFrame | Mapping[str, npt.NDArray[Any]]
    slo: Slo | None = None
    waterfall: tuple[pd.DataFrame | Sequence[SpanRow], RequestTable] | None = None
    caption: str = ""  # ``figure_data.figure_caption``: what ran, under each figure's title


def draw_figures(job: FigureJob) -> list[Path]:
    """Draw ``job``'s figures into its folder (which must exist); return their paths."""
    # matplotlib (~0.3 s to import) only now: a caller that prints the summary
    # first shows it before paying for the figures.
    from sim.metrics.figure_draw import draw_prepared

    return draw_prepared(prepare_figures(job))


def prepare_figures(job: FigureJob) -> Figures:
    """``job``'s figures as arrays (``sim.metrics.plots``): what
    ``sim.metrics.figure_draw.draw_prepared`` draws, without pandas, elsewhere."""
    waterfall = plots.waterfall_data(*job.waterfall) if job.waterfall is not None else None
    return Figures(
        job.out_dir,
        plots.cdf_data(job.requests, job.slo),
        plots.timeseries_data(job.timeseries),
        waterfall,
        job.caption,
    )


def write_outputs(
    out_dir: str | Path,
    requests: Table,
    steps: Table,
    timeseries: Table,
    summary: Mapping[str, object],
    formats: Collection[str] = ("parquet",),
    *,
    write_steps: bool = False,
    slo: Slo | None = None,
    plots: bool = True,
) -> list[Path]:
    """Write a run's outputs into ``out_dir`` (created if needed); return the paths.

    ``formats``: ``"parquet"`` (CSV when pyarrow is missing), ``"csv"``, or both. The
    figures (no waterfall) are drawn from frames (a measured run's): columns need
    ``plots=False`` (their figures come from ``Result.figure_job``).
    """
    unknown = sorted(set(formats) - set(TABLE_FORMATS))
    if unknown or not formats:
        raise ConfigError(f"formats: expected some of {list(TABLE_FORMATS)}, got {sorted(formats)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = [fmt for fmt in TABLE_FORMATS if fmt in formats]
    written = _write_table(requests, out / "requests", chosen)
    if write_steps:
        written += _write_table(steps, out / "steps", chosen)
    summary_path = out / "summary.json"
    summary_path.write_text(summary_to_json(summary) + "\n", encoding="utf-8")
    written += [summary_path, _write_file(timeseries, out / "timeseries.csv")]
    if plots:
        if isinstance(requests, Mapping) or isinstance(timeseries, Mapping):
            raise TypeError("write_outputs: figures are drawn from frames (plots=False)")
        table = RequestTable.from_frame(requests)  # a measured run's frame
        job = FigureJob(out, table, timeseries, slo, caption=figure_caption(summary))
        written += draw_figures(job)
    return written


def _banner(text: str, fill: str) -> str:
    """``text`` centred in ``fill``; format's ``^`` puts an odd pad on the right, as vllm."""
    return "{s:{c}^{n}}".format(s=text, c=fill, n=_WIDTH)


def _text(value: object, decimals: int = 2) -> str:
    """A value as the result block prints it (``n/a`` when undefined)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float | np.floating):
        return f"{value:.{decimals}f}"
    return str(value)


def _line(label: str, value: object, decimals: int = 2) -> str:
    return f"{label:<40} {_text(value, decimals)}"


def _percentile_keys(summary: Mapping[str, object], metric: str) -> list[tuple[str, str]]:
    """(label, key) of every ``p<P>_<metric>_ms`` key, in increasing P."""
    pattern = re.compile(rf"^p(\d+(?:\.\d+)?)_{metric}_ms$")
    found = [(float(m.group(1)), m.group(1), key) for key in summary if (m := pattern.match(key))]
    return [(label, key) for _, label, key in sorted(found)]


# Head rows shown only with a value, as vllm: goodput without an SLO, the
# concurrency limit without one, the rate when every request came at once.
_SHOWN_WHEN_SET = ("request_goodput", "max_concurrency", "request_rate")


def _is_set(value: object) -> bool:
    """A value a head row of ``_SHOWN_WHEN_SET`` shows: a finite number."""
    return isinstance(value, int | float) and math.isfinite(value)


def format_summary_table(
    summary: Mapping[str, object], metrics: Collection[str] | None = None
) -> str:
    """The result block of ``vllm bench serve`` for ``summary`` (from ``summarize``): one
    section per latency metric present, or of ``metrics`` (``--percentile-metrics``);
    undefined values as ``n/a``; ``engine_settings`` heading it and TTFT's parts after
    the TTFT section, where the summary has them."""
    lines = []
    settings = summary.get("engine_settings")
    if isinstance(settings, Mapping):
        lines.append("engine: " + " ".join(f"{key}={value}" for key, value in settings.items()))
    lines.append(_banner(" Serving Benchmark Result ", "="))
    head = [
        ("Successful requests:", "completed"),
        ("Failed requests:", "failed"),
        ("Rejected requests:", "num_rejected"),
        ("Maximum request concurrency:", "max_concurrency"),
        ("Request rate configured (RPS):", "request_rate"),
        ("Benchmark duration (s):", "duration"),
        ("Total input tokens:", "total_input_tokens"),
        ("Total generated tokens:", "total_output_tokens"),
        ("Request throughput (req/s):", "request_throughput"),
        ("Request goodput (req/s):", "request_goodput"),
        ("Output token throughput (tok/s):", "output_throughput"),
        ("Total Token throughput (tok/s):", "total_token_throughput"),
    ]
    for label, key in head:
        if key not in summary or (key in _SHOWN_WHEN_SET and not _is_set(summary[key])):
            continue
        lines.append(_line(label, summary[key]))
    for metric, name, header in _SECTIONS:
        if metrics is not None and metric not in metrics:
            continue
        rows = [
            (f"Mean {name} (ms):", f"mean_{metric}_ms"),
            (f"Median {name} (ms):", f"median_{metric}_ms"),
        ]
        rows += [
            (f"P{label} {name} (ms):", key) for label, key in _percentile_keys(summary, metric)
        ]
        rows = [(label, key) for label, key in rows if key in summary]
        if not rows:
            continue
        lines.append(_banner(header, "-"))
        lines += [_line(label, summary[key]) for label, key in rows]
        if metric == "ttft":
            lines += _ttft_parts_lines(summary)
    caveats = summary.get("caveats")
    if isinstance(caveats, list) and metrics is not None:
        # A caveat about a metric the block leaves out is noise; about none, it stays.
        caveats = [c for c in caveats if caveat_metric(c) in (None, *metrics)]
    if isinstance(caveats, list) and caveats:
        lines.append(_banner("Caveats", "-"))
        lines += [f"CAVEAT: {text}" for text in caveats]
    lines.append("=" * _WIDTH)
    return "\n".join(lines)


def _ttft_parts_lines(summary: Mapping[str, object]) -> list[str]:
    """TTFT by part (``sim.metrics.stats.TTFT_PARTS``: mean / median ms), and which
    of the frontend's values are estimates; none for a summary without them."""
    lines = []
    for column, name in TTFT_PARTS:
        part = column.removesuffix("_s")
        if f"mean_ttft_{part}_ms" in summary:
            mean, median = summary[f"mean_ttft_{part}_ms"], summary.get(f"median_ttft_{part}_ms")
            text = f"{_text(mean)} / {_text(median)}"
            lines.append(_line(f"{name.capitalize()} (ms, mean / median):", text))
    if not lines:
        return []
    frontend = summary.get("frontend")
    estimated = frontend.get("estimated") if isinstance(frontend, Mapping) else None
    if estimated:
        lines.append(_line("Frontend estimates:", ", ".join(map(str, estimated))))
    return [_banner("TTFT by Part", "-"), *lines]


MOST_REJECTED_SHARE = 0.5  # warn when at least this share of the requests was rejected


def _rejections(requests: RequestTable) -> tuple[int, str] | None:
    """How many requests were rejected at intake and the first one's reason; None
    when none was (or the table records no rejections)."""
    rejected = requests.rejected
    num_rejected = int(rejected.sum())
    if num_rejected == 0:
        return None
    return num_rejected, str(np.asarray(requests["rejection_reason"])[rejected][0])


def all_rejected_error(requests: RequestTable) -> str | None:
    """The error of a run whose every request was rejected (its summary measures
    nothing), naming the count and the first reason; None otherwise."""
    found = _rejections(requests)
    if found is None or found[0] < len(requests):
        return None
    return (
        f"every request ({len(requests)}) was rejected as never servable, so the run measures "
        f"nothing; the first: {found[1]} (--allow-all-rejected writes it anyway)"
    )


def rejection_warning(requests: RequestTable) -> str | None:
    """A one-line warning with the count and the first reason, when most were rejected
    (as never servable: such a run still "succeeds", with nothing else on stderr)."""
    found = _rejections(requests)
    if found is None or found[0] < MOST_REJECTED_SHARE * len(requests):
        return None
    num_rejected, first = found
    return (
        f"{num_rejected} of {len(requests)} requests ({num_rejected / len(requests):.0%}) were "
        f"rejected as never servable; the first: {first}"
    )
