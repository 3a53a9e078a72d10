"""The profile's skew fit: imported bucket by bucket, looked up as LLMServingSim does.

``skew_fit.csv`` holds a fitted ``alpha`` per bucket of (prefill chunk, decode
count, skew rate, max decode KV, cached prefill); a decode batch of uneven KV
lengths costs ``t(mean) + alpha * (t(max) - t(mean))``. Hand-checked on a
tiny fit written here, against the test profile's own rows; imported and
applied only where the profile's meta.yaml enables it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sim.cost.base import StepShape
from sim.cost.config import build_cost_model
from sim.cost.kernels import price
from sim.cost.kernels.artifact import (
    KernelArtifact,
    load_kernel_artifact,
    resolve_kernel_artifact,
    save_artifact,
)
from sim.cost.kernels.config import KernelsCostConfig
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.kernels.tables import put_skew_fit
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, load_architecture, model_preset

LLAMA = load_architecture("llama-3.1-8b")

from skew_costs import skewed_kernel_cost  # noqa: E402

PROFILE_DIR = Path(__file__).parent / "data" / "kernels" / "profile"
FIT = """pc,n_label,skew_rate_label,kv_big_label,kp_label,alpha,n_samples
0,n<=2,sr<=5%,kvB<=1k,kp=0,0.5,2
0,n<=4,sr<=15%,kvB<=4k,kp=0,0.25,4
0,n<=4,sr>70%,kvB<=4k,kp=0,-0.125,4
128,n<=4,sr<=15%,kvB<=4k,kp<=512,2.0,3
"""


def profile_with_fit(tmp_path: Path, fit: str = FIT, enabled: bool = True) -> KernelArtifact:
    """The test profile with ``fit`` as its skew_fit.csv, enabled in meta.yaml or not."""
    folder = tmp_path / "profile"
    shutil.copytree(PROFILE_DIR, folder)
    (folder / "bf16" / "tp1" / "skew_fit.csv").write_text(fit)
    meta_path = folder / "bf16" / "meta.yaml"
    meta = yaml.safe_load(meta_path.read_text())
    meta["skew_fit"] = {"enabled": enabled}
    meta_path.chmod(0o644)
    meta_path.write_text(yaml.safe_dump(meta))
    return profile_artifact(folder / "bf16" / "tp1")


def timed_us(pc: int, kp: int, n: int, kv: int) -> float:
    """The test profile's attention.csv row, in microseconds, read from the file."""
    rows = pd.read_csv(PROFILE_DIR / "bf16" / "tp1" / "attention.csv")
    match = rows[(rows["prefill_chunk"] == pc) & (rows["kv_prefill"] == kp)
                 & (rows["n_decode"] == n) & (rows["kv_decode"] == kv)]  # fmt: skip
    assert len(match) == 1
    return float(match["time_us"].iloc[0])


def test_bucket_labels_become_their_upper_edges(tmp_path: Path) -> None:
    table = profile_with_fit(tmp_path).tables["attention_skew"]
    assert table["prefill_chunk_tokens"].tolist() == [0, 0, 0, 128]
    assert table["max_num_decode_seqs"].tolist() == [2, 4, 4, 4]
    # sr>70%: the rate is clipped to [0, 1], so its top bucket ends at 1.
    assert table["max_skew_rate"].tolist() == pytest.approx([0.05, 0.15, 1.0, 0.15])
    assert table["max_kv_decode_tokens"].tolist() == [1024, 4096, 4096, 4096]
    assert table["max_kv_prefill_tokens"].tolist() == [0, 0, 0, 512]
    assert table["alpha"].tolist() == [0.5, 0.25, -0.125, 2.0]
    assert table["num_samples"].tolist() == [2, 4, 4, 3]


def test_a_profile_without_a_fit_has_no_skew_table() -> None:
    assert not profile_artifact(PROFILE_DIR / "bf16" / "tp1").has("attention_skew")


def test_the_skew_table_survives_a_save_and_load(tmp_path: Path) -> None:
    artifact = profile_with_fit(tmp_path)
    path = save_artifact(artifact, tmp_path / "a.json.gz")
    loaded = load_kernel_artifact(path).tables["attention_skew"]
    pd.testing.assert_frame_equal(loaded, artifact.tables["attention_skew"], check_dtype=False)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0,n<=2,sr<=5%,kvB<=1k,kp=0,oops,2", "must be numbers"),
        ("0,n>256,sr<=5%,kvB<=1k,kp=0,0.1,2", "open-ended bucket 'n>256'"),
        ("0,m<=2,sr<=5%,kvB<=1k,kp=0,0.1,2", "cannot read bucket label 'm<=2'"),
    ],
)
def test_a_bad_fit_row_is_one_line_naming_the_file(tmp_path: Path, row: str, message: str) -> None:
    fit = FIT.splitlines()[0] + "\n" + row + "\n"
    with pytest.raises(ConfigError, match=message) as error:
        profile_with_fit(tmp_path, fit)
    assert "skew_fit.csv" in str(error.value) and "\n" not in str(error.value)


