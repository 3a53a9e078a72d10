"""Every code reference in the docs resolves on the current tree (issue 40, item 6).

A page that cites a file, a function or a section that is gone lies to its reader
(``docs/architecture.md`` once cited ``sim/cost/run_ends.py``, which did not exist).
The pages are ``README.md`` and every Markdown file under ``docs/``; the pointers are
the docstrings and comments of ``sim/`` and ``calibration/`` that send a reader to a
page. Each form is one regular expression below, and only these forms are read:

- ``PATH_SPAN``: an inline code span whose first word starts with a repository
  folder (``sim/``, ``calibration/``, ``benchmarks/``, ``scenarios/``, ``tests/``,
  ``docs/``, ``notebooks/``) names a file or folder that exists. ``*`` must match
  something, ``{a,b}`` names each of ``a`` and ``b``, a ``<placeholder>`` is not a
  name and is skipped, and ``file.py::test_x`` needs ``def test_x`` in the file.
- ``FENCED_PATH``: the same, for a word in a fenced code block (a command line).
- ``LINK``: a Markdown link's target that is not a URL exists, read from the page's
  folder; its ``#anchor`` is a heading of the target page (GitHub's slug).
- ``DOTTED``: an inline code span ``sim.x.y`` or ``calibration.x.y`` (call
  parentheses dropped) resolves: the longest importable module prefix, then each
  further name as an attribute (a method, a pydantic or dataclass field counts).
  A setting such as ``engine.max_num_seqs`` or a CLI flag never starts with these
  prefixes, so it is never read as code.
- ``FILE_NAME``: ``sim/x.py:Name.attr`` resolves ``Name.attr`` in that module.
- ``CLASS_ATTR``: ``` `Class.attr` ``` where ``Class`` is a top-level class of
  ``sim/`` or ``calibration/`` resolves in a module that defines it (an attribute
  its methods set on ``self`` counts); the few vLLM names that share a class name
  with ours (``VLLM_NAMES``) are vLLM's and skipped.
- ``NAME_FILE``: ``` `Name` (`sim/x.py`) ``` resolves ``Name`` in that module (a name
  ending in a file extension, such as ``waterfall.png``, is a file the module writes,
  and the module's own name is the module: both are skipped).
- ``POINTER``: in ``sim/`` and ``calibration/``, ``docs/x.md`` names a page that
  exists; a quoted section right after it (``docs/x.md, "S"``, ``docs/x.md ("S",
  "T")``, with or without double backticks around the path, single or double
  quotes, wrapped over lines) is a heading of the page or a paragraph's bold lead-in
  (``**S.**``), whole or up to a colon, comma or parenthesis.
- ``CODE_PATH``: a repository file that a docstring, comment or string of ``sim/``
  or ``calibration/`` names (``tests/test_x.py``, ``sim/x.py``, ``docs/x.md``) exists.
- ``PAGE_POINTER``: the same on a page, after a link to a page or its
  ``docs/x.md`` path: ``[x.md](x.md), "S"``, ``(docs/x.md, "S")`` (double quotes).

A failure names each stale reference as ``file:LINE: <reference>``. ``calibration.*``
names need torch (``calibration/`` imports it); without torch they are skipped, said
so by the skip.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import glob
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import sim

ROOT = Path(sim.__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FOLDERS = ("sim", "calibration", "benchmarks", "scenarios", "tests", "docs", "notebooks")
_FOLDER = "|".join(FOLDERS)

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
PATH_SPAN = re.compile(rf"^(?:{_FOLDER})/\S*")
FENCED_PATH = re.compile(rf"(?<![\w/.$-])(?:{_FOLDER})/[\w./{{}},*-]*[\w/*}}]")
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOTTED = re.compile(r"^((?:sim|calibration)(?:\.\w+)+)(?:\(.*\))?$")
FILE_NAME = re.compile(r"^((?:sim|calibration)/[\w/]+\.py):([A-Za-z_][\w.]*)$")
CLASS_ATTR = re.compile(r"^([A-Z]\w*)((?:\.\w+)+)(?:\(.*\))?$")
NAME_FILE = re.compile(r"`([A-Za-z_][\w.]*)` \(`((?:sim|calibration)/[\w/]+\.py)`\)")
POINTER = re.compile(
    r"(?:``)?(docs/[\w/.-]+?\.md)(?:``)?(?:'s)?"
    r"(?P<sections>(?:,? *\(? *(?:\"[^\"]+\"|'[^']+'))(?:, *(?:\"[^\"]+\"|'[^']+'))*)?"
)
CODE_PATH = re.compile(
    rf"(?<![\w/.])(?:{_FOLDER})/[\w/.-]+\.(?:py|md|yaml|json|toml|csv|sh|ipynb)\b"
)
PAGE_POINTER = re.compile(
    r"(?:\]\((?P<link>[\w/.-]+\.md)\)|`?(?P<path>docs/[\w/.-]+\.md)`?)"
    r"(?P<sections>,? *\(? *\"[^\"]+\"(?:, *\"[^\"]+\")*)"
)
QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'")
FILE_EXTENSIONS = (".png", ".json", ".csv", ".yaml", ".md", ".html", ".txt", ".parquet")


@dataclasses.dataclass(frozen=True)
class Ref:
    """One reference: where it is written (``docs/x.md:12``) and what it says."""

    where: str
    text: str


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _page_lines(page: Path) -> Iterator[tuple[int, str, bool]]:
    """Each line of a page with its number and whether it is inside a fenced block."""
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        yield number, line, fenced


# ---------------------------------------------------------------- paths


def _expand_braces(text: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", text)
    if match is None:
        return [text]
    head, tail = text[: match.start()], text[match.end() :]
    return [out for part in match.group(1).split(",") for out in _expand_braces(head + part + tail)]


def _path_exists(text: str, base: Path = ROOT) -> bool:
    """A repository path as a page writes it exists (see the module docstring)."""
    text = text.rstrip(".,;:")
    path, _, test = text.partition("::")
    for one in _expand_braces(path):
        if "*" in one:
            if not glob.glob(str(base / one)):
                return False
        elif not (base / one).exists():
            return False
    if test:
        source = (base / path).read_text(encoding="utf-8")
        return re.search(rf"^\s*def {re.escape(test)}\(", source, re.MULTILINE) is not None
    return True


def path_refs() -> Iterator[tuple[Ref, Path]]:
    """Every repository path a page writes in code or links to, with the folder it
    is read from."""
    for page in PAGES:
        for number, line, fenced in _page_lines(page):
            where = f"{_rel(page)}:{number}"
            if fenced:
                for match in FENCED_PATH.finditer(line):
                    yield Ref(where, match.group(0)), ROOT
                continue
            for span in CODE_SPAN.findall(line):
                first = span.split()[0] if span.split() else ""
                if PATH_SPAN.match(first) and "<" not in first:
                    yield Ref(where, FILE_NAME.sub(r"\1", first)), ROOT
            for target in LINK.findall(line):
                if not re.match(r"^[a-z]+:", target) and not target.startswith("#"):
                    yield Ref(where, target), page.parent


@functools.cache
def _slugs(page: Path) -> frozenset[str]:
    """GitHub's anchors of a page's headings."""
    seen: dict[str, int] = {}
    out = set()
    for _, line, fenced in _page_lines(page):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(out)


def test_every_path_a_page_names_exists() -> None:
    stale = []
    for ref, base in path_refs():
        target, _, anchor = ref.text.partition("#")
        exists = _path_exists(target, base)
        page_anchor = bool(anchor) and target.endswith(".md")
        if not exists or (page_anchor and anchor not in _slugs(base / target)):
            stale.append(ref)
    assert not stale, "stale paths:\n" + "\n".join(f"{r.where}: {r.text}" for r in stale)


# ---------------------------------------------------------------- Python names


@functools.cache
def _torch() -> bool:
    return importlib.util.find_spec("torch") is not None


# What a field or an instance attribute resolves to: a leaf, with no attributes of
# its own to name further.
LEAF = object()


def _has(owner: object, name: str) -> object | None:
    """``owner.name``: an attribute, or of a class a pydantic, dataclass or annotated
    field (a field without a default is no class attribute) or an attribute its
    methods set on ``self``."""
    if hasattr(owner, name):
        return getattr(owner, name)  # the name read is the page's, not ours
    if not isinstance(owner, type):
        return None
    fields = getattr(owner, "model_fields", {})  # a pydantic model's, if it is one
    if name in fields or (
        dataclasses.is_dataclass(owner) and name in {f.name for f in dataclasses.fields(owner)}
    ):
        return LEAF
    own = [k for k in owner.__mro__ if k.__module__.split(".")[0] in ("sim", "calibration")]
    if any(name in vars(k).get("__annotations__", {}) for k in own):
        return LEAF
    # ``self.name = ``, ``self.name: T = `` or ``self.name, self.other = ``
    assigned = re.compile(rf"\bself\.{re.escape(name)}\b(?:\s*:[^=\n]+|\s*,[\w\s.,]*)?\s*=(?!=)")
    if any(assigned.search(inspect.getsource(k)) for k in own):
        return LEAF
    return None


class MissingDependency(Exception):
    """A module a name lives in needs a library this environment lacks (torch,
    aiohttp, ...): the name cannot be checked here, which is not a stale name."""


def resolve(dotted: str) -> bool:
    """Import the longest importable module prefix of ``dotted``, then take the rest
    as attributes. Raises ``MissingDependency`` where a third-party import fails."""
    parts = dotted.split(".")
    module: ModuleType | None = None
    rest: list[str] = []
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except ModuleNotFoundError:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] in ("sim", "calibration"):
                raise
            raise MissingDependency(f"{dotted}: {error.name} is not installed") from error
        rest = parts[cut:]
        break
    if module is None:
        return False
    owner: object = module
    for part in rest:
        found = _has(owner, part)
        if found is None:
            return False
        owner = found
    return True


# vLLM's own names that share a class name with ours: a page comparing the two
# names vLLM's (``docs/vllm-fidelity.md``), so these are not read as ours.
VLLM_NAMES = frozenset(
    {
        "BlockPool.free_blocks",
        "EngineCore.step",
        "EngineCore.step_with_batch_queue",
        "Scheduler.add_request",
    }
)


@functools.cache
def _classes() -> dict[str, list[str]]:
    """Each top-level class name of ``sim/`` and ``calibration/`` and its modules."""
    out: dict[str, list[str]] = {}
    for package in ("sim", "calibration"):
        for source in sorted((ROOT / package).rglob("*.py")):
            text = source.read_text(encoding="utf-8")
            for name in re.findall(r"^class (\w+)", text, re.MULTILINE):
                out.setdefault(name, []).append(_module_of(_rel(source)))
    return out


def _module_of(path: str) -> str:
    dotted = path.removesuffix(".py").replace("/", ".")
    return dotted.removesuffix(".__init__")


def name_refs() -> Iterator[Ref]:
    """Every Python name a page writes, as a dotted ``sim.``/``calibration.`` name."""
    for page in PAGES:
        for number, line, fenced in _page_lines(page):
            if fenced:
                continue
            where = f"{_rel(page)}:{number}"
            for span in CODE_SPAN.findall(line):
                if match := DOTTED.match(span):
                    yield Ref(where, match.group(1))
                elif match := FILE_NAME.match(span):
                    yield Ref(where, f"{_module_of(match.group(1))}.{match.group(2)}")
                elif (match := CLASS_ATTR.match(span)) and match.group(1) in _classes():
                    name = match.group(1) + match.group(2)
                    if name not in VLLM_NAMES:
                        yield Ref(where, name)
            for name, path in NAME_FILE.findall(line):
                if name.endswith(FILE_EXTENSIONS) or name.startswith(("sim.", "calibration.")):
                    continue  # a file the module writes, or a dotted name read above
                if name == Path(path).stem or not (ROOT / path).exists():
                    continue  # the module itself; a missing file is the path test's failure
                yield Ref(where, f"{_module_of(path)}.{name}")


def _candidates(ref: Ref) -> list[str]:
    """The dotted names ``ref`` may mean: itself, or ``Class.attr`` in each module
    that defines ``Class`` (``calibration/``'s only with torch)."""
    if ref.text.startswith(("sim.", "calibration.")):
        return [ref.text]
    head, rest = ref.text.split(".", 1)
    modules = [m for m in _classes()[head] if _torch() or not m.startswith("calibration.")]
    return [f"{m}.{head}.{rest}" for m in modules]


def test_every_python_name_a_page_names_resolves() -> None:
    stale, skipped = [], []
    for ref in name_refs():
        candidates = _candidates(ref)
        if not candidates or (ref.text.startswith("calibration.") and not _torch()):
            skipped.append(f"{ref.where}: {ref.text}: needs torch")
            continue
        try:
            if not any(resolve(name) for name in candidates):
                stale.append(ref)
        except MissingDependency as missing:
            skipped.append(f"{ref.where}: {missing}")
    assert not stale, "stale names:\n" + "\n".join(f"{r.where}: {r.text}" for r in stale)
    if skipped:
        pytest.skip(f"{len(skipped)} names not checked here:\n" + "\n".join(skipped))


# ---------------------------------------------------------------- code pointers to pages


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("`", "")).strip().rstrip(".:").lower()


