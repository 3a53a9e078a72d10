"""Kernel artifacts: format round trip, provenance, the aiconfigurator and LLMServingSim loaders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from sim.cli import main
from sim.cost.kernels import aiconfigurator as aic
from sim.cost.kernels.aiconfigurator import from_aiconfigurator, resolve
from sim.cost.kernels.artifact import (
    TABLE_COLUMNS,
    KernelArtifact,
    KernelProvenance,
    load_kernel_artifact,
    save_artifact,
)
from sim.cost.kernels.llmservingsim import import_profile, profile_artifact
from sim.cost.kernels.slice import export_slice, slice_artifact
from sim.errors import ConfigError
from sim.hardware.specs import load_architecture

DATA = Path(__file__).parent / "data" / "kernels"
AIC_DATA = DATA / "aic" / "systems" / "data"
PROFILE = DATA / "profile" / "bf16"
GPU = "rtx_pro_6000_server"


def provenance(**changes: object) -> KernelProvenance:
    base = KernelProvenance(
        source="unit test", licence="MIT", gpu="gpu0", framework="vllm", framework_version="1.0"
    )
    return base.model_copy(update=changes)


def small_artifact() -> KernelArtifact:
    gemm = pd.DataFrame({"m": [1, 2], "n": [8, 8], "k": [8, 8], "latency_s": [1e-5, 2e-5]})
    per_seq = pd.DataFrame({"op": ["lm_head"], "num_seqs": [1], "latency_s": [3e-4]})
    return KernelArtifact(provenance(), {"gemm": gemm, "per_sequence": per_seq})


# -- format ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a.json", "a.json.gz"])
def test_artifact_round_trips_through_json_and_gzip(tmp_path: Path, name: str) -> None:
    artifact = small_artifact()
    path = save_artifact(artifact, tmp_path / name)
    loaded = load_kernel_artifact(path)
    assert loaded.provenance == artifact.provenance
    assert set(loaded.tables) == {"gemm", "per_sequence"}
    for table in ("gemm", "per_sequence"):
        pd.testing.assert_frame_equal(loaded.tables[table], artifact.tables[table])


def test_gzip_artifacts_are_byte_reproducible(tmp_path: Path) -> None:
    a = save_artifact(small_artifact(), tmp_path / "a.json.gz").read_bytes()
    b = save_artifact(small_artifact(), tmp_path / "b.json.gz").read_bytes()
    assert a == b


def test_artifact_json_carries_format_version_and_provenance(tmp_path: Path) -> None:
    path = save_artifact(small_artifact(), tmp_path / "a.json")
    data = json.loads(path.read_text())
    assert data["format"] == "servesim-kernels" and data["format_version"] == 1
    assert data["provenance"]["licence"] == "MIT"
    assert list(data["tables"]["gemm"]) == list(TABLE_COLUMNS["gemm"])


def write_json(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


def good_json() -> dict:
    return small_artifact().to_json()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format="other"), "not a kernel artifact"),
        (lambda d: d.update(format_version=9), "format_version 9"),
        (lambda d: d["provenance"].pop("licence"), r"provenance\.licence"),
        (lambda d: d.update(tables=[1]), "tables must be a mapping"),
        (lambda d: d["tables"].update(foo={"x": [1]}), "unknown kernel table 'foo'"),
        (lambda d: d["tables"]["gemm"].pop("k"), "table gemm has columns"),
        (lambda d: d["tables"]["gemm"].update(latency_s=[1e-5, -1.0]), "latency_s must be"),
        (lambda d: d["tables"]["gemm"].update(m=[1]), "table gemm"),
        # aiconfigurator's importer before version 2 stored bf16 element counts as bytes.
        (
            lambda d: d["provenance"].update(
                tool="sim.cost.kernels.aiconfigurator", tool_version="1"
            ),
            "all-reduce sizes are bf16 element counts",
        ),
    ],
)
def test_bad_artifacts_raise_one_line_config_errors_naming_the_file(
    tmp_path: Path, mutate: object, message: str
) -> None:
    data = good_json()
    mutate(data)  # type: ignore[operator]
    path = write_json(tmp_path, data)
    with pytest.raises(ConfigError, match=message) as err:
        load_kernel_artifact(path)
    assert "\n" not in str(err.value)
    assert str(path) in str(err.value) or "artifact" in str(err.value)


def test_unreadable_artifact_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="kernel artifact not found"):
        load_kernel_artifact(tmp_path / "missing.json")
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(b"not gzip")
    with pytest.raises(ConfigError, match=r"broken\.json\.gz"):
        load_kernel_artifact(broken)


def test_artifact_constructor_checks_tables() -> None:
    with pytest.raises(ConfigError, match="unknown kernel table"):
        KernelArtifact(provenance(), {"nope": pd.DataFrame({"latency_s": [1.0]})})


def test_has_is_false_for_missing_or_empty_tables() -> None:
    artifact = KernelArtifact(
        provenance(), {"gemm": pd.DataFrame({c: [] for c in TABLE_COLUMNS["gemm"]})}
    )
    assert not artifact.has("gemm") and not artifact.has("moe")
    assert small_artifact().has("gemm")


# -- LLMServingSim profiles ------------------------------------------------------------


def test_import_profile_converts_microseconds_and_keeps_provenance(tmp_path: Path) -> None:
    path = import_profile(PROFILE / "tp1", tmp_path / "p.json.gz")
    artifact = load_kernel_artifact(path)
    p = artifact.provenance
    assert p.gpu == "RTX4090" and p.device_name == "NVIDIA GeForce RTX 4090"
    assert p.framework == "vllm" and p.framework_version == "0.19.0"
    assert p.model == "meta-llama/Llama-3.1-8B" and p.tensor_parallel_size == 1
    assert "MIT" in p.licence and "LLMServingSim" in p.source and p.date.startswith("2026")
    dense = pd.read_csv(PROFILE / "tp1" / "dense.csv")
    row = dense[(dense["layer"] == "qkv_proj") & (dense["tokens"] == 128)].iloc[0]
    table = artifact.tables["layer_ops"]
    got = table[(table["op"] == "qkv_proj") & (table["num_tokens"] == 128)]["latency_s"].iloc[0]
    assert got == pytest.approx(row["time_us"] * 1e-6, rel=1e-12)
    assert len(artifact.tables["per_sequence"]) == len(
        pd.read_csv(PROFILE / "tp1/per_sequence.csv")
    )


def test_import_profile_accepts_the_dtype_folder_and_drops_the_empty_batch() -> None:
    artifact = profile_artifact(PROFILE)
    mixed = artifact.tables["mixed_attention"]
    assert ((mixed["prefill_chunk_tokens"] > 0) | (mixed["num_decode_seqs"] > 0)).all()


def test_import_profile_errors_name_the_folder_or_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a profile folder"):
        import_profile(tmp_path, tmp_path / "out.json")
    tp1 = tmp_path / "tp1"
    tp1.mkdir()
    (tp1 / "dense.csv").write_text((PROFILE / "tp1/dense.csv").read_text())
    with pytest.raises(ConfigError, match=r"no meta\.yaml"):
        profile_artifact(tp1)
    (tmp_path / "meta.yaml").write_text("gpu: X\nmodel: m\n")
    with pytest.raises(ConfigError, match="missing field 'vllm_version'"):
        profile_artifact(tp1)
    (tmp_path / "meta.yaml").write_text("gpu: X\nmodel: m\nvllm_version: '1'\n")
    with pytest.raises(ConfigError, match=r"attention.csv: missing profile table"):
        profile_artifact(tp1)
    (tp1 / "attention.csv").write_text("prefill_chunk,kv_prefill\n1,2\n")
    with pytest.raises(ConfigError, match="missing column 'n_decode'"):
        profile_artifact(tp1)


def test_main_writes_the_artifact_and_returns_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.json.gz"
    assert main(["import-profile", str(PROFILE / "tp1"), "--out", str(out)]) == 0
    assert out.is_file() and "wrote" in capsys.readouterr().out
    assert main(["import-profile", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "not a profile folder" in capsys.readouterr().err


# -- aiconfigurator ---------------------------------------------------------------------


def test_from_aiconfigurator_filters_to_the_vllm_bf16_kernels() -> None:
    artifact = from_aiconfigurator(GPU, data_dir=AIC_DATA)
    raw = pd.read_parquet(AIC_DATA / GPU / "gemm/vllm/0.24.0/gemm_perf.parquet")
    linear = raw[(raw["kernel_source"] == "torch.nn.functional.linear")]
    assert len(artifact.tables["gemm"]) == len(linear) < len(raw)
    row = linear[(linear["m"] == 16) & (linear["n"] == 6144) & (linear["k"] == 4096)].iloc[0]
    gemm = artifact.tables["gemm"]
    got = gemm[(gemm["m"] == 16) & (gemm["n"] == 6144) & (gemm["k"] == 4096)]["latency_s"]
    assert got.tolist() == [pytest.approx(row["latency"] * 1e-3, rel=1e-12)]
    kernels = artifact.provenance.kernels
    assert (
        kernels["attention"].startswith("vllm_flash_attn_fa2")
        and "window 0" in kernels["attention"]
    )
    ctx = pd.read_parquet(AIC_DATA / GPU / "attention/vllm/0.24.0/context_attention_perf.parquet")
    fa2_full = ctx[
        (ctx["kernel_source"] == "vllm_flash_attn_fa2")
        & (ctx["window_size"] == 0)
        & (ctx["kv_cache_dtype"] == "bfloat16")
    ]
    assert len(artifact.tables["context_attention"]) == len(fa2_full)
    assert set(artifact.tables["allreduce"]["num_gpus"]) == {2, 4, 8}
    assert artifact.provenance.framework_version == "0.24.0"
    assert artifact.provenance.licence.startswith("Apache-2.0")


def test_generation_table_kv_length_is_the_step_column() -> None:
    artifact = from_aiconfigurator(GPU, data_dir=AIC_DATA)
    assert set(artifact.tables["generation_attention"]["kv_tokens"]) >= {1023, 4095}


def test_newest_version_is_picked_and_an_older_one_can_be_asked_for() -> None:
    assert resolve(GPU, data_dir=AIC_DATA)[1] == "0.24.0"
    old = from_aiconfigurator(GPU, version="0.19.0", data_dir=AIC_DATA)
    assert old.provenance.framework_version == "0.19.0" and len(old.tables["gemm"]) == 1
    # Ops absent for 0.19.0 fall back to the newest version present.
    assert "attention from 0.24.0" in old.provenance.notes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("h999",), r"no GPU 'h999' with GEMM tables; available: rtx_pro_6000_server"),
        ((GPU, "trtllm"), r"no framework 'trtllm' for rtx_pro_6000_server; available: vllm"),
        ((GPU, "vllm", "0.1"), r"no version '0.1' of vllm .*available: 0.19.0, 0.24.0"),
    ],
)
def test_unknown_gpu_framework_or_version_lists_what_is_available(
    args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        framework = args[1] if len(args) > 1 else "vllm"
        version = args[2] if len(args) > 2 else None
        from_aiconfigurator(args[0], framework, version, data_dir=AIC_DATA)
    assert "\n" not in str(err.value)


def test_missing_data_dir_or_package_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="no such folder"):
        from_aiconfigurator(GPU, data_dir=tmp_path / "nope")
    monkeypatch.setattr(aic, "installed_data_dir", lambda: None)
    with pytest.raises(ConfigError, match="aiconfigurator-core is not installed"):
        from_aiconfigurator(GPU)


def test_export_slice_keeps_only_what_the_model_needs(tmp_path: Path) -> None:
    path = export_slice(GPU, "llama-3.1-8b", tmp_path / "s.json.gz", data_dir=AIC_DATA)
    sliced = load_kernel_artifact(path)
    full = from_aiconfigurator(GPU, data_dir=AIC_DATA)
    assert sliced.provenance.model == "llama-3.1-8b"
    assert "sliced for llama-3.1-8b at tp 1" in sliced.provenance.notes
    assert len(sliced.tables["gemm"]) < len(full.tables["gemm"])
    heads = sliced.tables["context_attention"][["num_heads", "num_kv_heads", "head_dim"]]
    assert {tuple(r) for r in heads.itertuples(index=False)} == {(32, 8, 128)}
    assert set(sliced.tables["allreduce"]["num_gpus"]) <= {1}
    assert "moe" not in sliced.tables  # dense model
    # gate+up (n = 28672) keeps both neighbouring n grid values.
    assert {16384, 51200} <= set(sliced.tables["gemm"]["n"])


def test_export_slice_of_an_moe_model_keeps_its_expert_rows() -> None:
    arch = load_architecture("qwen3-30b-a3b")
    # The test database times Llama's head layouts only, so export_slice would refuse.
    full = from_aiconfigurator(GPU, data_dir=AIC_DATA)
    moe = slice_artifact(full, arch, tensor_parallel_sizes=(1, 2)).tables["moe"]
    assert len(moe) > 0
    assert set(moe["num_experts"]) == {128} and set(moe["tp_size"]) <= {1, 2}
    assert set(moe["ep_size"]) == {1}


def test_against_the_installed_aiconfigurator_core() -> None:
    pytest.importorskip("aiconfigurator_core")
    artifact = from_aiconfigurator(GPU)
    assert artifact.provenance.source.startswith("aiconfigurator-core")
    assert artifact.has("gemm") and artifact.has("generation_attention")


def test_export_main_writes_a_slice_and_reports_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.json.gz"
    argv = [
        "export-kernels",
        GPU,
        "llama-3.1-8b",
        "--out",
        str(out),
        "--tp",
        "1",
        "2",
        "--data-dir",
        str(AIC_DATA),
    ]
    assert main(argv) == 0
    assert "wrote" in capsys.readouterr().out
    assert "at tp 1,2" in load_kernel_artifact(out).provenance.notes
    assert (
        main(
            [
                "export-kernels",
                "h999",
                "llama-3.1-8b",
                "--out",
                str(out),
                "--data-dir",
                str(AIC_DATA),
            ]
        )
        == 2
    )
    assert "no GPU 'h999'" in capsys.readouterr().err


def test_export_refuses_a_model_whose_heads_the_tables_lack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Qwen3-30B-A3B has 32 heads / 4 KV heads; the test database times 32/8 and 16/4."""
    out = tmp_path / "q.json.gz"
    argv = ["export-kernels", GPU, "qwen3-30b-a3b", "--out", str(out), "--data-dir", str(AIC_DATA)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        "servesim: error: export-kernels: rtx_pro_6000_server vllm 0.24.0 has no prefill "
        "attention (context_attention) for 32 heads / 4 KV heads / head_dim 128 per GPU "
        "(qwen3-30b-a3b at tp 1)\n"
    )
    assert not out.exists()  # nothing written, not an empty table
    # Llama-3.1-8B at tp 4 (8 heads / 2 KV heads per GPU): refused the same way.
    assert main([*argv[:2], "llama-3.1-8b", *argv[3:], "--tp", "1", "4"]) == 2
    assert "for 8 heads / 2 KV heads / head_dim 128 per GPU (llama-3.1-8b at tp 4)" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(("framework", "version"), [("sglang", "0.5.14"), ("trtllm", "1.3.0rc20")])