def test_alpha_comes_from_the_bucket_each_value_falls_in(tmp_path: Path) -> None:
    tables: list[float] = []
    layout = [0] * price.LAYOUT_SIZE
    put_skew_fit(profile_with_fit(tmp_path), tables, layout)

    def alpha(chunk: float, seqs: int, rate: float, kv_max: float, kv_prefill: float) -> float:
        """The fit's alpha of a batch, as the price reads it (``price.bucket_alpha``)."""
        return price.bucket_alpha(tables, layout, float(chunk), kv_prefill, seqs, rate, kv_max)

    # Buckets are (previous edge, edge]: n = 2 is n<=2, n = 3 is n<=4.
    assert alpha(0, 2, 0.05, 1024, 0) == 0.5
    assert alpha(0, 3, 0.10, 2000, 0) == 0.25
    assert alpha(0, 4, 0.9, 4096, 0) == -0.125
    # Past the last edge: the last bucket (n = 300 in n<=4, KV 9000 in kvB<=4k).
    assert alpha(0, 300, 0.10, 9000, 0) == 0.25
    # A rate outside [0, 1] is clipped into it.
    assert alpha(0, 4, 1.5, 4096, 0) == -0.125
    # The prefill chunk matches exactly, its cached tokens by bucket.
    assert alpha(128, 4, 0.10, 4096, 300) == 2.0
    assert alpha(127, 4, 0.10, 4096, 300) == 0.0
    # A bucket with no fit: no correction.
    assert alpha(0, 2, 0.5, 1024, 0) == 0.0


def test_the_blend_moves_from_the_mean_towards_the_max_by_alpha() -> None:
    assert price.blend_s(10.0, 20.0, 0.25) == 12.5
    assert price.blend_s(10.0, 20.0, -0.125) == 8.75  # the fit's alpha is not clipped
    assert price.blend_s(10.0, 9.0, 0.5) == 10.0  # the max no slower: the mean's time


def test_a_fit_the_meta_leaves_disabled_is_not_imported_and_said_so(tmp_path: Path) -> None:
    artifact = profile_with_fit(tmp_path, enabled=False)
    assert not artifact.has("attention_skew")
    assert "skew_fit.csv not imported: meta.yaml skew_fit.enabled is not true" in (
        artifact.provenance.notes
    )


def test_the_shipped_profiles_carry_the_fit_only_where_their_meta_enables_it() -> None:
    # LLMServingSim's RTX 4090 bundle marks its skew fit disabled; the RTX PRO 6000's enables it.
    rtx4090 = load_kernel_artifact(
        resolve_kernel_artifact("rtx4090-vllm-0.19.0-llama-3.1-8b-tp1", None)
    )
    assert not rtx4090.has("attention_skew")
    assert "skew_fit.csv not imported" in rtx4090.provenance.notes
    pro = load_kernel_artifact(
        resolve_kernel_artifact("rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1", None)
    )
    assert pro.has("attention_skew") and "skew_fit" not in pro.provenance.notes


# Eight decodes, one with 1024 cached tokens and seven with none: mean KV 128,
# max 1024, min 0, skew rate 128 / 1024 = 0.125 (bucket sr<=15%), n<=8, kvB<=1k.
SKEWED = [1025] + [1] * 7  # contexts count the token being computed
HAND_FIT = """pc,n_label,skew_rate_label,kv_big_label,kp_label,alpha,n_samples
0,n<=8,sr<=15%,kvB<=1k,kp=0,0.25,4
128,n<=8,sr<=15%,kvB<=1k,kp<=512,0.5,3
"""


def test_a_skewed_decode_step_moves_a_quarter_of_the_way_to_the_longest(tmp_path: Path) -> None:
    cost = KernelCost(LLAMA, profile_with_fit(tmp_path, HAND_FIT))
    shape = StepShape.build(decode_context_tokens=SKEWED)
    assert (shape.max_decode_context_tokens, shape.min_decode_context_tokens) == (1025, 1)
    # t(mean) = 8 decodes at KV 128: 18.3993 us; t(max) = at KV 1024: 55.5817 us.
    assert timed_us(0, 0, 8, 128) == 18.3993 and timed_us(0, 0, 8, 1024) == 55.5817
    expected_s = (18.3993 + 0.25 * (55.5817 - 18.3993)) * 1e-6  # 27.6949 us
    assert cost.attention_s(shape) == pytest.approx(expected_s, rel=1e-12)
    # The whole step: the even batch's, plus 32 layers of the skew term.
    even = KernelCost(
        LLAMA, profile_with_fit(tmp_path / "b", HAND_FIT), disabled_terms=frozenset({"skew"})
    )
    extra_s = 32 * 0.25 * (55.5817 - 18.3993) * 1e-6
    assert cost.step_s(shape) == pytest.approx(even.step_s(shape) + extra_s, rel=1e-12)