@functools.cache
def _sections(page: Path) -> frozenset[str]:
    """A page's headings and bold paragraph lead-ins, normalised."""
    out = set()
    for _, line, fenced in _page_lines(page):
        if fenced:
            continue
        if heading := re.match(r"^#{1,6}\s+(.*)$", line):
            out.add(_normal(heading.group(1)))
        elif lead := re.match(r"^\*\*(.+?)\*\*", line):
            out.add(_normal(lead.group(1)))
    return frozenset(out)


def _names_section(page: Path, section: str) -> bool:
    wanted = _normal(section)
    return any(
        title == wanted
        or (title.startswith(wanted) and title[len(wanted) :].lstrip()[:1] in (":", "(", ","))
        for title in _sections(page)
    )


def _sources() -> Iterator[Path]:
    """The Python and TOML files of ``sim/`` and ``calibration/``."""
    for package in ("sim", "calibration"):
        for source in sorted((ROOT / package).rglob("*")):
            if source.suffix in (".py", ".toml") and "__pycache__" not in source.parts:
                yield source


def test_every_file_the_code_names_exists() -> None:
    stale = [
        f"{_rel(source)}:{number}: {match.group(0)}"
        for source in _sources()
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1)
        for match in CODE_PATH.finditer(line)
        if not (ROOT / match.group(0)).exists()
    ]
    assert not stale, "stale paths in the code:\n" + "\n".join(stale)


