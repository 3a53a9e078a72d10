"""The OpenAI API's requests and answers as vLLM's server reads and writes them.

Requests are validated here, at the edge: a wrong type or a value out of range
is one 400 naming the field (``RequestError``). Fields servesim cannot honour
with a value other than their default (``logprobs``, ``echo``, ``suffix``,
``tools``, image parts, vLLM's ``stop_token_ids`` ...) are refused with a 400
naming them, as vLLM refuses what it does not support; sampling fields are accepted (the engines
sample greedily, docs/validation.md); fields neither API knows are accepted
and named in a warning, as vLLM does (``unknown_fields``).

Errors are vLLM's body, ``{"error": {"message", "type", "param", "code"}}``,
``type`` being the exception class name the ``openai`` package raises for
the status (``BadRequestError``, ``NotFoundError``, ``InternalServerError``).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from sim.errors import field_path
from sim.serving.stream import FinishReason

ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "RequestEntityTooLarge",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def now_s() -> int:
    """``created``: Unix seconds, as every OpenAI object carries it."""
    return int(time.time())


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(BaseModel):
    error: ErrorInfo


def error_body(status: int, message: str, param: str | None = None) -> ErrorResponse:
    """vLLM's error body for HTTP ``status``."""
    kind = ERROR_TYPES.get(status, "BadRequestError" if status < 500 else "InternalServerError")
    return ErrorResponse(error=ErrorInfo(message=message, type=kind, param=param, code=status))


class RequestError(Exception):
    """A request refused with a status and a one-line message naming the field."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


# --- requests --------------------------------------------------------------------------


class _Request(BaseModel):
    # Unknown fields are kept (and named in a warning), as vLLM's OpenAIBaseModel does.
    model_config = ConfigDict(extra="allow")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: usage on every chunk (with include_usage)


Stop = str | list[str] | None
# vLLM's own fields that change what is generated (its prompt, length, text or
# cache sharing), which servesim cannot honour: refused when given a value, since
# vLLM honours them and taking them as unknown fields (a warning) would drop them
# silently. ``echo`` here is the chat API's (the completions API declares its own).
VLLM_UNHONOURED = (
    "allowed_token_ids",
    "bad_words",
    "cache_salt",
    "echo",
    "guided_choice",
    "guided_grammar",
    "guided_json",
    "guided_regex",
    "logits_processors",
    "prompt_embeds",
    "stop_token_ids",
    "structured_outputs",
    "truncate_prompt_tokens",
    "use_beam_search",
)
_NOT_GIVEN: tuple[object, ...] = (None, False, "", [], {})  # values that ask for nothing
PositiveInt = Annotated[int, Field(ge=1)]


class Sampling(_Request):
    """What both APIs share: lengths, stop strings, streaming and the ignored sampling fields."""

    model: str | None = None
    max_tokens: PositiveInt | None = None
    n: PositiveInt = 1
    stop: Stop = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # vLLM's extension
    # vLLM's extension: the request's class for priority scheduling (lower: more
    # urgent); another value than 0 is refused unless the engine schedules by it.
    priority: int = 0
    # Accepted and ignored: the engines sample greedily (docs/validation.md).
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)  # vLLM's: -1 or 0 turns it off
    min_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = Field(default=None, gt=0)
    user: str | None = None
    # Refused unless at their default (checked by ``unsupported``).
    logit_bias: dict[str, float] | None = None
    min_tokens: int = Field(default=0, ge=0)
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False  # vLLM's: the text ends with the stop string
    response_format: dict[str, Any] | None = None  # both APIs' in vLLM

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, stop: Stop) -> Stop:
        strings = [stop] if isinstance(stop, str) else stop or []
        if any(s == "" for s in strings):
            raise ValueError("a stop string must not be empty")
        return stop

    def stop_strings(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def unsupported(self) -> list[str]:
        """Fields given a value servesim cannot honour (shared part)."""
        extra = self.model_extra or {}
        refused = [name for name in VLLM_UNHONOURED if extra.get(name) not in _NOT_GIVEN]
        if self.logit_bias:
            refused.append("logit_bias")
        if self.min_tokens:
            refused.append("min_tokens")
        if not self.skip_special_tokens:
            refused.append("skip_special_tokens")
        if self.response_format and self.response_format.get("type") != "text":
            refused.append("response_format")
        if self.stream_options is not None and not self.stream:
            raise RequestError(
                "Stream options can only be defined when `stream=True`.", "stream_options"
            )
        return refused


class CompletionRequest(Sampling):
    """``POST /v1/completions``."""

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = None
    best_of: int | None = None
    prompt_logprobs: int | None = None

    def prompts(self) -> list[str | list[int]]:
        """The batch of prompts (vLLM: a list of strings or of token-id lists is a batch)."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise RequestError("prompt must not be empty", "prompt")
        if all(isinstance(t, int) for t in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]

    def unsupported(self) -> list[str]:
        refused = super().unsupported()
        # logprobs: 0 still asks for the sampled token's log-probability.
        given = ("logprobs", "suffix", "prompt_logprobs")
        values = self.model_dump(include=set(given))
        refused += [name for name in given if values[name] is not None]
        if self.echo:
            refused.append("echo")
        if self.best_of not in (None, self.n):
            refused.append("best_of")
        return refused


