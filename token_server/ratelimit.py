"""Per-client sliding-window rate limit for token requests.

Contract: `RateLimiter(limit, window_s).check(client)` records one request and returns 0.0 when it is allowed,
or, when the client already made `limit` requests within the last `window_s` seconds, records nothing and
returns the seconds until the oldest of them leaves the window (the server sends it as Retry-After).
Memory stays bounded: idle clients are dropped, and at most `max_clients` are tracked (the stalest go first).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable


class RateLimiter:
    def __init__(
        self,
        limit: int,
        window_s: float = 60.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit={limit} must be >= 1")
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._max_clients = max_clients
        self._hits: OrderedDict[str, deque[float]] = OrderedDict()

    def check(self, client: str) -> float:
        now = self._clock()
        hits = self._hits.get(client)
        if hits is None:
            hits = self._hits[client] = deque()
        self._hits.move_to_end(client)
        while hits and hits[0] <= now - self.window_s:
            hits.popleft()
        if len(hits) >= self.limit:
            return max(hits[0] + self.window_s - now, 0.001)
        hits.append(now)
        self._evict(now)
        return 0.0

    def tracked_clients(self) -> int:
        return len(self._hits)

    def _evict(self, now: float) -> None:
        # least recently seen first: drop clients whose hits all left the window, and the stalest beyond the cap
        while self._hits:
            client, hits = next(iter(self._hits.items()))
            idle = not hits or hits[-1] <= now - self.window_s
            if idle or len(self._hits) > self._max_clients:
                del self._hits[client]
            else:
                break
