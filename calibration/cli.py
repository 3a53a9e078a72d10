"""``servesim calibrate``: time a model on this machine and write a cost artifact.

With ``--from-run RUN [RUN ...]`` it times nothing: it fits a base cost
model's overhead and prefill / decode multipliers to measured runs
(black-box calibration, ``sim.cli.fit``, torch-free). ``main`` runs it
standalone (``python -m calibration.cli``). Bad input raises ``ConfigError``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from calibration.fit import fit_samples, split_held_out
from calibration.kernel_tables import KERNEL_GRIDS, measure_tables
from sim.cli import options_given
from sim.cli.fit import add_arguments as add_from_run_arguments
from sim.cli.fit import calibrate_from_runs, refuse_from_run_options
from sim.cost.calibrated import (
    SCHEMA_VERSION,
    CalibrationArtifact,
    ModelInfo,
    save_artifact,
)
from sim.cost.kernels.artifact import save_artifact as save_kernel_artifact
from sim.cost.provenance import git_revision, utc_now
from sim.errors import ConfigError
from sim.hardware.specs import HF_CONFIGS, MODEL_PRESETS, ModelSpec, load_architecture, model_preset
from sim.metrics.out_path import check_out_file, out_argument

DtypeName = Literal["fp32", "bf16", "fp16"]
DTYPES: tuple[DtypeName, ...] = ("fp32", "bf16", "fp16")
GRIDS = ("small", "default", "compact", "ci", "gpu")
GRID_HELP = (
    "step shapes to time (default: default). small: 50 shapes x 5 repeats, the tiny "
    "model on CPU (CI); default: 134 shapes x 7 to 2048 tokens and batch 64, the tiny "
    "model on CPU; compact: 90 smaller shapes x 3 (batch <= 32, context <= 640) for a "
    "~100M-parameter model on CPU, e.g. smollm2-135m; ci: 56 shapes x 3 (batch <= 12, "
    "context <= 384, chunks <= 128), only what the CPU validation test's smollm2-135m run "
    "reaches (~1 min); gpu: 127 shapes x 10 to 8192 "
    "tokens and batch 256, for a GPU. With --kernels: small (CPU) or gpu (default on cuda)"
)


def torch_missing(command: str) -> ConfigError:
    """``servesim <command>`` cannot run without torch: how to install it (README, Set-up)."""
    return ConfigError(
        f"servesim {command} needs PyTorch, an optional extra: pip install -e '.[calibrate]' "
        "(for the CPU-only build see the README's set-up); the simulator itself does not"
    )


def add_torch_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device``, ``--dtype`` and ``--threads``, as every torch-side command takes them."""
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=DTYPES, help="default: fp32 on cpu, bf16 on cuda")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: timings with 2+ threads are noisy)",
    )


def refuse_torch_options(args: argparse.Namespace, why: str) -> None:
    """ConfigError naming the first of ``--device``, ``--dtype`` and ``--threads`` given
    where no model runs in this process (``why`` says what runs instead): taken
    silently, ``--device cuda`` would look as if the GPU had been used."""
    for flag, value in options_given(args, add_torch_arguments).items():
        raise ConfigError(f"{flag} {value}: no model runs in this process ({why}); omit it")


def checked_dtype(args: argparse.Namespace) -> DtypeName:
    """``--device`` and ``--threads`` checked (imports torch); ``--dtype`` or the device's."""
    # Imported here: torch is optional (the calibrate extra): the simulator and --help run without
    # it.
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available here")
    if args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    return args.dtype or ("fp32" if args.device == "cpu" else "bf16")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        help=f"preset: {', '.join(MODEL_PRESETS)}; with --from-run, whatever a scenario's "
        "model: accepts (a preset, a config.json path, an inline spec in YAML flow style)",
    )
    add_torch_arguments(parser)
    parser.add_argument("--grid", choices=GRIDS, default="default", help=GRID_HELP)
    parser.add_argument("--fit", choices=("piecewise", "linear"), default="piecewise")
    parser.add_argument("--seed", type=int, default=0, help="weights, tokens, shuffling")
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="sampling temperature while timing (0 = greedy argmax)",
    )
    parser.add_argument(
        "--out",
        type=lambda text: Path(out_argument(text)),
        help="default: calibration/artifacts/<device>-<model>-<dtype>.json; with --from-run: "
        "runs/fitted-<model>-<hardware>.json (--fit-kind engine-cpu: runs/engine-cpu-...)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--kernels",
        action="store_true",
        help=(
            "time the model's operators (GEMMs, attention, LM head, sampler) and write a "
            "kernel-table artifact for cost kind 'kernels' (grids: small, gpu)"
        ),
    )

    add_from_run_arguments(parser)
    # The command an artifact records: main (below) sets its own line; else sys.argv.
    parser.set_defaults(command_line=None)


def add_parsers(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``calibrate`` to an ``argparse`` subparsers object; handler in ``func``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "calibrate",
        help="time a real model on this machine and fit a calibrated cost artifact",
        description="time a model on this machine and write a cost artifact",
    )
    _add_arguments(parser)
    parser.set_defaults(func=run, handler=run)
    return parser


