"""One representation per concept (issue 40 item 5): counted over ``sim/`` and
``calibration/`` by their syntax trees, so a new copy fails here, not in review.

- ``getattr``: a setting given to a constructor is read as a typed attribute; what
  is left is dynamic by nature (a plugin's function, an argparse option that a
  caller may add, torch's dtype by name, a wrapper's inner cost model, a bulk
  pricing method only some cost models have), each with a comment saying so.
- Imports inside functions: only what is heavy and optional, or a module of ours
  that brings one with it (the list below), each module saying why once; the
  rest at the top, where the import graph shows it (tests/test_architecture.py).
- One model description class, ``ModelSpec``.
- numpy columns inside, a DataFrame built once at the result: no signature takes
  a frame or a table (``DataFrame | RequestTable``, ``DataFrame | StepTable``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import sim

# The tree whose sim is imported (run from /work/wt/_base, the base checkout).
ROOT = Path(sim.__file__).resolve().parents[1]
PACKAGES = ("sim", "calibration")
MAX_GETATTR = 15  # issue 40's "Done when"; 62 on main before this change
MAX_FUNCTION_IMPORTS = 50  # issue 40's "Done when"; 167 on main before this change
# Heavy or optional libraries a module may import where it needs them (pandas:
# docs/dev/speed.md; the rest are optional extras or cost ~0.2 s and more).
HEAVY = {"torch", "matplotlib", "numba", "aiohttp", "scipy", "plotly", "pyarrow", "pandas", "ray"}
# Modules of ours whose loading is itself the cost: the compiled loop (numba); the
# simulator as servesim run loads it, after its figure process forks (sim.cli.run);
# and the one sim.cli imports at start-up (sim.cli.figures: nothing heavy before a
# command runs, tests/test_cli_startup.py); the kernel tables' code, which a
# scenario's validation never needs (tests/test_cost_imports.py).
LAZY_OWN = {"sim.fast.compiled", "sim.cli.simulate", "sim.cost.kernels.cost"}
START_UP = {"sim/cli/figures.py"}


def _trees() -> list[tuple[Path, ast.Module]]:
    return [
        (path, ast.parse(path.read_text(encoding="utf-8")))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    ]


def _getattr_calls() -> list[tuple[Path, int]]:
    return [
        (path, node.lineno)
        for path, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
    ]


def test_getattr_is_rare() -> None:
    calls = _getattr_calls()
    assert len(calls) <= MAX_GETATTR, calls


def test_each_getattr_says_why() -> None:
    """Each remaining getattr has a comment on its line or the line or two above."""
    unexplained = []
    for path, line in _getattr_calls():
        lines = path.read_text(encoding="utf-8").splitlines()
        near = lines[max(0, line - 3) : line]
        if not any("#" in text for text in near):
            unexplained.append(f"{path.relative_to(ROOT)}:{line}")
    assert not unexplained, unexplained


def _classes_declaring(field: str) -> list[str]:
    """Classes (``path:Name``) whose body declares ``field: ...`` (a model's field)."""
    return [
        f"{path.relative_to(ROOT)}:{node.name}"
        for path, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(
            isinstance(item, ast.AnnAssign)
            and isinstance(item.target, ast.Name)
            and item.target.id == field
            for item in node.body
        )
    ]


def test_one_model_description_class() -> None:
    """A transformer's shape is described once: ``ModelSpec`` (memory sizing, the
    roofline and the kernel tables read it; ModelArchitecture repeated its fields)."""
    for field in ("num_layers", "num_attention_heads", "intermediate_size"):
        assert _classes_declaring(field) == ["sim/hardware/specs.py:ModelSpec"], field


def _mixed_signatures() -> list[str]:
    """Parameters and returns (``path:line name``) annotated with a DataFrame or a table."""
    found = []
    for path, tree in _trees():
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = function.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            annotations = [(a.arg, a.annotation) for a in every if a is not None]
            annotations.append(("return", function.returns))
            for name, annotation in annotations:
                if annotation is None:
                    continue
                names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)}
                if "DataFrame" in names and names & {"RequestTable", "StepTable"}:
                    where = f"{path.relative_to(ROOT)}:{annotation.lineno}"
                    found.append(f"{where} {function.name}({name})")
    return found


def test_no_signature_takes_a_frame_or_a_table() -> None:
    """A run's requests and steps are numpy columns (``RequestTable``, ``StepTable``)
    inside; a frame from outside becomes one at its edge (``from_frame``), so no
    function reads both (issue 40 item 5)."""
    assert not _mixed_signatures()


def _function_imports() -> list[tuple[Path, ast.Import | ast.ImportFrom]]:
    found = []
    for path, tree in _trees():
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [
                    (path, node)
                    for node in ast.walk(function)
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                ]
    return found


def _module_of(node: ast.Import | ast.ImportFrom) -> str:
    if isinstance(node, ast.ImportFrom):
        return node.module or ""
    return node.names[0].name


def _top_imports(module: str) -> set[str]:
    """What ``module`` (of ours) imports at its top level, parents included."""
    base = ROOT.joinpath(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    if not path.is_file():
        return set()
    names = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _brings_heavy(module: str, seen: set[str]) -> bool:
    """Whether importing ``module`` loads a HEAVY library or a LAZY_OWN module."""
    if module in seen:
        return False
    seen.add(module)
    if any(module == own or module.startswith(own + ".") for own in LAZY_OWN):
        return True
    for name in _top_imports(module):
        root = name.split(".")[0]
        if root in HEAVY:
            return True
        if root in PACKAGES and _brings_heavy(name, seen):
            return True
    return False


def test_imports_inside_functions_are_few() -> None:
    assert len(_function_imports()) <= MAX_FUNCTION_IMPORTS


def test_imports_inside_functions_are_heavy_or_optional() -> None:
    light = []
    for path, node in _function_imports():
        module = _module_of(node)
        where = path.relative_to(ROOT).as_posix()
        root = module.split(".")[0]
        optional = root == "calibration" and where.startswith("sim/")  # a sim-only install
        if root in HEAVY or optional or where in START_UP or _brings_heavy(module, set()):
            continue
        light.append(f"{where}:{node.lineno} {module}")
    assert not light, light


def test_each_module_says_why_it_imports_late() -> None:
    """One comment per module (or per import) on or just above a late import."""
    silent = set()
    said = set()
    for path, node in _function_imports():
        lines = path.read_text(encoding="utf-8").splitlines()
        if any("#" in text for text in lines[max(0, node.lineno - 3) : node.end_lineno]):
            said.add(path)
        else:
            silent.add(path)
    assert not [str(path.relative_to(ROOT)) for path in silent - said]
