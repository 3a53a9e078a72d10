"""The profile's skew fit: imported bucket by bucket, looked up as LLMServingSim does.

``skew_fit.csv`` holds a fitted ``alpha`` per bucket of (prefill chunk, decode
count, skew rate, max decode KV, cached prefill); a decode batch of uneven KV
lengths costs ``t(mean) + alpha * (t(max) - t(mean))``. Hand-checked on a
tiny fit written here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from sim.cost.kernels.artifact import KernelArtifact, load_kernel_artifact, save_artifact
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.kernels.tables import SkewFit
from sim.errors import ConfigError

PROFILE_DIR = Path(__file__).parent / "data" / "kernels" / "profile"
FIT = """pc,n_label,skew_rate_label,kv_big_label,kp_label,alpha,n_samples
0,n<=2,sr<=5%,kvB<=1k,kp=0,0.5,2
0,n<=4,sr<=15%,kvB<=4k,kp=0,0.25,4
0,n<=4,sr>70%,kvB<=4k,kp=0,-0.125,4
128,n<=4,sr<=15%,kvB<=4k,kp<=512,2.0,3
"""


def profile_with_fit(tmp_path: Path, fit: str = FIT) -> KernelArtifact:
    folder = tmp_path / "profile"
    shutil.copytree(PROFILE_DIR, folder)
    (folder / "bf16" / "tp1" / "skew_fit.csv").write_text(fit)
    return profile_artifact(folder / "bf16" / "tp1")


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
    fit = SkewFit(profile_with_fit(tmp_path))
    # Buckets are (previous edge, edge]: n = 2 is n<=2, n = 3 is n<=4.
    assert fit.alpha(0, 2, 0.05, 1024, 0) == 0.5
    assert fit.alpha(0, 3, 0.10, 2000, 0) == 0.25
    assert fit.alpha(0, 4, 0.9, 4096, 0) == -0.125
    # Past the last edge: the last bucket (n = 300 in n<=4, KV 9000 in kvB<=4k).
    assert fit.alpha(0, 300, 0.10, 9000, 0) == 0.25
    # A rate outside [0, 1] is clipped into it.
    assert fit.alpha(0, 4, 1.5, 4096, 0) == -0.125
    # The prefill chunk matches exactly, its cached tokens by bucket.
    assert fit.alpha(128, 4, 0.10, 4096, 300) == 2.0
    assert fit.alpha(127, 4, 0.10, 4096, 300) == 0.0
    # A bucket with no fit: no correction.
    assert fit.alpha(0, 2, 0.5, 1024, 0) == 0.0


def test_the_blend_moves_from_the_mean_towards_the_max_by_alpha() -> None:
    assert SkewFit.blend_s(10.0, 20.0, 0.25) == 12.5
    assert SkewFit.blend_s(10.0, 20.0, -0.125) == 8.75  # the fit's alpha is not clipped
    assert SkewFit.blend_s(10.0, 9.0, 0.5) == 10.0  # the max no slower: the mean's time
