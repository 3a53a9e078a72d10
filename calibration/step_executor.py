"""The real engine's executor: turns a step plan into one ``forward_step``.

One scheduler, two executors: ``sim.engine.scheduler.EngineCore`` and the scenario's
policy decide every step (unchanged); this module runs the decision on the
calibration model. The KV cache has one slot per running request (a slot is
taken when a request is first scheduled and given back when it finishes or is
preempted). For each scheduled ``(request, num_new)``:

- a request whose cache holds every token but the last sampled one *decodes*:
  it feeds that token (``DecodeItem``);
- any other request runs a *prefill chunk* of its next ``num_new`` tokens:
  prompt tokens, and after a recompute preemption the prompt and the tokens
  already generated (the chunk samples if it reaches the end).

Sampled ids come back in the model's order (sampling chunks, then decodes);
``run`` returns them by request id, and appends them to each request's token
list, so a recomputed request continues from exactly the tokens it emitted.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from calibration.model import DecodeItem, LlamaModel, PrefillChunk
from calibration.sampling import SamplingParams, sample
from sim.engine.request import Request
from sim.engine.scheduler import StepPlan


class StepExecutor:
    """Cache slots and token lists of the running requests, and the model."""

    def __init__(
        self,
        model: LlamaModel,
        num_slots: int,
        max_len_tokens: int,
        sampling: SamplingParams,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.cache = model.new_cache(num_slots, max_len_tokens, seed=seed + 1)
        self.sampling = sampling
        self.generator = torch.Generator(device=model.device_).manual_seed(seed)
        self._free_slots = list(range(num_slots - 1, -1, -1))
        self.slot_of: dict[int, int] = {}
        # Prompt then generated ids of every live request (kept across preemption).
        self.token_ids: dict[int, list[int]] = {}

    def add(self, request_id: int, prompt_ids: list[int]) -> None:
        """Remember a tokenized request's prompt."""
        self.token_ids[request_id] = list(prompt_ids)

    def forget(self, request_id: int) -> list[int]:
        """Drop a finished request; return its token ids (prompt + output)."""
        self.release(request_id)
        return self.token_ids.pop(request_id, [])

    def release(self, request_id: int) -> None:
        """Give back a request's slot, if it holds one (finish or preemption)."""
        slot = self.slot_of.pop(request_id, None)
        if slot is not None:
            self.cache.lengths[slot] = 0
            self._free_slots.append(slot)

    def sync_slots(self, running: Iterable[Request]) -> None:
        """Free the slots of requests that left the running set (preempted)."""
        live = {r.request_id for r in running}
        for request_id in [i for i in self.slot_of if i not in live]:
            self.release(request_id)

    def _slot(self, request: Request) -> int:
        slot = self.slot_of.get(request.request_id)
        if slot is None:
            if not self._free_slots:
                raise RuntimeError("no free KV slot: more running requests than slots")
            slot = self._free_slots.pop()
            self.slot_of[request.request_id] = slot
            self.cache.lengths[slot] = 0
        if int(self.cache.lengths[slot]) != request.num_computed_tokens:
            raise RuntimeError(
                f"request {request.request_id}: cache holds {int(self.cache.lengths[slot])} "
                f"tokens but the scheduler counts {request.num_computed_tokens}"
            )
        return slot

    def inputs(self, plan: StepPlan) -> tuple[list[PrefillChunk], list[DecodeItem], list[int]]:
        """The model's inputs for ``plan``, and the ids of the requests that sample, in order."""
        prefill: list[PrefillChunk] = []
        decode: list[DecodeItem] = []
        prefill_ids: list[int] = []
        decode_ids: list[int] = []
        for request, num_new in plan.scheduled:
            slot = self._slot(request)
            ids = self.token_ids[request.request_id]
            computed = request.num_computed_tokens
            end = computed + num_new
            samples = end == request.num_prompt_tokens + request.num_generated_tokens
            if num_new == 1 and samples and request.num_generated_tokens > 0:
                decode.append(DecodeItem(slot, ids[computed]))
                decode_ids.append(request.request_id)
            else:
                prefill.append(PrefillChunk(slot, ids[computed:end], sample=samples))
                if samples:
                    prefill_ids.append(request.request_id)
        return prefill, decode, prefill_ids + decode_ids

    def run(self, plan: StepPlan) -> dict[int, int]:
        """Run ``plan``'s step on the model; the sampled token of each request that samples."""
        prefill, decode, sampling_ids = self.inputs(plan)
        params = self.sampling
        if params.is_greedy:
            out = self.model.forward_step(self.cache, prefill, decode)
            next_ids = out.next_token_ids
        else:
            out = self.model.forward_step(self.cache, prefill, decode, return_logits=True)
            logits = out.logits if out.logits is not None else torch.empty(0, 0)
            next_ids = sample(logits, params, self.generator)
        sampled = dict(zip(sampling_ids, next_ids, strict=True))
        for request_id, token in sampled.items():
            self.token_ids[request_id].append(token)
        return sampled

    def warm_up(self, num_tokens: int = 64) -> None:
        """A prefill and a few decodes in a scratch slot (first calls allocate and dispatch)."""
        slot = self._free_slots[-1]
        num_tokens = max(1, min(num_tokens, self.cache.max_len_tokens - 3))
        ids = list(range(3, 3 + num_tokens))
        out = self.model.forward_step(self.cache, [PrefillChunk(slot, ids)])
        token = out.next_token_ids[0]
        for _ in range(3):
            step = self.model.forward_step(self.cache, decode=[DecodeItem(slot, token)])
            token = step.next_token_ids[0]
        self.cache.lengths[slot] = 0
