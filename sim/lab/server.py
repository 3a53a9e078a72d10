"""The lab's page server: the page, plotly's script, and the runs behind each move.

Runs go to one worker thread, one at a time, and the run asked for last wins (one
page at a time: two would supersede each other's runs): a run that has not started
when a newer one arrives is answered ``superseded`` without running, and the knee's
runs stop between two rates. So a slider dragged across ten values costs the run
under way and the last one, not ten.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web

from sim.api import Result
from sim.cli import error_line
from sim.errors import ConfigError
from sim.lab.controls import controls_for, doc_for, scenario_for, scenario_yaml, values_of
from sim.lab.figures import cdf_figure, knee_figure, timeseries_figure, waterfall_figure
from sim.lab.lessons import LESSON_BY_NAME, LESSONS
from sim.lab.runs import Knee, KneeCache, knee, regime, run_doc
from sim.metrics.report import all_rejected_error, jsonable, prepare_figures
from sim.openai import listen

PAGE = Path(__file__).parent / "page"
_PAGE_FILES = {
    "/": ("index.html", "text/html"),
    "/lab.js": ("lab.js", "text/javascript"),
    "/lab.css": ("lab.css", "text/css"),
}
# The summary keys the page shows under the plots.
SHOWN_KEYS = (
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "p99_itl_ms",
    "request_throughput",
    "request_goodput",
    "num_preemptions",
    "prefix_cache_hit_rate",
    "num_kv_blocks",
    "completed",
    "num_rejected",
    "cost_model",
)


def plotly_script() -> Path:
    """``plotly.min.js`` as the installed ``plotly`` package ships it."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise ConfigError("servesim lab needs plotly: pip install -e '.[lab]'")
    path = Path(spec.origin).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise ConfigError(f"servesim lab: the plotly package has no {path.name} at {path}")
    return path


class Lab:
    """The page's state on the server: its starting document, the newest request id,
    the worker thread, the knee's cache and the newest run (for its caption)."""

    def __init__(self, base_doc: dict[str, Any], base_dir: Path) -> None:
        self.base_doc, self.base_dir = base_doc, base_dir
        self.latest = 0
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servesim-lab")
        self.cache = KneeCache()
        self.results: dict[int, Result] = {}

    def superseded(self, request_id: int) -> bool:
        return request_id != self.latest

    async def work(self, request_id: int, job: Any, *args: Any) -> dict[str, Any]:
        """``job(*args)`` on the worker thread, unless ``request_id`` is superseded by the
        time its turn comes; a ``ConfigError`` is the CLI's one line."""

        def run() -> dict[str, Any]:
            if self.superseded(request_id):
                return {"id": request_id, "superseded": True}
            try:
                return {"id": request_id, **job(request_id, *args)}
            except ConfigError as error:
                return {"id": request_id, "error": error_line(error)}

        return await asyncio.get_running_loop().run_in_executor(self.pool, run)

    def run(self, request_id: int, doc: dict[str, Any]) -> dict[str, Any]:
        """The page's run: its figures, summary and scenario file."""
        result = run_doc(doc, self.base_dir)
        nothing = all_rejected_error(result.raw.records)
        if nothing is not None:
            raise ConfigError(nothing)  # as servesim run refuses it
        self.results = {request_id: result}
        figures = prepare_figures(result.figure_job(self.base_dir))
        summary = {key: jsonable(result.summary.get(key)) for key in SHOWN_KEYS}
        return {
            "summary": summary,
            "figures": {
                "ttft_cdf": cdf_figure(figures.cdf, "ttft"),
                "tpot_cdf": cdf_figure(figures.cdf, "tpot"),
                "timeseries": timeseries_figure(figures.timeseries),
                "waterfall": waterfall_figure(figures.waterfall),
            },
            "figure_caption": figures.caption,
            "yaml": scenario_yaml(doc),
        }

    def knee(self, request_id: int, doc: dict[str, Any]) -> dict[str, Any]:
        """The knee around the newest run and the caption that needs it."""
        result = self.results.get(request_id)
        if result is None:  # its run failed or was superseded
            return {"superseded": True}
        found: Knee | None = knee(
            doc, self.cache, self.base_dir, lambda: self.superseded(request_id)
        )
        if found is None:
            return {"superseded": True}
        summary, scenario = result.summary, result.scenario
        figure = knee_figure(
            found,
            float(scenario.workload.arrival.rate_per_s),  # type: ignore[union-attr]
            float(summary.get("median_ttft_ms") or math.nan),
            float(summary.get("p99_ttft_ms") or math.nan),
            scenario.slo.ttft_ms if scenario.slo is not None else None,
        )
        return {"knee": figure, "caption": regime(result, found).caption()}

    def lesson(self, request_id: int, name: str, doc: dict[str, Any]) -> dict[str, Any]:
        lesson = LESSON_BY_NAME[name]
        holds, detail = lesson.check(doc, self.cache, self.base_dir)
        return {"name": name, "claim": lesson.claim, "holds": holds, "detail": detail}


