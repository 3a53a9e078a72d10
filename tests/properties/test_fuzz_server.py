"""A fuzzer of ``servesim serve``'s requests (issue 39 item 26): random bodies for the
completions and chat routes get an answer that keeps its own invariants, or a 4xx
error object naming the problem, never a 5xx.

The engine is ``ScriptedBackend`` (``tests/scripted_backend.py``): request ``i`` is
answered with exactly the ``max_tokens`` it was submitted with, so an accepted
answer's usage is known: completion tokens = what the engine was asked for, and
prompt + completion tokens <= the model's length. Budget as the scenario fuzzer
(``SERVESIM_FUZZ_EXAMPLES``, docs/dev/testing.md).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from aiohttp.test_utils import TestClient, TestServer
from hypothesis import event, given
from hypothesis import strategies as st
from scripted_backend import ScriptedBackend
from test_fuzz_scenarios import FUZZ

from sim.openai.server import make_app

MODEL = "tiny"
MAX_MODEL_LEN = 64

# Values a field may hold, from the valid to the absurd.
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63),
    st.sampled_from([-1, 0, 1, 2, 63, 64, 65]),
    st.floats(allow_nan=False),
    st.text(max_size=80),
    st.lists(st.integers(-5, 300), max_size=70),
    st.lists(st.text(max_size=5), max_size=3),
    st.just({"include_usage": True}),
)
TEXT = st.one_of(st.text(max_size=80), st.sampled_from(["", "a", "ab" * 40]))
FIELDS = [
    "model",
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "stream_options",
    "n",
    "stop",
    "ignore_eos",
    "temperature",
    "logprobs",
    "echo",
    "suffix",
    "user",
    "seed",
]


VALID = {
    "model": st.just(MODEL),
    "max_tokens": st.integers(1, 70),
    "max_completion_tokens": st.integers(1, 70),
    "stream": st.booleans(),
    "stream_options": st.one_of(st.none(), st.just({"include_usage": True})),
    "n": st.just(1),
    "stop": st.one_of(st.text(min_size=1, max_size=3), st.none()),
    "ignore_eos": st.booleans(),
    "temperature": st.floats(0.0, 2.0),
    "logprobs": st.none(),
    "echo": st.just(False),
    "suffix": st.none(),
    "user": st.text(max_size=8),
    "seed": st.integers(0, 2**31),
}


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, Any]:
    """A body for one of the two routes: mostly valid values, some absurd ones."""
    chat = draw(st.booleans())
    # Two bodies in three hold only valid values (so that answers, not only refusals,
    # are checked); the third may hold anything anywhere.
    absurd = draw(st.sampled_from([False, False, True]))
    body: dict[str, Any] = {}
    if chat:
        role = st.sampled_from(["user", "system", "assistant", "tool", "nobody"])
        message = st.fixed_dictionaries({"role": role, "content": TEXT})
        messages = st.lists(message, min_size=1, max_size=4)
        body["messages"] = draw(st.one_of(messages, ANY_VALUE) if absurd else messages)
    else:
        prompt = st.one_of(TEXT, st.lists(TEXT, min_size=1, max_size=3))
        body["prompt"] = draw(st.one_of(prompt, ANY_VALUE) if absurd else prompt)
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True)):
        valid = VALID[name]
        body[name] = draw(st.one_of(valid, ANY_VALUE) if absurd else valid)
    path = "/v1/chat/completions" if chat else "/v1/completions"
    whole = draw(st.sampled_from(["object"] * 9 + ["anything"]))  # 1 in 10: not an object
    return path, body if whole == "object" else draw(ANY_VALUE)


def _post(engine: ScriptedBackend, path: str, body: Any) -> tuple[int, str]:
    async def go() -> tuple[int, str]:
        async with TestClient(TestServer(make_app(engine, MODEL))) as client:
            response = await client.post(path, data=json.dumps(body))
            return response.status, await response.text()

    return asyncio.run(go())


@FUZZ
@given(request=bodies())
def test_every_request_gets_a_consistent_answer_or_a_4xx(request: tuple[str, Any]) -> None:
    path, body = request
    engine = ScriptedBackend(max_model_len_tokens=MAX_MODEL_LEN)
    status, raw = _post(engine, path, body)
    assert status < 500, raw
    event(
        f"status {status}"
        + (" " + json.loads(raw)["error"]["message"][:50] if status >= 400 else "")
    )
    if status >= 400:
        error = json.loads(raw)["error"]
        assert error["code"] == status and error["message"], error
        assert engine.submitted == []  # a refused request reaches no engine
        return
    assert status == 200
    if raw.startswith("data: "):  # a stream: its chunks, then [DONE]
        assert raw.rstrip().endswith("data: [DONE]")
        return
    answer = json.loads(raw)
    usage = answer["usage"]
    asked = sum(max_tokens for _, max_tokens, _ in engine.submitted)
    assert usage["completion_tokens"] == asked  # tokens out = tokens asked
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    for prompt, max_tokens, _ in engine.submitted:
        assert max_tokens >= 1 and len(prompt) + max_tokens <= MAX_MODEL_LEN
