"""The gateway's token reviews: a token's shape checked first, TokenReviews bounded and cached.

    reviews = Reviews(kube.review_token, "warden")
    status = reviews.status(token)     # the TokenReview's status (Refusal 401/429/503/504)

A token that cannot be a projected service-account token (empty, longer than MAX_TOKEN,
characters outside RFC 6750's b64token) is refused (401) without asking the API server. At
most MAX_REVIEWS reviews run at once (one more: 429); each answer, accepted or not, is
kept CACHE_S seconds under the token's SHA-256 (at most CACHE_SIZE answers, the oldest
dropped first), so a replayed or flooded token costs one TokenReview per CACHE_S, and a
token the API server stops accepting is refused at most CACHE_S later (a projected token
lives ten minutes; the kubelet renews it well before).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from warden.access import Refusal
from warden.errors import ApiError

MAX_TOKEN = 8192
MAX_REVIEWS = 8
CACHE_S = 10.0
CACHE_SIZE = 4096
B64TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")


def token_problem(token: str) -> str | None:
    """Why `token` cannot be a bearer token (None when it may be one)."""
    if len(token) > MAX_TOKEN:
        return f"a token of {len(token)} characters (at most {MAX_TOKEN})"
    if not B64TOKEN.match(token):
        return "a token with characters a bearer token does not have"
    return None


class Reviews:
    """TokenReviews through `review(token, audiences)` (the Kubernetes adapter's), bounded
    and cached as the module says; `clock` for tests."""

    def __init__(self, review: Callable[[str, list[str]], dict], audience: str,
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
        self.review, self.audience, self.clock = review, audience, clock
        self._slots = threading.BoundedSemaphore(MAX_REVIEWS)
        self._lock = threading.Lock()
        self._cache: OrderedDict[bytes, tuple[float, dict]] = OrderedDict()

    def status(self, token: str) -> dict:
        """The TokenReview status of `token`, from the cache or the API server."""
        problem = token_problem(token)
        if problem:
            raise Refusal(401, f"token not accepted: {problem}")
        key = hashlib.sha256(token.encode()).digest()
        cached = self._cached(key)
        if cached is not None:
            return cached
        if not self._slots.acquire(blocking=False):
            raise Refusal(429, f"more than {MAX_REVIEWS} token reviews at once; retry later")
        try:
            status = self.review(token, [self.audience])
        except ApiError as err:
            code = 504 if err.status is None else 503
            raise Refusal(code, f"kubernetes: token review: {str(err)[:160]}") from None
        finally:
            self._slots.release()
        self._keep(key, dict(status or {}))
        return status or {}

    def _cached(self, key: bytes) -> dict | None:
        with self._lock:
            found = self._cache.get(key)
            if found is None:
                return None
            if self.clock() >= found[0]:
                del self._cache[key]
                return None
            return found[1]

    def _keep(self, key: bytes, status: dict) -> None:
        with self._lock:
            self._cache[key] = (self.clock() + CACHE_S, status)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