LAB = web.AppKey("lab", Lab)


async def _page(request: web.Request) -> web.StreamResponse:
    name, content_type = _PAGE_FILES[request.path]
    return web.FileResponse(PAGE / name, headers={"Content-Type": content_type})


async def _plotly(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(plotly_script(), headers={"Content-Type": "text/javascript"})


async def _notebook(request: web.Request) -> web.StreamResponse:
    """A lesson's notebook from the checkout the lab runs from, when it has one."""
    name = request.match_info["name"]
    known = {Path(lesson.notebook).name for lesson in LESSONS}
    path = Path(__file__).resolve().parents[2] / "notebooks" / name
    if name not in known or not path.is_file():
        raise web.HTTPNotFound(text=f"{name}: not in this installation (see the repository)")
    return web.FileResponse(path)


async def _setup(request: web.Request) -> web.Response:
    lab = request.app[LAB]
    controls, shown = controls_for(lab.base_doc), values_of(lab.base_doc)
    # A control the starting scenario fixes keeps its value (lessons are chat's values),
    # and a lesson about that control (its own values set it) is not for this scenario.
    fixed = {control.key: control.fixed for control in controls if control.fixed}
    lessons = []
    for lesson in LESSONS:
        spec = lesson.spec()
        spec["values"] |= {key: shown[key] for key in fixed}
        taken = [f"{key}: {why}" for key, why in fixed.items() if key in lesson.values]
        # Or the CLI's line where the starting scenario cannot take the lesson's values:
        # the page disables its button, saying why.
        try:
            scenario_for(doc_for(spec["values"], lab.base_doc), lab.base_dir)
            spec["refused"] = taken[0] if taken else ""
        except ConfigError as error:
            spec["refused"] = taken[0] if taken else error_line(error)
        lessons.append(spec)
    return web.json_response(
        {"controls": [c.spec() for c in controls], "values": shown, "lessons": lessons}
    )


async def _doc(request: web.Request) -> tuple[Lab, int, dict[str, Any], dict[str, Any]]:
    """The request's id, its body and the document its values make (or a 400)."""
    lab = request.app[LAB]
    body = await request.json()
    if not isinstance(body, dict) or not isinstance(body.get("id"), int):
        raise web.HTTPBadRequest(text="expected {id: int, values: {...}}")
    try:
        doc = doc_for(dict(body.get("values") or {}), lab.base_doc)
    except ValueError as error:
        raise web.HTTPBadRequest(text=str(error)) from None
    return lab, body["id"], body, doc


async def _run(request: web.Request) -> web.Response:
    lab, request_id, _, doc = await _doc(request)
    # The last run asked for wins (not the highest id: a reloaded page counts from 1).
    lab.latest = request_id
    try:  # the CLI's one line, at once, even while a run is under way
        scenario_for(doc, lab.base_dir)
    except ConfigError as error:
        return web.json_response({"id": request_id, "error": error_line(error)})
    return web.json_response(await lab.work(request_id, lab.run, doc))


async def _knee(request: web.Request) -> web.Response:
    lab, request_id, _, doc = await _doc(request)
    return web.json_response(await lab.work(request_id, lab.knee, doc))


async def _lesson(request: web.Request) -> web.Response:
    lab, request_id, body, doc = await _doc(request)
    name = body.get("name")
    if name not in LESSON_BY_NAME:
        raise web.HTTPBadRequest(text=f"no lesson {name!r}")
    return web.json_response(await lab.work(request_id, lab.lesson, name, doc))


def make_app(
    base_doc: dict[str, Any] | None = None, base_dir: Path | None = None
) -> web.Application:
    """The lab's application, starting from ``base_doc`` (default: the chat scenario)."""
    plotly_script()  # refused at start, not on the page's first load
    app = web.Application()
    app[LAB] = Lab(doc_for({}, base_doc), base_dir or Path.cwd())
    for path in _PAGE_FILES:
        app.router.add_get(path, _page)
    app.router.add_get("/plotly.min.js", _plotly)
    app.router.add_get("/notebooks/{name}", _notebook)
    app.router.add_get("/api/setup", _setup)
    app.router.add_post("/api/run", _run)
    app.router.add_post("/api/knee", _knee)
    app.router.add_post("/api/lesson", _lesson)

    async def stop(app: web.Application) -> None:
        app[LAB].pool.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(stop)
    return app


async def serve(app: web.Application, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port`` (0: any free port), printing its URL, until cancelled;
    a port that cannot be had is one line (``listen``)."""
    runner = await listen(app, host, port)
    bound = runner.addresses[0][1] if runner.addresses else port
    print(f"servesim lab: http://{host}:{bound}/ (Ctrl-C stops)", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
