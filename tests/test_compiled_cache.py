"""The compiled loop's on-disk cache is dropped when a source it compiles in from
another file changes (numba alone keys it by the loop's own file)."""

from __future__ import annotations

from pathlib import Path

from sim.fast.compiled.loop import drop_stale_cache


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    module = tmp_path / "loop.py"
    module.write_text("# the loop\n")
    source = tmp_path / "grid.py"
    source.write_text("def corners_4d(): return 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    return module, source, cache


def test_a_changed_source_drops_the_cached_loop(tmp_path: Path) -> None:
    module, source, cache = _tree(tmp_path)
    drop_stale_cache(module, (source,))  # first call: records the sources' digest
    cached = [cache / "loop.run-900.py311.nbi", cache / "loop.run-900.py311.1.nbc"]
    other = cache / "grid.corners_4d-10.py311.nbi"  # another module's cache: kept
    for path in [*cached, other]:
        path.write_bytes(b"compiled")
    drop_stale_cache(module, (source,))  # sources unchanged: the cache stays
    assert all(path.exists() for path in cached)
    source.write_text("def corners_4d(): return 2\n")
    drop_stale_cache(module, (source,))
    assert not any(path.exists() for path in cached)
    assert other.exists()
