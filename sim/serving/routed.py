"""Several online engines behind one server, a request routed to one of them.

``servesim serve --simulate`` with a ``cluster:``: N ``SimulatedEngine``s, each
its own thread, behind the offline pool's router reading the same loads. One
difference: a request is routed when the server takes it (as a gateway does),
not when its way in ends (as vLLM's data-parallel frontend), so with no way in
a client sees the cluster the offline simulator predicts, request for request.
``prefix_affinity`` groups requests by their first full KV block's tokens.
``central_queue``, ``lockstep`` and disaggregation are not served here.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from sim.serving.realtime import SimulatedEngine, block_hashes
from sim.serving.router import ReplicaLoad, Router
from sim.serving.stream import Emitted, EngineLoad, Sink, Submission


class RoutedEngines:
    """An ``OnlineBackend`` over several simulated replicas and a router."""

    def __init__(
        self, engines: Sequence[SimulatedEngine], router: Router, block_size_tokens: int
    ) -> None:
        if not engines:
            raise ValueError("RoutedEngines needs at least one engine")
        self.engines = list(engines)
        self.router = router
        self.max_model_len_tokens = self.engines[0].max_model_len_tokens
        self._block_size_tokens = block_size_tokens
        self.loads = [ReplicaLoad() for _ in self.engines]
        # Server id -> (replica, the replica's own id (None until submitted), tokens).
        self._routes: dict[int, tuple[int, int | None, int]] = {}
        self._next_id = 0
        self._lock = threading.Lock()  # the loads and routes: server and engine threads

    @property
    def error(self) -> BaseException | None:
        return next((e.error for e in self.engines if e.error is not None), None)

    def start(self) -> None:
        for engine in self.engines:
            engine.start()

    def stop(self) -> None:
        for engine in self.engines:
            engine.stop()

    def submit(self, submission: Submission) -> int:
        """Route the request, count it in its replica's load, submit it there."""
        prompt_ids = submission.prompt_ids
        num_tokens = len(prompt_ids) + submission.max_tokens
        with self._lock:
            request_id = self._next_id
            self._next_id += 1
            # What the router reads of a request: its lengths and prefix group.
            head = block_hashes(prompt_ids[: self._block_size_tokens], self._block_size_tokens)
            seen = submission.request(request_id, 0.0)
            seen.prefix_group = head[0] if head else None
            index = self.router.choose(seen, self.loads)
            load = self.loads[index]
            load.num_requests += 1
            load.num_tokens += num_tokens
            # Registered before the engine can emit (it may finish at once).
            self._routes[request_id] = (index, None, num_tokens)
            relayed = replace(submission, sink=self._sink(request_id, submission.sink))
            local = self.engines[index].submit(relayed)
            if request_id in self._routes:  # still routed (not refused at once)
                self._routes[request_id] = (index, local, num_tokens)
        return request_id

    def _sink(self, request_id: int, sink: Sink) -> Sink:
        def relay(event: Emitted) -> None:
            if event.finish_reason is not None:
                self._leave(request_id)
            sink(event)

        return relay

    def _leave(self, request_id: int) -> None:
        """Take a request off its replica's load (finished or aborted); once."""
        with self._lock:
            route = self._routes.pop(request_id, None)
            if route is not None:
                index, _, num_tokens = route
                load = self.loads[index]
                load.num_requests -= 1
                load.num_tokens -= num_tokens

    def abort(self, request_id: int) -> None:
        """Abort on its replica (no event follows, as from one engine)."""
        with self._lock:
            route = self._routes.get(request_id)
        if route is None:
            return  # finished, aborted or unknown
        index, local, _ = route
        self._leave(request_id)
        if local is not None:
            self.engines[index].abort(local)

    def load(self) -> EngineLoad:
        """The replicas' queues summed, KV usage averaged, the largest lag."""
        loads = [engine.load() for engine in self.engines]
        lags = [x.simulation_lag_s for x in loads if x.simulation_lag_s is not None]
        return EngineLoad(
            num_running=sum(x.num_running for x in loads),
            num_waiting=sum(x.num_waiting for x in loads),
            kv_cache_usage=sum(x.kv_cache_usage for x in loads) / len(loads),
            block_size_tokens=loads[0].block_size_tokens,
            num_gpu_blocks=loads[0].num_gpu_blocks,
            enable_prefix_caching=loads[0].enable_prefix_caching,
            simulation_lag_s=max(lags) if lags else None,
        )