class ContentPart(BaseModel):
    """One part of a message's content: text, or what a text-only model cannot read
    (``image_url``, ``input_audio``, ...: refused when the prompt is made)."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _text_has_text(self) -> ContentPart:
        if self.type == "text" and self.text is None:
            raise ValueError("a text part needs a 'text' string")
        return self


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self, index: int) -> str:
        """The message's text: its string, or its text parts joined by newlines."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        texts = []
        for number, part in enumerate(self.content):
            if part.type != "text" or part.text is None:
                raise RequestError(
                    f"messages.{index}.content.{number}: part type '{part.type}' is not "
                    "supported (servesim serves text-only models)",
                    "messages",
                )
            texts.append(part.text)
        return "\n".join(texts)


def chat_prompt(messages: list[Message]) -> str:
    """servesim's chat template: the messages' texts joined by newlines."""
    return "\n".join(m.text(i) for i, m in enumerate(messages))


class ChatCompletionRequest(Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: PositiveInt | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # ignored, as vLLM does

    def wanted_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def unsupported(self) -> list[str]:
        refused = super().unsupported()
        if self.logprobs or self.top_logprobs:
            refused.append("logprobs")
        if self.tools:
            refused.append("tools")
        if self.tool_choice not in (None, "none", "auto"):
            refused.append("tool_choice")
        return refused


class TokenizeRequest(_Request):
    """``POST /tokenize``: a prompt, or chat messages (then through the chat template)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    add_special_tokens: bool = True  # the byte tokenizer adds none either way


class DetokenizeRequest(_Request):
    """``POST /detokenize``."""

    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


RequestT = TypeVar("RequestT", bound=_Request)


# What a field of several types takes, for one message instead of one per type tried.
UNION_SHAPES = {
    "prompt": "a string, a list of strings, a list of token ids or a list of token-id lists",
    "stop": "a string or a list of strings",
    "content": "a string, a list of content parts or null",
    "tool_choice": "a string or an object",
}


def parse(cls: type[RequestT], body: Any) -> RequestT:
    """``body`` as a ``cls``; ``RequestError`` naming the first bad field."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    try:
        return cls.model_validate(body)
    except ValidationError as error:
        message, param = _one_line(error, body)
        raise RequestError(message, param) from None


def _one_line(error: ValidationError, body: dict[str, Any]) -> tuple[str, str | None]:
    """The first problem, as ``field.path: what is wrong``, and the top field's name.

    A field of several types gets one error per type tried; when all are wrong
    types, the message says which types the field takes; an error past a type
    check (a missing key, a bad value) is more telling and is said instead.
    """
    errors = error.errors()
    specific = [e for e in errors if not e["type"].endswith(("_type", "_parsing"))]
    first = (specific or errors)[0]
    path = field_path(body, tuple(first["loc"]))
    where = ".".join(str(part) for part in path) or "body"
    param = str(path[0]) if path else None
    names = [part for part in path if isinstance(part, str)]
    tried_types = len(path) < len(first["loc"])
    if not specific and tried_types and names and names[-1] in UNION_SHAPES:
        return f"{where}: expected {UNION_SHAPES[names[-1]]}", param
    return f"{where}: {first['msg'].removeprefix('Value error, ')}", param


def unknown_fields(request: _Request) -> list[str]:
    """Fields of the request its API does not know (vLLM warns and ignores them)."""
    return sorted((request.model_extra or {}).keys())


# --- answers ---------------------------------------------------------------------------


class UsageInfo(BaseModel):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int

    @classmethod
    def of(cls, num_prompt_tokens: int, num_completion_tokens: int) -> UsageInfo:
        """The usage of a prompt and its completion (``total_tokens``: their sum)."""
        total = num_prompt_tokens + num_completion_tokens
        return cls(
            prompt_tokens=num_prompt_tokens,
            completion_tokens=num_completion_tokens,
            total_tokens=total,
        )


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: None = None
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None


class _Answer(BaseModel):
    """What every answer starts with, in OpenAI's order (``object``: each answer's own)."""

    id: str
    object: str
    created: int = Field(default_factory=now_s)
    model: str


class CompletionResponse(_Answer):
    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None


class ChatMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: None = None
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None


class ChatCompletionResponse(_Answer):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    usage: UsageInfo


class DeltaMessage(BaseModel):
    """What a chat chunk adds; only what it sets is sent (``{"content": "a"}``), as vLLM does."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["assistant"] | None = None
    content: str | None = None

    @model_serializer(mode="wrap")
    def _set_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class ChatStreamChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: None = None
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None


class ChatCompletionChunk(_Answer):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChatStreamChoice]
    usage: UsageInfo | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now_s)
    owned_by: str = "servesim"
    root: str
    parent: str | None = None
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeResponse(BaseModel):
    prompt: str