def _joined(lines: list[str]) -> tuple[str, list[int]]:
    """Lines joined by spaces (so that a quoted title may wrap), and where each starts."""
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    return " ".join(lines), starts


def pointer_refs() -> Iterator[tuple[Ref, str, list[str]]]:
    """Every page a docstring or comment of ``sim/`` or ``calibration/`` points to,
    with the sections it names (lines joined, a comment's ``#`` dropped)."""
    for source in _sources():
        lines = source.read_text(encoding="utf-8").splitlines()
        flat, starts = _joined([re.sub(r"^\s*#?\s*", "", line) for line in lines])
        for match in POINTER.finditer(flat):
            number = bisect.bisect_right(starts, match.start())
            sections = [a or b for a, b in QUOTED.findall(match.group("sections") or "")]
            yield Ref(f"{_rel(source)}:{number}", match.group(1)), match.group(1), sections


def test_every_page_a_docstring_points_to_exists_with_its_sections() -> None:
    stale = []
    for ref, page, sections in pointer_refs():
        if not (ROOT / page).is_file():
            stale.append(ref)
            continue
        stale += [
            Ref(ref.where, f'{page}, "{s}"') for s in sections if not _names_section(ROOT / page, s)
        ]
    assert not stale, "stale pointers:\n" + "\n".join(f"{r.where}: {r.text}" for r in stale)