def _run_kernels(args: argparse.Namespace, spec: ModelSpec, dtype: DtypeName) -> int:
    """``--kernels``: the model's operator tables on this device (``calibration.kernel_tables``)."""
    grid = args.grid
    if grid == "default":
        grid = "gpu" if args.device == "cuda" else "small"
    if grid not in KERNEL_GRIDS:
        raise ConfigError(f"--grid {grid}: kernel grids are {', '.join(KERNEL_GRIDS)}")
    arch = load_architecture(args.model) if args.model in HF_CONFIGS else spec
    name = f"{args.device}-{spec.name}-{dtype}-kernels.json.gz"
    out = args.out or Path("calibration/artifacts") / name
    check_out_file(out)  # before the timing: a bad --out would lose it
    print(f"timing the operators of {arch.name} ({dtype}) on {args.device}: grid {grid}")
    started = time.perf_counter()
    artifact = measure_tables(arch, args.device, dtype, grid, progress=lambda s: print(f"  {s}"))
    path = save_kernel_artifact(artifact, Path(out))
    print(
        f"wrote {path} in {time.perf_counter() - started:.0f} s; use it with "
        f"cost: {{kind: kernels, source: path, artifact: {path}}}"
    )
    return 0


def _refuse_unread(args: argparse.Namespace, flags: Sequence[str], mode: str) -> None:
    """ConfigError naming the first of ``flags`` (timing options) given where ``mode``
    reads none of them (``mode`` says why): --from-run times no model, --kernels
    fits no step curve and samples no token."""
    for flag, value in options_given(args, _add_arguments, flags).items():
        shown = f"{value:g}" if isinstance(value, float) else value
        raise ConfigError(f"{flag} {shown}: {mode}; omit it")


def run(args: argparse.Namespace) -> int:
    """Calibrate as ``args`` say; raises ConfigError on bad input. Returns 0."""
    if args.from_run is not None:
        if args.kernels:
            raise ConfigError("--from-run fits measured runs; --kernels times operators: pick one")
        refuse_torch_options(args, "--from-run fits measured runs")
        _refuse_unread(
            args, ("--grid", "--fit", "--seed", "--temperature"), "--from-run times no model"
        )
        return calibrate_from_runs(args)
    refuse_from_run_options(args)
    if args.kernels:
        _refuse_unread(
            args,
            ("--fit", "--seed", "--temperature"),
            "--kernels times operators and reads no --fit, --seed or --temperature",
        )
    try:
        import torch
    except ImportError:
        raise torch_missing("calibrate") from None
    from calibration.model import TORCH_DTYPES, LlamaModel
    from calibration.profile import (
        build_grid,
        free_memory_bytes,
        hardware_info,
        profile_grid,
        software_info,
    )

    spec = model_preset(args.model)
    dtype = checked_dtype(args)
    if not 0 <= args.temperature < float("inf"):  # NaN too
        raise ConfigError(f"--temperature must be a finite number >= 0, got {args.temperature}")
    if args.seed < 0:  # numpy's generators take none (a ValueError traceback otherwise)
        raise ConfigError(f"--seed must be >= 0, got {args.seed}")
    if args.kernels:
        return _run_kernels(args, spec, dtype)
    out = args.out or Path("calibration/artifacts") / f"{args.device}-{spec.name}-{dtype}.json"
    check_out_file(out)  # before the timing: a bad --out would lose it
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    command = args.command_line or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])

    rng = np.random.default_rng(args.seed)
    model = LlamaModel(spec, dtype=TORCH_DTYPES[dtype], device=device, seed=args.seed)
    grid = build_grid(args.grid)
    # The grid's KV cache in 60 % of the device's free memory (after the weights), at the
    # dtype the model runs in: the rest is room for activations, attention scratch and
    # the decode gather.
    kv_spec = spec.model_copy(update={"kv_dtype_bytes": model.embed.element_size()})
    max_kv_tokens = int(0.6 * free_memory_bytes(device) // kv_spec.kv_bytes_per_token)
    print(
        f"calibrating {spec.name} ({dtype}, {spec.num_params / 1e6:.1f}M params) on "
        f"{device} with {args.threads} thread(s): grid {grid.name}, {len(grid.points)} "
        f"points x ({grid.num_warmup} warm-up + {grid.num_repeats} repeats)"
    )
    start = time.perf_counter()
    samples = profile_grid(
        model,
        grid,
        rng,
        temperature=args.temperature,
        max_kv_tokens=max_kv_tokens,
        progress=not args.no_progress,
    )
    total_s = time.perf_counter() - start
    samples = split_held_out(samples)
    fit, error = fit_samples(samples, args.fit)
    artifact = CalibrationArtifact(
        schema_version=SCHEMA_VERSION,
        created_utc=utc_now(),
        command=command,
        git_revision=git_revision(),
        hardware=hardware_info(device),
        model=ModelInfo(spec=spec, num_params=spec.num_params, dtype=dtype),
        software=software_info(),
        grid=grid.name,
        num_warmup=grid.num_warmup,
        num_repeats=grid.num_repeats,
        sampling_temperature=args.temperature,
        total_seconds=total_s,
        samples=samples,
        fit=fit,
        fit_error=error,
    )
    save_artifact(artifact, out)
    held = (
        f"held-out mean APE {100 * error.held_out_mean_ape:.1f} %, max "
        f"{100 * (error.held_out_max_ape or 0.0):.1f} % on {error.num_held_out} points"
        if error.held_out_mean_ape is not None
        else "no held-out points"
    )
    print(
        f"timed in {total_s:.1f} s; {fit.kind} fit: train mean APE "
        f"{100 * error.train_mean_ape:.1f} % on {error.num_train} points, {held}"
    )
    print(f"wrote {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="servesim calibrate", description=__doc__)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["servesim", "calibrate", *argv])
    try:
        return run(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
