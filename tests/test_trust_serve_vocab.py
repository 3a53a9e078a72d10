"""``servesim serve`` refuses a prompt of token ids outside the model's vocabulary.

vLLM answers 400 ``Token id N is out of vocabulary``; servesim says the same and
the vocabulary's size. The vocabulary is the scenario's model's
(``model.vocab_size``: Llama-3's 128256 ids, 0 to 128255), wired by the command
(``sim.cli.serve.app_for``); the server runs over the simulated engine.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

aiohttp_test = pytest.importorskip("aiohttp.test_utils")
pytest.importorskip("prometheus_client")

from sim.api import engine_for  # noqa: E402
from sim.cli.serve import app_for  # noqa: E402
from sim.errors import ConfigError  # noqa: E402
from sim.openai.tokenizer import ByteTokenizer  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402
from sim.serving.realtime import SimulatedEngine  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "llama70b_tp.yaml"
LLAMA_3_VOCAB = 128256  # Llama-3's tokenizer and embedding table (its config.json)


@pytest.fixture(scope="module")
def engine() -> Iterator[SimulatedEngine]:
    simulated = SimulatedEngine(engine_for(load_scenario(SCENARIO)))
    simulated.start()
    yield simulated
    simulated.stop()


def post_all(engine: SimulatedEngine, bodies: list[dict[str, Any]]) -> list[tuple[int, Any]]:
    app = app_for(engine, load_scenario(SCENARIO))

    async def go() -> list[tuple[int, Any]]:
        async with aiohttp_test.TestClient(aiohttp_test.TestServer(app)) as client:
            answers = []
            for body in bodies:
                response = await client.post("/v1/completions", json=body)
                answers.append((response.status, json.loads(await response.text())))
            return answers

    return asyncio.run(go())


def test_the_scenario_sets_the_vocabulary() -> None:
    assert load_scenario(SCENARIO).model.vocab_size == LLAMA_3_VOCAB


@pytest.mark.parametrize(
    ("prompt", "bad"),
    [
        ([LLAMA_3_VOCAB], LLAMA_3_VOCAB),  # one past the last id
        ([65, 66, 10**9], 10**9),
        ([65, -1, 66], -1),  # negative: no id at all
        ([[65, 66], [67, LLAMA_3_VOCAB + 5]], LLAMA_3_VOCAB + 5),  # in a batch's second prompt
    ],
)
def test_an_id_outside_the_vocabulary_is_a_400_naming_it_and_the_size(
    engine: SimulatedEngine, prompt: list[Any], bad: int
) -> None:
    ((status, body),) = post_all(engine, [{"prompt": prompt, "max_tokens": 2}])
    assert status == 400
    assert body["error"]["type"] == "BadRequestError" and body["error"]["param"] == "prompt"
    assert body["error"]["message"] == (
        f"Token id {bad} is out of vocabulary (the model's vocabulary has {LLAMA_3_VOCAB} "
        f"ids, 0 to {LLAMA_3_VOCAB - 1})"
    )
    assert "\n" not in body["error"]["message"]


def test_ids_inside_the_vocabulary_are_served(engine: SimulatedEngine) -> None:
    # The first and last ids and one past the byte range: all the model's.
    before = engine._mail.num_ids
    ((status, body),) = post_all(engine, [{"prompt": [0, 300, LLAMA_3_VOCAB - 1], "max_tokens": 2}])
    assert status == 200, body
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert engine._mail.num_ids == before + 1


def test_a_vocabulary_smaller_than_the_bytes_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^model.vocab_size 100: servesim serve's byte"):
        ByteTokenizer(100)