def test_a_skewed_mixed_step_blends_on_the_mixed_lattice(tmp_path: Path) -> None:
    cost = KernelCost(LLAMA, profile_with_fit(tmp_path, HAND_FIT))
    # One 128-token chunk after 16 cached (bucket pc=128, kp<=512) beside the same decodes.
    shape = StepShape.build(prefill_chunks=[(128, 16)], decode_context_tokens=SKEWED)
    assert timed_us(128, 16, 8, 128) == 32.041 and timed_us(128, 16, 8, 1024) == 104.111
    expected_s = (32.041 + 0.5 * (104.111 - 32.041)) * 1e-6
    assert cost.attention_s(shape) == pytest.approx(expected_s, rel=1e-12)
    breakdown = cost.breakdown_s(shape)
    assert breakdown["mixed_attention"] == pytest.approx(32 * expected_s, rel=1e-12)


def test_no_correction_without_a_spread_a_fit_or_the_switch(tmp_path: Path) -> None:
    cost = KernelCost(LLAMA, profile_with_fit(tmp_path, HAND_FIT))
    at_mean = timed_us(0, 0, 8, 128) * 1e-6
    # An even batch at the same mean, or a shape built without its spread (0, 0).
    assert cost.attention_s(StepShape.build(decode_context_tokens=[129] * 8)) == at_mean
    bare = StepShape(num_decode_seqs=8, num_decode_context_tokens=8 * 129)
    assert cost.attention_s(bare) == at_mean
    # A bucket with no fit: a 16-token chunk beside the decodes (the fit has pc 0, 128).
    off = KernelCost(
        LLAMA, profile_with_fit(tmp_path / "b", HAND_FIT), disabled_terms=frozenset({"skew"})
    )
    chunk = StepShape.build(prefill_chunks=[(16, 0)], decode_context_tokens=SKEWED)
    assert cost.attention_s(chunk) == off.attention_s(chunk)
    # One decode has no spread.
    assert cost.attention_s(StepShape.build(decode_context_tokens=[1025])) == (
        timed_us(0, 0, 1, 1024) * 1e-6
    )
    # Switched off (an ablation), and a profile without a fit.
    assert off.attention_s(StepShape.build(decode_context_tokens=SKEWED)) == at_mean
    plain = KernelCost(LLAMA, profile_artifact(PROFILE_DIR / "bf16" / "tp1"))
    assert plain.attention_s(StepShape.build(decode_context_tokens=SKEWED)) == at_mean


def test_the_config_switch_reaches_the_cost_model() -> None:
    pro, llama = hardware_preset("rtx-pro-6000"), model_preset("llama-3-8b")
    name = "rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1"
    on = build_cost_model(KernelsCostConfig(source="path", artifact=name), llama, pro)
    off = build_cost_model(KernelsCostConfig(source="path", artifact=name, skew=False), llama, pro)
    assert isinstance(on, KernelCost) and isinstance(off, KernelCost)
    assert on._skew and not off._skew
    # A decode batch the RTX PRO 6000 fit corrects: dearer with it than without.
    shape = StepShape.build(decode_context_tokens=[3000] + [200] * 31)
    assert on.step_s(shape) > off.step_s(shape)
    assert KernelsCostConfig().skew is True


@given(contexts=st.lists(st.integers(1, 16_000), min_size=1, max_size=300))
def test_the_skew_never_prices_below_the_mean_for_a_positive_alpha(contexts: list[int]) -> None:
    cost, even = SKEWED_COST, EVEN_COST
    shape = StepShape.build(decode_context_tokens=contexts)
    # Every alpha of the shared fit is positive: the blend lies between t(mean) and t(max).
    assert cost.attention_s(shape) >= even.attention_s(shape)
    kv_max = max(contexts) - 1.0
    assert cost.attention_s(shape) <= max(
        even.attention_s(shape), cost._decode_attn(float(len(contexts)), kv_max)
    )


SKEWED_COST = skewed_kernel_cost()
EVEN_COST = skewed_kernel_cost(skew=False)