def page_pointer_refs() -> Iterator[tuple[Ref, Path, list[str]]]:
    """Every page a page points to with the sections it names (lines joined, a
    fenced block's left out)."""
    for page in PAGES:
        numbered = {number: line for number, line, fenced in _page_lines(page) if not fenced}
        lines = [numbered.get(n, "") for n in range(1, max(numbered, default=0) + 1)]
        flat, starts = _joined(lines)
        for match in PAGE_POINTER.finditer(flat):
            link, path = match.group("link"), match.group("path")
            target = page.parent / link if link else ROOT / path
            sections = [a or b for a, b in QUOTED.findall(match.group("sections"))]
            number = bisect.bisect_right(starts, match.start())
            yield Ref(f"{_rel(page)}:{number}", match.group(0)), target, sections


def test_every_section_a_page_points_to_exists() -> None:
    stale = [
        ref
        for ref, target, sections in page_pointer_refs()
        if target.is_file() and not all(_names_section(target, s) for s in sections)
    ]  # a missing page is the path test's failure
    assert not stale, "stale sections:\n" + "\n".join(f"{r.where}: {r.text}" for r in stale)


# ---------------------------------------------------------------- the checks can fail


def test_the_checks_catch_what_is_gone() -> None:
    """Each check fails on a reference that does not resolve (the issue's own example)."""
    assert not _path_exists("sim/cost/run_ends.py")
    assert [m.group(0) for m in CODE_PATH.finditer("(tests/test_x.py; docs/a.md)")] == [
        "tests/test_x.py",
        "docs/a.md",
    ]
    assert _path_exists("sim/cost/{base,engine_cpu}.py")
    assert not _path_exists("sim/cost/{base,run_ends}.py")
    assert not _path_exists("scenarios/nothing_*.yaml")
    assert _path_exists("tests/test_docs_references.py::test_the_checks_catch_what_is_gone")
    assert not _path_exists("tests/test_docs_references.py::test_no_such_test")
    assert resolve("sim.config.Frozen")
    assert resolve("sim.engine.scheduler.EngineCore.schedule")
    assert not resolve("sim.config.FrozenConfig")
    assert not resolve("sim.cost.run_ends")
    assert not resolve("sim.engine.scheduler.EngineCore.no_such_method")
    assert _classes()["EngineCore"] == ["sim.engine.scheduler"]
    assert resolve("sim.engine.scheduler.EngineCore.held")  # set in __init__
    assert resolve("sim.cost.kernels.cost.KernelCost.price_tables")  # self.a, self.b = ...
    assert not resolve("sim.cost.kernels.cost.KernelCost.price")
    assert resolve("sim.serving.replica_config.FrontendConfig.way_in_s_per_request")
    assert "the-engines-cpu-work" in _slugs(ROOT / "docs" / "vllm-fidelity.md")
    assert _names_section(ROOT / "docs" / "capacity.md", "Reading the numbers")
    assert not _names_section(ROOT / "docs" / "capacity.md", "Reading the tea leaves")
    found = [
        (page, sections)
        for _, page, sections in pointer_refs()
        if page == "docs/capacity.md" and sections
    ]
    assert ("docs/capacity.md", ["Reading the numbers"]) in found
    wrapped = [
        ref.where
        for ref, _, sections in page_pointer_refs()
        if sections == ["Why not the 12.9M-parameter `tiny` model: cache residency"]
    ]
    assert "docs/validation/tiny/results.md:6" in wrapped  # the title on the next line
