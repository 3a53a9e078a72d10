"""Rules that follow the domain, checked on the source (``docs/dev/house-rules.md``).

- ``sim/`` keeps its code in packages, one per layer: at most three loose modules.
- No class is split across files: no mixin that declares its host's attributes
  (bare annotations, no ``__init__``) and is subclassed in another module.
- No ``Protocol`` lists another class's private members (one that exists only to
  dodge an import cycle or to reach into a class from outside).
- The reference path (``sim/engine``, ``sim/serving``) does not mention the speed
  paths of ``sim/fast``, except at the one door.
- ``docs/architecture.md`` lists every module of ``sim/``.

The import layers themselves are ``tests/test_architecture.py``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sim", "calibration")
# Bases that declare fields with bare annotations by design (Frozen: sim.config's BaseModel).
_FIELD_BASES = {
    "BaseModel",
    "Frozen",
    "Protocol",
    "NamedTuple",
    "TypedDict",
    "Enum",
    "IntEnum",
    "StrEnum",
}


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def _base_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        target = base.value if isinstance(base, ast.Subscript) else base
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)
    return names


def _is_dataclass(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
        if name == "dataclass":
            return True
    return False


def _declares_host_attributes(node: ast.ClassDef) -> bool:
    """Bare annotations and no ``__init__``: attributes someone else sets."""
    if _is_dataclass(node) or _base_names(node) & _FIELD_BASES:
        return False
    bare = any(isinstance(s, ast.AnnAssign) and s.value is None for s in node.body)
    has_init = any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in node.body)
    return bare and not has_init


def mixins(sources: list[tuple[str, ast.Module]]) -> list[str]:
    """Classes that declare their host's attributes and are subclassed in another file."""
    declared: dict[str, str] = {}
    for path, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _declares_host_attributes(node):
                declared[node.name] = path
    found = []
    for path, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for base in _base_names(node) & set(declared):
                    if declared[base] != path:
                        found.append(f"{path}: {node.name} extends {base} ({declared[base]})")
    return found


def private_protocol_members(sources: list[tuple[str, ast.Module]]) -> list[str]:
    found = []
    for path, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and "Protocol" in _base_names(node):
                for statement in node.body:
                    name = None
                    if isinstance(statement, ast.AnnAssign) and isinstance(
                        statement.target, ast.Name
                    ):
                        name = statement.target.id
                    elif isinstance(statement, ast.FunctionDef):
                        name = statement.name
                    if name and name.startswith("_") and not name.startswith("__"):
                        found.append(f"{path}: {node.name}.{name}")
    return found


SOURCES = list(_sources())


def test_sim_keeps_at_most_three_loose_modules() -> None:
    loose = sorted(path.name for path in (ROOT / "sim").glob("*.py"))
    assert len(loose) <= 3, loose


def test_no_class_is_split_into_mixins() -> None:
    assert mixins(SOURCES) == []


def test_the_mixin_finder_finds_a_planted_mixin() -> None:
    host = ast.parse("from b import Half\nclass Core(Half):\n    def __init__(self): ...\n")
    half = ast.parse("class Half:\n    steps: int\n    def commit(self): ...\n")
    assert mixins([("a.py", host), ("b.py", half)]) == ["a.py: Core extends Half (b.py)"]
    # A dataclass or a pydantic model declares fields, not its host's attributes.
    fields = ast.parse("@dataclass\nclass Half:\n    steps: int\n")
    assert mixins([("a.py", host), ("b.py", fields)]) == []


def test_no_protocol_lists_private_members() -> None:
    assert private_protocol_members(SOURCES) == []


def test_the_protocol_check_finds_a_planted_private_member() -> None:
    tree = ast.parse("class View(Protocol):\n    _extra_s: float\n    def _admit(self): ...\n")
    assert private_protocol_members([("p.py", tree)]) == [
        "p.py: View._extra_s",
        "p.py: View._admit",
    ]


_SPEED_WORDS = re.compile(r"cohort|compiled|numba|sim\.fast|sim/fast", re.IGNORECASE)
# Where the reference path may name sim/fast: nowhere (the door is above it,
# in sim.api.build.simulation_for).
DOORS: set[str] = set()


def test_the_reference_path_does_not_mention_the_speed_paths() -> None:
    mentions = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for layer in ("sim/engine", "sim/serving")
        for path in sorted((ROOT / layer).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in DOORS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _SPEED_WORDS.search(line)
    ]
    assert mentions == []


def test_docs_architecture_lists_every_module_of_sim() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "sim").rglob("*.py"))
        if f"`{path.relative_to(ROOT)}`" not in page
    ]
    assert missing == []