def test_export_refuses_other_frameworks_in_one_line(
    framework: str, version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aiconfigurator also times SGLang and TensorRT-LLM kernels (other kernel names,
    no all-reduce ``backend`` column): servesim prices vLLM's and says so."""
    data = tmp_path / "data"
    shutil.copytree(AIC_DATA, data)
    gemm = data / GPU / "gemm" / framework / version
    gemm.mkdir(parents=True)
    shutil.copy(AIC_DATA / GPU / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet", gemm)
    out = tmp_path / "s.json.gz"
    argv = ["export-kernels", GPU, "llama-3.1-8b", "--out", str(out), "--data-dir", str(data)]
    assert main([*argv, "--framework", framework]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not out.exists()
    assert f"framework {framework!r} is not supported ({GPU} has its tables" in err
    with pytest.raises(ConfigError, match="reads only vllm's kernels"):
        from_aiconfigurator(GPU, framework, data_dir=data)


def test_attention_kernels_pair_prefill_and_decode_as_vllm_runs_them() -> None:
    """Hopper: FA3 for both; Blackwell's vLLM 0.24 tables: FlashInfer's TRT-LLM prefill
    and decode kernels; A100's vLLM 0.14 tables: ``vllm_flash_attn``, no window column."""

    def table(*kernels: str, window: bool = True) -> pd.DataFrame:
        rows: dict[str, list[object]] = {
            "kernel_source": list(kernels),
            "kv_cache_dtype": ["bfloat16"] * len(kernels),
            "beam_width": [1] * len(kernels),
        }
        return pd.DataFrame({**rows, **({"window_size": [0] * len(kernels)} if window else {})})

    hopper = table("vllm_flash_attn_fa4", "vllm_flash_attn_fa3")
    assert aic._attention_kernels(hopper, hopper) == ("vllm_flash_attn_fa3",) * 2
    b200_ctx = table("vllm_flashinfer_trtllmdecode", "vllm_flashinfer_trtllmprefill")
    b200_gen = table("vllm_flashinfer_trtllmdecode")
    assert aic._attention_kernels(b200_ctx, b200_gen) == (
        "vllm_flashinfer_trtllmprefill",
        "vllm_flashinfer_trtllmdecode",
    )
    old = table("vllm_flash_attn", window=False)
    assert len(aic._full_bf16(old)) == 1  # no window column: full attention only
    assert aic._attention_kernels(old, old) == ("vllm_flash_attn",) * 2
    windowed = table("vllm_flash_attn_fa3").assign(window_size=128)
    assert len(aic._full_bf16(windowed)) == 0
    assert aic._attention_kernels(table("x"), table("x")) is None
