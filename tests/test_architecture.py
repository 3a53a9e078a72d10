"""The layers' import rules, checked on the source (``docs/architecture.md``).

Every ``import`` statement in ``sim/`` and ``calibration/`` counts: at module
level, inside functions, and under ``if TYPE_CHECKING`` (a type-only import
still says which module knows about which). The rules:

- no import cycle anywhere;
- ``sim.engine`` imports neither SimPy nor ``serving``, ``metrics``,
  ``planning``, ``validation`` or the faces;
- ``sim.hardware`` imports nothing of ``sim`` but itself, ``sim.errors`` and ``sim.config``;
- ``sim.cost`` imports nothing of ``sim`` but itself, ``sim.hardware``, ``sim.errors`` and
  ``sim.config``;
- ``sim.workload`` imports neither ``engine`` nor ``serving``;
- ``sim.serving`` stays below ``metrics``, ``planning``, ``validation`` and the faces;
- ``planning`` and ``validation`` reach the simulator through ``sim.api``,
  never ``sim.engine`` or ``sim.serving`` directly;
- policies see the core through ``CoreView``, never ``EngineCore``; the scheduler
  (``EngineCore`` and continuous batching, ``sim.engine.scheduler``) imports no
  feature (speculative decoding) and no other policy;
- ``sim.lab`` (``servesim lab``'s page) is a face on top: nothing imports it (the
  command line registers its command by name), and it reaches the simulator only
  through the public faces (``sim.api``, ``sim.scenario``, ``sim.planning``,
  ``sim.metrics``), never ``engine``, ``serving``, ``fast`` or ``cost``;
- ``sim.openai`` (``servesim serve``'s HTTP face) sees an engine only through
  ``sim.serving.stream``, and imports no other layer but ``sim.scenario`` and
  ``sim.errors``;
- the reference modules (``sim.engine``, ``sim.serving``, ``sim.cost``,
  ``sim.hardware``) never import the speed paths (``sim.fast``); the one door to
  them is above, in the face that builds a run (``sim.api.build.simulation_for``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sim", "calibration")
FACES = (
    "sim.api",
    "sim.api.build",
    "sim.api.result",
    "sim.cli",
    "sim.cli.figures",
    "sim.lab",
    "sim.openai",
    "sim.scenario",
    "sim.scenario.overrides",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


MODULES = _modules()


def _resolve(importer: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer.split(".") if path.name == "__init__.py" else importer.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str) -> set[str]:
    """Every module ``name`` imports (``import x`` and ``from x import y``), anywhere in it."""
    path = MODULES[name]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(name, path, node)
            for alias in node.names:
                full = f"{module}.{alias.name}"
                found.add(full if full in MODULES else module)
    return found


def internal_imports(name: str) -> set[str]:
    """The modules of this project that ``name`` imports."""
    return {m for m in imports_of(name) if m in MODULES and m != name}


def graph() -> dict[str, set[str]]:
    return {name: internal_imports(name) for name in MODULES}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _in(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _layer(prefix: str) -> Iterator[str]:
    return (name for name in MODULES if _in(name, prefix))


def _violations(prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{name} imports {target}"
        for name in _layer(prefix)
        for target in sorted(imports_of(name))
        if _in(target, *forbidden)
    ]


def test_there_are_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_walk_sees_type_only_and_function_level_imports() -> None:
    # The lifecycle recorder imports pandas for types only, and the sweep
    # executor imports sim.api inside a function.
    assert "pandas" in imports_of("sim.engine.lifecycle")
    assert "sim.api" in internal_imports("sim.planning.sweep_exec")


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        (
            "sim.engine",
            ("simpy", "sim.serving", "sim.metrics", "sim.planning", "sim.validation", *FACES),
        ),
        (
            "sim.hardware",
            ("sim.cost", "sim.engine", "sim.serving", "sim.workload", "sim.metrics", *FACES),
        ),
        ("sim.cost", ("sim.engine", "sim.serving", "sim.workload", "sim.metrics", *FACES)),
        ("sim.workload", ("sim.engine", "sim.serving", "sim.metrics", *FACES)),
        ("sim.serving", ("sim.metrics", "sim.planning", "sim.validation", *FACES)),
        ("sim.fast", ("sim.metrics", "sim.planning", "sim.validation", *FACES)),
        ("sim.metrics", ("sim.planning", "sim.validation", *FACES)),
        ("sim.planning", ("sim.engine", "sim.serving", "sim.validation", "sim.cli")),
        ("sim.validation", ("sim.engine", "sim.serving", "sim.planning", "sim.cli")),
    ],
)
def test_layers_import_only_downwards(layer: str, forbidden: tuple[str, ...]) -> None:
    assert list(_layer(layer)), f"no modules in {layer}"
    assert _violations(layer, forbidden) == []


def test_hardware_imports_only_itself_errors_and_config() -> None:
    outside = [
        f"{name} imports {target}"
        for name in _layer("sim.hardware")
        for target in internal_imports(name)
        if not _in(target, "sim.hardware", "sim.errors", "sim.config")
    ]
    assert outside == []


def test_cost_imports_only_itself_hardware_errors_and_config() -> None:
    outside = [
        f"{name} imports {target}"
        for name in _layer("sim.cost")
        for target in internal_imports(name)
        if not _in(target, "sim.cost", "sim.hardware", "sim.errors", "sim.config")
    ]
    assert outside == []


def _names_imported(name: str) -> set[str]:
    """The names ``name`` takes with ``from x import y``, anywhere in it."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), str(path))
    return {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def test_policies_see_the_core_only_through_its_protocol() -> None:
    # The core and continuous batching share sim.engine.scheduler; a policy may
    # subclass ``Continuous`` but sees the core only as a ``CoreView``.
    assert [m for m in _layer("sim.engine.policies") if "EngineCore" in _names_imported(m)] == []


def test_the_scheduler_imports_no_feature_and_no_other_policy() -> None:
    imported = internal_imports("sim.engine.scheduler")
    assert not {m for m in imported if _in(m, "sim.engine.speculative", "sim.engine.policies")}


@pytest.mark.parametrize("layer", ["sim.engine", "sim.serving", "sim.cost", "sim.hardware"])
def test_the_reference_never_imports_the_speed_paths(layer: str) -> None:
    assert _violations(layer, ("sim.fast",)) == []


def test_the_speed_paths_are_chosen_in_one_place_above_the_reference() -> None:
    # Besides sim.fast itself: the run's builder, and the CLI's figures (which
    # ask sim.fast.forks whether worker processes can fork, to say so).
    doors = {
        name
        for name in MODULES
        if not _in(name, "sim.fast") and any(_in(t, "sim.fast") for t in imports_of(name))
    }
    assert doors == {"sim.api.build", "sim.cli.figures"}
    assert {t for t in imports_of("sim.api.build") if _in(t, "sim.fast")} == {"sim.fast.open_loop"}


def test_the_lab_is_a_face_on_top_that_calls_only_public_entry_points() -> None:
    assert list(_layer("sim.lab"))
    assert _violations("sim.lab", ("sim.engine", "sim.serving", "sim.fast", "sim.cost")) == []
    importers = [
        f"{name} imports {target}"
        for name in MODULES
        if not _in(name, "sim.lab")
        for target in internal_imports(name)
        if _in(target, "sim.lab")
    ]
    assert importers == []


def test_only_calibration_imports_torch() -> None:
    assert _violations("sim", ("torch",)) == []


def test_the_http_face_sees_engines_only_through_the_stream_interface() -> None:
    allowed = ("sim.openai", "sim.serving.stream", "sim.scenario", "sim.errors")
    outside = [
        f"{name} imports {target}"
        for name in _layer("sim.openai")
        for target in internal_imports(name)
        if target != "sim" and not _in(target, *allowed)  # "sim": its __version__
    ]
    assert list(_layer("sim.openai")) and outside == []
