"""One name per setting, one representation (issue 40, item 5), checked on the source.

- No frozen model is written after construction: no ``object.__setattr__`` in
  ``sim/`` or ``calibration/`` (a validator that fills in defaults returns a new value).
- vLLM's ``max_num_batched_tokens`` goes by that one name in code: no identifier
  names the step's token budget otherwise (``batched_tokens_limit``,
  ``batched_tokens``, ``max_batched``, ``MAX_BATCHED_TOKENS`` ...); its upper-case
  spelling for a constant is the same name.
- vLLM's async scheduling is ``async_scheduling`` everywhere it is the setting
  (no ``pipelined``, ``overlapped``, ``ASYNC``).

Each rule has a planted case, so a finder that finds nothing cannot pass for a rule kept.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Iterator
from pathlib import Path

from sim.engine.policies import (
    ContinuousConfig,
    DynamicConfig,
    OrcaConfig,
    PrefillFirstConfig,
    PriorityConfig,
    StaticConfig,
)
from sim.engine.policies.vllm_defaults import batch_defaults
from sim.scenario import Scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sim", "calibration")


def _code_tokens(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, kind, text) of each token that is code: names and operators, no comments
    or strings (a docstring may quote vLLM's own names)."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.NAME, tokenize.OP):
            yield token.start[0], tokenize.tok_name[token.type], token.string


def _sources() -> Iterator[tuple[str, str]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT)), path.read_text()


def setattr_bypasses(path: str, source: str) -> list[str]:
    """``object.__setattr__`` calls: a frozen model written after construction."""
    tokens = list(_code_tokens(source))
    texts = [text for _, _, text in tokens]
    return [
        f"{path}:{tokens[i][0]}"
        for i in range(len(texts) - 2)
        if texts[i : i + 3] == ["object", ".", "__setattr__"]
    ]


def test_no_frozen_model_is_written_after_construction() -> None:
    found = [hit for path, source in _sources() for hit in setattr_bypasses(path, source)]
    assert found == [], "fill defaults in a validator that returns a new value: " + str(found)


def test_the_setattr_finder_finds_a_planted_bypass() -> None:
    planted = 'x = 1  # object.__setattr__ in a comment is fine\nobject.__setattr__(self, "a", 1)\n'
    assert setattr_bypasses("planted.py", planted) == ["planted.py:2"]


# The setting's one name; any other identifier with "batched" in it is a second name.
_BUDGET_NAME = "max_num_batched_tokens"


def other_budget_names(path: str, source: str) -> list[str]:
    """Identifiers (not comments or strings) that name the batched-token budget otherwise."""
    return [
        f"{path}:{line}: {text}"
        for line, kind, text in _code_tokens(source)
        if kind == "NAME" and "batched" in text.lower() and text.lower() != _BUDGET_NAME
    ]


def test_max_num_batched_tokens_has_one_name() -> None:
    found = [hit for path, source in _sources() for hit in other_budget_names(path, source)]
    assert found == [], f"call it {_BUDGET_NAME}: " + str(found)


def test_the_name_finder_finds_planted_second_names() -> None:
    planted = (
        '"""vLLM\'s _set_default_max_num_seqs_and_batched_tokens_args, quoted."""\n'
        "max_num_batched_tokens = MAX_NUM_BATCHED_TOKENS  # batched_tokens in a comment\n"
        "seqs, batched_tokens = limits\n"
        "x = config.batched_tokens_limit\n"
    )
    assert other_budget_names("planted.py", planted) == [
        "planted.py:3: batched_tokens",
        "planted.py:4: batched_tokens_limit",
    ]


# Names async scheduling went by before it had one (``non_overlapped_s``, the CPU work
# no mode overlaps, is another concept and keeps its name).
_ASYNC_ALIASES = {"pipelined", "overlapped", "_overlapped", "async_", "ASYNC", "plan_ahead"}


def other_async_names(path: str, source: str) -> list[str]:
    """Identifiers that name async scheduling otherwise than ``async_scheduling``."""
    return [
        f"{path}:{line}: {text}"
        for line, kind, text in _code_tokens(source)
        if kind == "NAME" and text in _ASYNC_ALIASES
    ]


def test_async_scheduling_has_one_name() -> None:
    found = [hit for path, source in _sources() for hit in other_async_names(path, source)]
    assert found == [], "call it async_scheduling: " + str(found)


def test_the_async_finder_finds_planted_second_names() -> None:
    planted = (
        'label = "overlapped"  # pipelined, in a comment\n'
        "self.pipelined = core.async_scheduling\n"
        "x = settings[ASYNC] + cpu.non_overlapped_s\n"
    )
    assert other_async_names("planted.py", planted) == [
        "planted.py:2: pipelined",
        "planted.py:3: ASYNC",
    ]


def test_a_policy_built_without_a_scenario_takes_vllms_small_gpu_api_defaults() -> None:
    """The fallback is vLLM's own default for a GPU under 70 GiB serving the OpenAI API,
    written once: the table's entry for an L4 (24 GiB) and a policy's unfilled limits agree."""
    l4 = batch_defaults("l4", 24 * 2**30, 1, "openai_api_server", 1 << 20, True, None, None)
    policy = ContinuousConfig()
    assert policy.limits == l4
    assert policy.step_seq_bound() == l4.max_num_seqs
    assert policy.step_token_bound(1 << 20) == l4.max_num_batched_tokens


def test_every_policy_says_how_many_sequences_a_step_holds() -> None:
    """``step_seq_bound``: the one question ``max_num_seqs`` and ``max_batch_size`` answer."""
    assert StaticConfig(max_batch_size=3).step_seq_bound() == 3
    assert DynamicConfig(max_batch_size=5).step_seq_bound() == 5
    assert OrcaConfig(max_num_seqs=7).step_seq_bound() == 7
    assert PrefillFirstConfig(max_num_seqs=9).step_seq_bound() == 9
    assert ContinuousConfig(max_num_seqs=11).step_seq_bound() == 11
    assert PriorityConfig(max_num_seqs=13).step_seq_bound() == 13


def test_filled_in_limits_are_values_not_settings_the_document_made() -> None:
    """The wrap validator fills the scheduler's limits as a new value: the filled scenario
    has them (vLLM's H100 API-server defaults: 8192 tokens, 1024 sequences, as
    ``EngineArgs.get_batch_defaults`` for a GPU of 70 GiB or more), the document's set
    fields stay its own (an override re-validates what was written, not the H100's
    limits), and validating the result again changes nothing."""
    doc = {
        "hardware": "h100",
        "workload": {
            "kind": "synthetic",
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate_per_s": 1},
            "prompt_tokens": {"kind": "fixed", "tokens": 16},
            "output_tokens": {"kind": "fixed", "tokens": 4},
        },
    }
    scenario = scenario_from_dict(doc)
    assert isinstance(scenario.scheduler, ContinuousConfig)
    assert scenario.scheduler.limits.max_num_batched_tokens == 8192
    assert scenario.scheduler.limits.max_num_seqs == 1024
    assert "scheduler" not in scenario.model_fields_set
    assert Scenario.model_validate(scenario.model_dump()) == scenario
