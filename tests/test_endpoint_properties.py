"""Properties of the endpoint client: however a stream is cut into packets, whatever the URL.

- A server may flush an event in any number of pieces (proxies re-chunk
  streams): the client must see the same events, hence the same chunks and
  text, as from one piece per event. One fake server (``endpoint_fakes``)
  streams each example's pieces.
- ``parse_endpoint`` takes the root, ``/v1`` or a full API path, with or
  without a trailing slash, under any prefix: the request URL is always the
  root plus the API's path, and the API is the one the path names.
- ``request_body``'s extra fields are sent as given, over the defaults.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from itertools import pairwise

import aiohttp
import pytest
from endpoint_fakes import FakeServer, text_chunk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.validation.endpoint import PATHS, Outcome, parse_endpoint, request_body, stream_request


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    with FakeServer(script=[]) as fake:
        yield fake


def fetch(server: FakeServer, pieces: list[bytes]) -> Outcome:
    server.script = pieces
    body = request_body("completions", "m", "p", 4, {})

    async def go() -> Outcome:
        async with aiohttp.ClientSession() as session:
            url = server.url + "/v1/completions"
            return await stream_request(session, url, "completions", body, 30.0)

    return asyncio.run(go())


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at ``points`` (positions, any order, repeats allowed)."""
    edges = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in pairwise(edges)]


TEXTS = st.lists(st.text(alphabet="abcé xyz", min_size=1, max_size=6), min_size=1, max_size=6)


@given(texts=TEXTS, points=st.lists(st.integers(min_value=0), max_size=12))
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_an_event_cut_anywhere_is_read_whole(
    server: FakeServer, texts: list[str], points: list[int]
) -> None:
    stream = b"".join(text_chunk(t) for t in texts) + b"data: [DONE]\n\n"
    whole = fetch(server, [stream])
    pieces = fetch(server, cut(stream, points))
    for out in (whole, pieces):
        assert out.ok and out.text == "".join(texts)
        assert len(out.chunk_s) == len(texts)  # one token time per event, never per piece
    assert pieces.chunk_s == sorted(pieces.chunk_s)


def test_an_event_split_inside_a_multibyte_character_is_read_whole(server: FakeServer) -> None:
    event = text_chunk("é")  # json.dumps escapes it: send the raw UTF-8 too
    raw = event.replace(b"\\u00e9", "é".encode())
    middle = raw.index("é".encode()) + 1  # between the two bytes of é
    out = fetch(server, [raw[:middle], raw[middle:], b"data: [DONE]\n\n"])
    assert out.ok and out.text == "é" and len(out.chunk_s) == 1


ROOTS = st.sampled_from(["http://h", "http://h:8000", "https://a.b:1", "http://10.0.0.1:9"])
PREFIXES = st.sampled_from(["", "/x", "/serve/model-a"])
SUFFIXES = st.sampled_from(
    [
        ("", None),
        ("/v1", None),
        ("/v1/completions", "completions"),
        ("/v1/chat/completions", "chat"),
    ]
)


@given(root=ROOTS, prefix=PREFIXES, suffix=SUFFIXES, slash=st.booleans())
@settings(max_examples=60, deadline=None)
def test_every_spelling_of_an_endpoint_names_its_root_and_api(
    root: str, prefix: str, suffix: tuple[str, str | None], slash: bool
) -> None:
    path, named = suffix
    target = parse_endpoint(root + prefix + path + ("/" if slash else ""))
    assert target.base == root + prefix
    assert target.api == (named or "completions")
    assert target.url == root + prefix + PATHS[target.api]
    same = parse_endpoint(target.url)  # the full URL parses back to itself
    assert (same.base, same.api) == (target.base, target.api)


@given(root=ROOTS, v1=st.booleans(), api=st.sampled_from(["completions", "chat"]))
def test_the_api_option_picks_the_path_of_a_root(root: str, v1: bool, api: str) -> None:
    target = parse_endpoint(root + ("/v1" if v1 else ""), api)  # type: ignore[arg-type]
    assert (target.base, target.api) == (root, api)
    assert target.url == root + PATHS[target.api]


def test_extra_fields_are_sent_over_the_defaults() -> None:
    body = request_body("completions", "m", "p", 3, {"temperature": 0.7, "ignore_eos": True})
    assert body["temperature"] == 0.7 and body["ignore_eos"] is True
    assert body["stream"] is True and body["max_tokens"] == 3
    assert json.loads(json.dumps(body)) == body
    plain = request_body("completions", "m", "p", 3, {})
    assert plain["temperature"] == 0.0  # greedy unless told
