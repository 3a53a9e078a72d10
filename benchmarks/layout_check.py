"""Byte-identity check for refactors: run every scenario, hash its outputs.

    python benchmarks/layout_check.py --out before.json   # on the old tree
    python benchmarks/layout_check.py --compare before.json  # on the new one

Each plain scenario in ``scenarios/`` is run with ``servesim run`` (sweep
files with ``servesim sweep``, on the local executor); the SHA-256 of each
``summary.json``, ``requests.parquet`` (and a sweep's ``results.csv``) is
recorded (a sweep's ``config_hash`` column left out: it holds the
sweep's absolute folder). ``--compare`` exits 1 listing every file whose bytes changed.
A scenario that fails records its last error line, so a failure is compared too.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HASHED = ("summary.json", "requests.parquet", "results.csv")
# The servesim of the interpreter running this script (its venv), else PATH's.
_BESIDE = Path(sys.executable).parent / "servesim"
SERVESIM = str(_BESIDE) if _BESIDE.exists() else "servesim"


def _digest(path: Path) -> str:
    if path.name != "results.csv":
        return hashlib.sha256(path.read_bytes()).hexdigest()
    # A sweep's config_hash is its cache key, and it hashes the sweep's absolute
    # base_dir (relative paths in the scenario resolve there), so it differs between
    # two checkouts of the same code; every other column is hashed.
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    column = rows[0].index("config_hash") if "config_hash" in rows[0] else None
    kept = [[cell for i, cell in enumerate(row) if i != column] for row in rows]
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()


def _run(scenario: Path, out: Path) -> dict[str, str]:
    is_sweep = scenario.stem.startswith("sweep")  # sweep files are named so
    command = "sweep" if is_sweep else "run"
    # Relative to the tree, so two checkouts of the same code give the same
    # bytes and one baseline serves every worktree.
    args = [SERVESIM, command, str(scenario.relative_to(ROOT)), "--out", str(out)]
    args += ["--jobs", "1"] if is_sweep else ["--quiet"]
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return {
        str(path.relative_to(out)): _digest(path)
        for path in sorted(out.rglob("*"))
        if path.name in HASHED
    }


def collect() -> dict[str, dict[str, str]]:
    """Hashes of every scenario's outputs, by scenario file name."""
    hashes: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in sorted((ROOT / "scenarios").glob("*.yaml")):
            hashes[scenario.name] = _run(scenario, Path(tmp) / scenario.stem)
            print(f"{scenario.name}: {len(hashes[scenario.name])} files", file=sys.stderr)
    return hashes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the hashes to this JSON file")
    parser.add_argument("--compare", type=Path, help="compare with hashes written earlier")
    args = parser.parse_args()
    hashes = collect()
    if args.out:
        args.out.write_text(json.dumps(hashes, indent=1, sort_keys=True))
    if args.compare:
        before = json.loads(args.compare.read_text())
        changed = [
            f"{name}: {before.get(name)} -> {after}"
            for name, after in hashes.items()
            if before.get(name) != after
        ]
        changed += [f"{name}: missing now" for name in before if name not in hashes]
        for line in changed:
            print(line)
        print(f"{len(hashes) - len(changed)} identical, {len(changed)} changed")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
