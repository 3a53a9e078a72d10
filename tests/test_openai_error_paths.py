"""A refused request's message names the field by the keys the client wrote.

``sim.openai.protocol`` turns a pydantic error into one line through
``sim.errors.field_path``, the same rule the scenario files use: a key the body
holds is the client's, and pydantic's names of union members it tried (``str``,
``list[int]``, ``list[ContentPart]``) are not.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.openai.protocol import ChatCompletionRequest, CompletionRequest, RequestError, parse


def refusal(
    cls: type[CompletionRequest | ChatCompletionRequest], body: dict[str, Any]
) -> RequestError:
    with pytest.raises(RequestError) as caught:
        parse(cls, body)
    return caught.value


def test_a_token_id_key_of_logit_bias_is_named() -> None:
    # logit_bias maps token ids (written as strings of digits, "50256") to biases:
    # the bad value sits under that key, so the path is logit_bias.50256. A digit
    # string is no identifier, which is why a rule by identifiers dropped it.
    error = refusal(CompletionRequest, {"prompt": "a", "logit_bias": {"50256": "x"}})
    assert str(error).startswith("logit_bias.50256: Input should be a valid number")
    assert error.param == "logit_bias"


def test_union_member_names_stay_out_of_the_path() -> None:
    # content is str | list[ContentPart] | None: pydantic's location of the missing
    # "type" is messages.0.content.list[ContentPart].0.type; the client wrote no
    # "list[ContentPart]" key.
    body = {"messages": [{"role": "user", "content": [{"text": "a"}]}]}
    error = refusal(ChatCompletionRequest, body)
    assert str(error) == "messages.0.content.0.type: Field required"
    assert error.param == "messages"
