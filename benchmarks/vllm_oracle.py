"""vLLM's own v1 scheduler as the oracle for servesim's reference scheduler.

    python benchmarks/vllm_oracle.py [--venv /work/venvs/vllm-0.11.0] [--trace NAME ...]

Two processes, so servesim and vLLM never share a venv:

1. our side (this process): ``sim.engine``'s ``EngineCore`` with the
   ``continuous`` policy (the reference scheduler, not ``sim.fast``) runs each
   trace, one step at a time (steps last 1 s of trace time), and logs every
   step's decisions as JSON lines, together with which requests its plan could
   see for the first time (``new_visible``);
2. vLLM's side (``benchmarks/vllm_oracle_driver.py``, run by the vLLM venv's
   python; it imports nothing from ``sim``): vLLM's v1 ``Scheduler`` (or
   ``AsyncScheduler``) on the CPU with fabricated model outputs, fed before its
   k-th non-empty step exactly the requests our k-th step saw first (the
   scheduler has no clock), logging the same decisions;
3. the comparison, step by step: scheduled requests with their token counts,
   admissions with their prefix-cache hits, preemptions in order, finishes.

The venv comes from ``benchmarks/vllm_oracle_venv.sh VERSION``; without it
this prints one line and exits 0. ``docs/vllm-fidelity.md`` has the table.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.engine.core_config import CoreConfig  # noqa: E402
from sim.engine.request import Request  # noqa: E402
from sim.engine.scheduler import ContinuousConfig  # noqa: E402
from sim.scenario.vllm_versions import NEWEST, version_problem, vllm_version  # noqa: E402

DRIVER = Path(__file__).resolve().parent / "vllm_oracle_driver.py"
DEFAULT_VENV = Path("/work/venvs/vllm-0.11.0")
# The decisions compared, in the order a difference is reported.
DECISION_KEYS = ("scheduled", "admitted", "preempted", "finished")


# -- traces -------------------------------------------------------------------


@dataclass(frozen=True)
class TraceSpec:
    """One trace: its engine settings and a seeded workload (times in steps)."""

    name: str
    num_requests: int
    prompt_tokens: tuple[int, int]  # uniform range, inclusive
    output_tokens: tuple[int, int]
    requests_per_step: float  # Poisson arrivals, per 1 s step
    num_kv_blocks: int
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    block_size_tokens: int = 16
    max_model_len_tokens: int = 16384
    enable_prefix_caching: bool = True
    async_scheduling: bool = False
    num_prefix_groups: int = 0  # 0: no shared prefixes
    shared_prefix_tokens: tuple[int, int] = (0, 0)
    seed: int = 0


TRACES: dict[str, TraceSpec] = {
    spec.name: spec
    for spec in (
        TraceSpec("chat", 300, (32, 1024), (16, 256), 0.6, num_kv_blocks=4096),
        TraceSpec(
            "long_prompts",
            80,
            (2048, 12000),
            (8, 96),
            0.08,
            num_kv_blocks=6000,
            max_num_batched_tokens=1024,
        ),
        TraceSpec(
            "prefix_heavy",
            300,
            (16, 256),
            (8, 128),
            0.8,
            num_kv_blocks=2048,
            num_prefix_groups=6,
            shared_prefix_tokens=(256, 2048),
        ),
        TraceSpec("kv_pressure", 200, (128, 1024), (64, 512), 1.0, num_kv_blocks=600),
        TraceSpec(
            "async", 300, (32, 1024), (16, 256), 0.8, num_kv_blocks=1200, async_scheduling=True
        ),
    )
}


def trace_requests(spec: TraceSpec) -> list[dict[str, Any]]:
    """The trace's requests: id, arrival (s = steps), prompt and output tokens, and
    the shared prompt head (prefix group and its length in tokens)."""
    rng = random.Random(spec.seed)
    shared = [rng.randint(*spec.shared_prefix_tokens) for _ in range(spec.num_prefix_groups)]
    arrival_s = 0.0
    requests = []
    for request_id in range(spec.num_requests):
        group = rng.randrange(spec.num_prefix_groups) if spec.num_prefix_groups else None
        head = 0 if group is None else shared[group]
        requests.append(
            {
                "request_id": request_id,
                "arrival_s": arrival_s,
                # The unique tail is at least one token, so no prompt is all shared.
                "num_prompt_tokens": head + rng.randint(*spec.prompt_tokens),
                "num_output_tokens": rng.randint(*spec.output_tokens),
                "prefix_group": group,
                "num_shared_prefix_tokens": head,
            }
        )
        arrival_s += rng.expovariate(spec.requests_per_step)
    return requests


# -- our side -------------------------------------------------------------------


def _ids(requests: Iterable[Request]) -> list[int]:
    return [r.request_id for r in requests]


def preempted_in_order(
    running_before: Sequence[int], running_after: Sequence[int], waiting_after: Sequence[int]
) -> list[int]:
    """Requests preempted by a plan, in preemption order: each was running and is
    waiting again, requeued at the front, so the front of the queue holds them
    newest victim first (as vLLM's ``prepend_request``)."""
    gone = set(running_before) - set(running_after)
    front = [rid for rid in waiting_after if rid in gone]
    return front[::-1]


def run_ours(
    spec: TraceSpec,
    requests: list[dict[str, Any]],
    reserve_full_isl: bool = False,
    free_unhashed_first: bool = False,
) -> list[dict[str, Any]]:
    """Run ``requests`` through servesim's reference scheduler; one record a step.

    The loop is the SimPy replica's (``sim.serving.replica.Replica.run``) with
    every step lasting 1 s: plan, run, commit; with async scheduling the next
    plan sees only requests ready by the start of the step just committed.
    ``reserve_full_isl``: vLLM >= 0.19's full-sequence admission check;
    ``free_unhashed_first``: vLLM >= 0.24's free-queue order.
    """
    policy = ContinuousConfig(
        max_num_seqs=spec.max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        scheduler_reserve_full_isl=reserve_full_isl,
    )
    config = CoreConfig(
        make_policy=lambda: policy.build(async_scheduling=spec.async_scheduling),
        num_kv_blocks=spec.num_kv_blocks,
        block_size_tokens=spec.block_size_tokens,
        max_model_len_tokens=spec.max_model_len_tokens,
        enable_prefix_caching=spec.enable_prefix_caching,
        free_unhashed_first=free_unhashed_first,
    )
    finished_ids: list[int] = []  # of the step being committed
    core = config.new_core(on_done=lambda r: finished_ids.append(r.request_id))
    pending = [
        Request(
            request_id=r["request_id"],
            arrival_s=r["arrival_s"],
            num_prompt_tokens=r["num_prompt_tokens"],
            num_output_tokens=r["num_output_tokens"],
            prefix_group=r["prefix_group"],
            num_shared_prefix_tokens=r["num_shared_prefix_tokens"],
        )
        for r in requests
    ]
    pending.reverse()  # pop() takes the earliest
    seen: set[int] = set()
    log: list[dict[str, Any]] = []
    now_s = 0.0
    visible_until_s: float | None = None
    while True:
        while pending and pending[-1].arrival_s <= now_s:
            request = pending.pop()
            if not core.add(request, request.arrival_s):
                raise ValueError(f"trace {spec.name}: request {request.request_id} rejected")
        limit_s = now_s if visible_until_s is None else visible_until_s
        visible = [
            r.request_id for r in core.waiting if r.ready_s is not None and r.ready_s <= limit_s
        ]
        running_before = _ids(core.running)
        waiting_before = set(_ids(core.waiting))
        plan = core.schedule(now_s, visible_until_s)
        deferred = core.async_scheduling and core.num_deferred_at_plan > 0
        visible_until_s = None
        if plan.is_empty:
            if deferred:
                continue  # vLLM plans again once the step's output is in
            if not pending:
                if core.waiting or core.running:
                    raise RuntimeError(f"trace {spec.name}: stuck at {now_s} s")
                return log
            now_s = max(now_s, pending[-1].arrival_s)
            continue
        new_visible = [rid for rid in visible if rid not in seen]
        seen.update(new_visible)
        running_after = _ids(core.running)
        record: dict[str, Any] = {
            "new_visible": new_visible,
            "scheduled": sorted([r.request_id, n] for r, n in plan.scheduled),
            # Admitted from the queue this step, with the prompt tokens the prefix
            # cache held (computed tokens before the step; 0 if none).
            "admitted": sorted(
                [r.request_id, r.num_computed_tokens]
                for r, _ in plan.scheduled
                if r.request_id in waiting_before
            ),
            "preempted": preempted_in_order(running_before, running_after, _ids(core.waiting)),
        }
        finished_ids.clear()
        core.update(plan, now_s + 1.0)
        record["finished"] = sorted(finished_ids)
        log.append(record)
        if core.async_scheduling:
            visible_until_s = now_s
        now_s += 1.0


def installed_version(python: Path) -> str:
    """The vLLM release installed beside ``python`` (read without importing vLLM)."""
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def modelled_as(release: str) -> str:
    """The ``engine.vllm_version`` servesim runs ``release`` as: its own, else the newest."""
    return release if version_problem(release) is None else NEWEST


# -- the comparison -------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Two decision logs side by side."""

    num_steps_compared: int
    num_steps_identical: int
    first_difference: str | None  # "step k: key ours=... vllm=..."; None if none


def _decisions(record: dict[str, Any]) -> dict[str, Any]:
    return {key: record.get(key, []) for key in DECISION_KEYS}


def compare(ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> Comparison:
    """Compare step by step; steps beyond the shorter log count as different."""
    num_compared = max(len(ours), len(theirs))
    identical = 0
    first: str | None = None
    for step in range(num_compared):
        a = _decisions(ours[step]) if step < len(ours) else None
        b = _decisions(theirs[step]) if step < len(theirs) else None
        if a == b:
            identical += 1
            continue
        if first is None:
            if a is None or b is None:
                side = "ours" if a is None else "vllm"
                first = f"step {step}: {side} had already ended"
            else:
                key = next(k for k in DECISION_KEYS if a[k] != b[k])
                first = f"step {step}: {key} ours={_short(a[key])} vllm={_short(b[key])}"
    return Comparison(num_compared, identical, first)


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table(rows: Sequence[tuple[str, Comparison]]) -> str:
    """The per-trace table, as Markdown."""
    lines = [
        "| trace | steps compared | steps identical | first difference |",
        "|---|---|---|---|",
    ]
    for name, c in rows:
        lines.append(
            f"| {name} | {c.num_steps_compared:,} | {c.num_steps_identical:,} "
            f"| {c.first_difference or 'none'} |"
        )
    return "\n".join(lines)


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    with path.open("w") as f:
        for record in records:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


# -- main -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="vLLM's venv")
    parser.add_argument("--trace", action="append", choices=sorted(TRACES), help="default: all")
    parser.add_argument("--keep", type=Path, help="keep the logs in this folder")
    args = parser.parse_args(argv)
    python = args.venv / "bin" / "python"
    if not python.exists():
        print(f"skipped: no vLLM venv at {args.venv} (benchmarks/vllm_oracle_venv.sh VERSION)")
        return 0
    names = args.trace or list(TRACES)
    release = installed_version(python)
    as_version = modelled_as(release)
    # The version-aware defaults the scheduler reads itself (async scheduling is
    # each trace's own setting here): those of the release vLLM runs.
    defaults = vllm_version(as_version)
    rows: list[tuple[str, Comparison]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        version = ""
        settings: list[str] = []
        for name in names:
            spec = TRACES[name]
            requests = trace_requests(spec)
            ours = run_ours(
                spec,
                requests,
                defaults.scheduler_reserve_full_isl,
                defaults.free_unhashed_first,
            )
            trace_path = folder / f"{name}.trace.json"
            trace_path.write_text(
                json.dumps(
                    {
                        "spec": spec.__dict__,
                        "requests": requests,
                        "new_visible": [r["new_visible"] for r in ours],
                    }
                )
            )
            write_jsonl(folder / f"{name}.ours.jsonl", ours)
            out_path = folder / f"{name}.vllm.jsonl"
            done = subprocess.run(
                [str(python), str(DRIVER), str(trace_path), str(out_path)],
                capture_output=True,
                text=True,
                env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"},
            )
            if done.returncode != 0:
                print(done.stderr[-4000:], file=sys.stderr)
                print(f"{name}: vLLM driver failed (exit {done.returncode})")
                return 1
            lines = done.stdout.strip().splitlines()
            version = lines[-1]
            settings.append(f"{name}: {next(x for x in lines if x.startswith('vllm '))}")
            rows.append((name, compare(ours, read_jsonl(out_path))))
    print(
        f"servesim reference scheduler (engine.vllm_version {as_version}:"
        f" scheduler_reserve_full_isl={defaults.scheduler_reserve_full_isl},"
        f" free_unhashed_first={defaults.free_unhashed_first}) vs {version}"
    )
    print(table(rows))
    print("\n".join(settings))  # vLLM's resolved settings, trace by trace
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
