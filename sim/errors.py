"""The exceptions users see, each printed as one line: bad input (``ConfigError``,
naming the file, field or line) and a run that broke an invariant
(``InvariantError``, a simulator bug), and ``format_error``, the one way a pydantic
``ValidationError`` becomes such a line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports this module at start-up; pydantic loads later, where used
    from pydantic import ValidationError


class ConfigError(ValueError):
    """Bad user input (scenario, trace, artifact, CLI option).

    The CLI prints ``str(error)`` on one line and exits with status 2, so the
    message must say where the problem is (file, field or line) and what is
    wrong, without relying on a traceback.
    """


class InvariantError(RuntimeError):
    """A run broke an invariant (``name``, one of ``sim.metrics.invariants.INVARIANTS``):
    a simulator bug, not bad input. The CLI prints it on one line and exits with status 1."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"invariant {name} broken: {detail} (a simulator bug: please report it)")
        self.name, self.detail = name, detail

    def __reduce__(self) -> tuple[type[InvariantError], tuple[str, str]]:
        # Rebuilt from its two parts: a sweep's worker process sends it back pickled.
        return (InvariantError, (self.name, self.detail))


class BoolForNumber:
    """A true or false where a number is wanted, put in its place before validation
    (``sim.config.Frozen``): pydantic refuses it there, naming the field, where its lax
    mode would read 1 or 0."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return str(self.value).lower()  # as YAML writes it


# pydantic's names for the members of an untagged union (``seeds.int``,
# ``gpu_price_per_hour.dict[str,constrained-float]``, ``function-after[...]``)
# and for the model classes in one (``ModelSpec``); nothing a user wrote.
_TYPE_NAMES = frozenset({"int", "float", "str", "bool", "bytes", "list", "dict", "tuple", "set"})


def _pydantic_label(item: Any) -> bool:
    """Whether a location item is pydantic's name of a union member, not a key."""
    if not isinstance(item, str):
        return False
    return item in _TYPE_NAMES or "[" in item or "-" in item or item[:1].isupper()


def field_path(doc: Any, loc: tuple[Any, ...]) -> list[Any]:
    """The location's keys and indices as written in the file (or request body):
    without union tags like ``synthetic`` or pydantic's names of union members
    like ``int`` or ``function-after[...]``.

    pydantic puts the ``kind`` of a tagged union and the type it tried of an
    untagged one into the error location; a user (and ``--set``) knows only the
    keys they wrote. A key the document holds is always the user's.
    """
    parts: list[Any] = []
    node = doc
    for item in loc:
        held = isinstance(node, dict) and item in node
        if not held and isinstance(node, dict) and node.get("kind") == item:
            continue  # a union tag
        if not held and _pydantic_label(item):
            continue
        parts.append(item)
        if isinstance(node, dict):
            node = node.get(item)
        elif isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node):
            node = node[item]
        else:
            node = None
    return parts


def _problem(err: Any, doc: Any, prefix: str) -> str:
    """One pydantic error as ``path: what is wrong``, by the names the user wrote."""
    where = ".".join(str(part) for part in field_path(doc, tuple(err["loc"])))
    path = ".".join(part for part in (prefix, where) if part)
    msg = str(err["msg"]).removeprefix("Value error, ")
    ctx = err.get("ctx") or {}
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        # The tag is a field of its own: name it, and the kinds there are.
        key = str(ctx.get("discriminator", "kind")).strip("'\"")
        path = f"{path}.{key}" if path else key
        if err["type"] == "union_tag_not_found":
            msg = "Field required"
        else:
            msg = f"unknown {key} {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    elif isinstance(err.get("input"), BoolForNumber):
        msg = f"{msg}, not {err['input']!r}"
    elif err["type"] in ("model_type", "model_attributes_type", "dataclass_type"):
        msg = msg.split(" or instance of ")[0]  # the class's name means nothing in YAML
    return f"{path}: {msg}" if path else msg


def format_error(source: str, error: ValidationError, doc: Any = None, prefix: str = "") -> str:
    """One line naming ``source`` and the first three problems, by the paths written in ``doc``.

    ``source``: the file (or option) validated; empty when ``prefix`` says it all.
    ``prefix``: where the validated ``doc`` sits in ``source`` (``provenance``, ``gpus[2]``).
    """
    parts = [_problem(err, doc, prefix) for err in error.errors()[:3]]
    more = len(error.errors()) - 3
    tail = f" (and {more} more)" if more > 0 else ""
    return (f"{source}: " if source else "") + "; ".join(parts) + tail
