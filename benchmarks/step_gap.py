"""Where a public run's prediction departs from the measurement, by load.

    python benchmarks/step_gap.py [--run NAME ...]

The public runs log no step times, only each request's arrival, first token
and last token. A request's TPOT is the mean step time over its decode (it is
in every step from its first token to its last), so requests binned by
arrival time show how the step price's error moves with the batch the run had
then: the batch grows while requests arrive (~10 req/s for 29 s) and drains
after. Per bin: the median measured and predicted TPOT, their ratio and their
gap in ms (a request's measured minus predicted TPOT; ratio: predicted /
measured). A gap constant across
bins (steps of any size off by the same time) points at a per-step cost the
model leaves out (a collective's latency, a launch, CPU work); a constant
ratio at a proportional one.

Then, for the runs whose engine stayed full for a stretch (every running
sequence decoding, no prompt tokens: ``timeseries.csv``, one row a second from
vLLM's stat logger), the mean step there measured (seconds over steps, the
steps a tick being its generated tokens over the sequences running) and
predicted (the replay's decode-only steps at that batch over the same stretch
of its run): a direct check of a step's price with no queue in between.

Then, for the one-replica runs, every tick with no prompt tokens priced at its own
batch: the sequences running at the tick's middle (from the requests' own first-
and last-token times; a request decodes one token a step from its first token to
its last, so its context then is its prompt plus the steps it has had, at its own
mean TPOT), their mean step measured (sequences x tick / tokens generated) against
the cost model's price of a decode step of exactly those contexts, by batch size.
A cost per step the model leaves out (a message to the workers, a collective's
latency: as many a step at one sequence as at 128) shows as the same gap in every
bin; one that grows with the batch (bytes, attention, a rank's compute) grows
with it.

Then the sensitivity of the TP 2 and EP 2 rows to the per-hop latency of the
link (what a ring all-reduce or all-gather pays per hop besides its bytes and
NCCL's base latency, ``sim.cost.collectives``): ``pcie5-rtxpro6000``'s 5.7 us,
NCCL's own figure for a Simple-protocol hop over PCI, against 20 us,
LLMServingSim's configuration of the servers these runs ran on
(``config.json``: ``link_latency`` 20000 ns). A study, not a fit: no
scenario takes the 20 us (docs/validation.md).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from public_runs import EXAMPLES, RUNS, latencies_s, predicted_latencies_s  # noqa: E402

from sim import api  # noqa: E402
from sim.api.build import cost_model_for  # noqa: E402
from sim.cost.base import CostModel, StepShape  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402
from sim.validation.llmservingsim import read_llmservingsim  # noqa: E402

BINS_S = (0.0, 3.0, 6.0, 9.0, 12.0, 16.0, 20.0, 25.0, 30.0)
# Batch sizes (sequences decoding) of the decode-only ticks' table: one sequence
# alone, then small to full batches (max_num_seqs 128 in the Qwen3-32B run).
BATCH_BINS = (0, 1, 16, 48, 96, 127, 1024)
# LLMServingSim's link latency for these servers, with the preset's measured NCCL rate.
SLOW_HOPS = "parallelism.link={name: hop-20us, bandwidth_bytes_per_s: 39.4e9, latency_s: 20e-6, efficiency: 1.0}"  # noqa: E501


def tpot_by_arrival(measured: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """Median measured and predicted TPOT (ms) of the requests in each arrival bin."""

    def tpot(frame: pd.DataFrame) -> pd.Series:
        tokens = frame["num_output_tokens"] - 1
        return (frame["finish_s"] - frame["first_token_s"]) / tokens.where(tokens > 0)

    m = measured.set_index("request_id")
    p = predicted.set_index("request_id")
    both = pd.DataFrame(
        {
            "arrival_s": m["arrival_s"] - m["arrival_s"].min(),
            "measured_ms": 1e3 * tpot(m),
            "predicted_ms": 1e3 * tpot(p).reindex(m.index),
        }
    ).dropna()
    both["gap_ms"] = both["measured_ms"] - both["predicted_ms"]
    both["bin"] = pd.cut(both["arrival_s"], BINS_S)
    table = both.groupby("bin", observed=True)[["measured_ms", "predicted_ms", "gap_ms"]].median()
    table["ratio"] = table["predicted_ms"] / table["measured_ms"]
    table["num_requests"] = both.groupby("bin", observed=True).size()
    return table


def full_decode_steps_ms(run_folder: Path, steps: pd.DataFrame) -> tuple[float, float] | None:
    """Mean step (ms) measured and predicted while every running sequence decodes
    and the batch is full: the longest run of stat-logger ticks with no prompt
    tokens at the largest running count; None if there is none of 5 s."""
    ticks = pd.read_csv(run_folder / "vllm" / "timeseries.csv")
    full = (ticks["prompt_throughput"] == 0) & (ticks["running"] == ticks["running"].max())
    runs = (full != full.shift()).cumsum()[full]
    if runs.empty:
        return None
    longest = ticks[full][runs == runs.value_counts().idxmax()]
    if len(longest) < 5:
        return None
    num_seqs = int(longest["running"].iloc[0])
    measured_ms = 1e3 * num_seqs * len(longest) / longest["gen_throughput"].sum()
    # The same stretch of the replay: its ticks count from its first step.
    start = steps["start_s"].min()
    t = steps["start_s"] - start
    window = (t >= longest["t"].min() - 1.0) & (t < longest["t"].max())
    decode = (steps["num_prefill_tokens"] == 0) & (steps["num_decode_seqs"] == num_seqs)
    chosen = steps[window & decode]
    if chosen.empty:
        return None
    return measured_ms, 1e3 * float((chosen["end_s"] - chosen["start_s"]).mean())


def decode_ticks(run_folder: Path, requests: pd.DataFrame, cost: CostModel) -> pd.DataFrame:
    """Each stat-logger tick with no prompt tokens: the sequences running at its
    middle and their mean step as ``cost`` prices a decode step of their contexts,
    against the tick's mean step measured (ms): its sequences running, averaged over
    the tick (so that a tick in which requests finish, or the engine idles, counts
    its steps right), times its length over the tokens it generated. A tick's ``t``
    is its end, in seconds from the first request's queue time (``requests``' clock:
    ``read_llmservingsim``)."""
    ticks = pd.read_csv(run_folder / "vllm" / "timeseries.csv")
    tick_s = ticks["t"].diff().fillna(ticks["t"].iloc[0])
    decoding = (ticks["prompt_throughput"] == 0) & (ticks["gen_throughput"] > 0)
    tokens = requests["num_output_tokens"] - 1
    tpot_s = (requests["finish_s"] - requests["first_token_s"]) / tokens.where(tokens > 0)
    first_s, finish_s = requests["first_token_s"][tpot_s.notna()], requests["finish_s"]
    rows = []
    for i in ticks.index[decoding]:
        end_s = float(ticks.at[i, "t"])
        start_s, middle_s = end_s - tick_s[i], end_s - tick_s[i] / 2
        running = (first_s <= middle_s) & (finish_s[first_s.index] > middle_s)
        running = running[running].index
        if running.empty:
            continue
        busy_s = (np.minimum(finish_s[first_s.index], end_s) - np.maximum(first_s, start_s)).clip(0)
        steps_so_far = (middle_s - first_s[running]) / tpot_s[running]
        contexts = requests["num_prompt_tokens"][running] + 1 + steps_so_far.astype(int)
        shape = StepShape.build(None, [int(c) for c in contexts])
        rows.append(
            {
                "num_seqs": len(running),
                "measured_ms": 1e3 * float(busy_s.sum()) / ticks.at[i, "gen_throughput"],
                "predicted_ms": 1e3 * cost.step_s(shape),
            }
        )
    return pd.DataFrame(rows, columns=["num_seqs", "measured_ms", "predicted_ms"])


def gap_by_batch(ticks: pd.DataFrame) -> pd.DataFrame:
    """``decode_ticks``' mean measured and predicted step (ms), their gap and ratio,
    and the ticks, per ``BATCH_BINS`` bin of sequences running."""
    binned = ticks.assign(batch=pd.cut(ticks["num_seqs"], BATCH_BINS))
    grouped = binned.groupby("batch", observed=True)
    table = grouped[["num_seqs", "measured_ms", "predicted_ms"]].mean()
    table["gap_ms"] = table["measured_ms"] - table["predicted_ms"]
    table["ratio"] = table["predicted_ms"] / table["measured_ms"]
    table["num_ticks"] = grouped.size()
    return table


def p50_errors(name: str, overrides: list[str]) -> str:
    """TTFT and TPOT p50 errors of a run replayed with ``overrides``."""
    run = next(r for r in RUNS if r.name == name)
    measured = latencies_s(read_llmservingsim(EXAMPLES / run.folder).requests)
    predicted = predicted_latencies_s(api.run(ROOT / run.scenario, overrides))
    errors = [
        100.0 * (np.median(predicted[k]) / np.median(measured[k]) - 1.0) for k in ("ttft", "tpot")
    ]
    return f"TTFT {errors[0]:+.1f} %, TPOT {errors[1]:+.1f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", help="only these runs (repeatable)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # proportional extrapolation warnings
    for run in RUNS:
        if args.run and run.name not in args.run:
            continue
        measured = read_llmservingsim(EXAMPLES / run.folder).requests
        result = api.run(ROOT / run.scenario)
        predicted = result.requests
        table = tpot_by_arrival(measured, predicted)
        print(f"\n{run.name} ({run.scenario}): TPOT by arrival time")
        print("| arrived (s) | requests | measured ms | predicted ms | ratio | gap ms |")
        print("|---|---|---|---|---|---|")
        for interval, row in table.iterrows():
            print(
                f"| {interval} | {row['num_requests']:.0f} | {row['measured_ms']:.1f} "
                f"| {row['predicted_ms']:.1f} | {row['ratio']:.3f} | {row['gap_ms']:+.2f} |"
            )
        full = full_decode_steps_ms(EXAMPLES / run.folder, result.steps)
        if full is not None and result.raw.num_replicas == 1:
            measured_ms, predicted_ms = full
            print(
                f"full batch, decodes only: measured {measured_ms:.1f} ms a step, predicted "
                f"{predicted_ms:.1f} ms ({100 * (predicted_ms / measured_ms - 1):+.1f} %)"
            )
        if result.raw.num_replicas == 1:
            scenario = load_scenario(ROOT / run.scenario)
            cost = cost_model_for(scenario)
            by_batch = gap_by_batch(decode_ticks(EXAMPLES / run.folder, measured, cost))
            print("decode-only ticks, priced at their own running sequences, by batch:")
            print("| sequences | ticks | mean | measured ms | predicted ms | ratio | gap ms |")
            print("|---|---|---|---|---|---|---|")
            for interval, row in by_batch.iterrows():
                print(
                    f"| {interval} | {row['num_ticks']:.0f} | {row['num_seqs']:.1f} "
                    f"| {row['measured_ms']:.1f} | {row['predicted_ms']:.1f} "
                    f"| {row['ratio']:.3f} | {row['gap_ms']:+.2f} |"
                )
    print("\nPer-hop link latency, p50 errors (the scenarios' 5.7 us, NCCL's, against 20 us):")
    for name in ("rtxpro6000-qwen3-32b-tp2-profile",):
        if args.run and name not in args.run:
            continue
        print(f"  {name}: 5.7 us {p50_errors(name, [])}; 20 us {p50_errors(name, [SLOW_HOPS])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
