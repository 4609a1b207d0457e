"""Warden's gateway: the one Warden surface run pods may reach (HTTP with a projected token).

    gateway = Gateway(kube, temporal_client, "warden", asyncio.get_running_loop())
    server = gateway.serve("0.0.0.0:8080")   # a ThreadingHTTPServer in a daemon thread

`warden worker` serves it when `gateway.address` is set; its client is `warden.client`.
`POST /v1/shrink` starts ShrinkWorkflow for a worker group of a RayCluster in the caller's
namespace (200 with the result, or 202 while it runs past `wait_s`); `POST /v1/stragglers`
turns persistent stragglers into ambiguous node findings, only on nodes where a pod of the
caller's namespace runs, skipping the nodes the straggler sweep skips (`warden.handover`:
cordoned, or recently cleared by a node check); `GET /healthz` needs no token. The caller
is the service account whose projected token (audience `audience`) a TokenReview accepts
(warden.access, warden.reviews). Replies are JSON, refusals a status and {"error": one
line}, each counted by route and status (`counts`, `warden_gateway_requests`); bodies are
JSON of at most MAX_BODY bytes, nothing is unpickled.

A request is checked in this order, each step before anything costlier: route and method
(404, 405), headers (411, 413, 415, 400), the token (401, 403; a TokenReview, bounded and
cached: warden.reviews), then one of MAX_IN_FLIGHT slots (429), then the body, read within
the connection's deadline (408 when it does not arrive in time), then the work, each call
to Kubernetes or Temporal bounded (503 when one fails, 504 when one does not answer in
time). The server is runner.boundedhttp's: at most LIMITS.connections connections (and
LIMITS.per_peer of one address), a request received within LIMITS.request_s, so no peer
holds a slot or a thread without a valid token or for longer than its request takes.
Routes: docs/warden.md.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from catalog import labels
from catalog.errors import first_line
from runner.boundedhandler import BoundedHandler, Limits
from runner.boundedhttp import BoundedServer, serve_in_thread
from runner.keepnodes import KEPT_FOR
from warden import access, handover, starters
from warden.access import Caller, Refusal
from warden.errors import ApiError, NotFound
from warden.kube import WardenKube
from warden.model import ShrinkInput, Timings
from warden.reviews import Reviews
from warden.rules import RuleConfig

log = logging.getLogger("warden.gateway")
MAX_BODY = 64 * 1024
MAX_IN_FLIGHT = 16  # requests served at once; more are refused (429), not queued
START_TIMEOUT_S = 10.0  # Temporal's answer to a workflow start
LIMITS = Limits(connections=64, per_peer=32, request_s=10.0, reply_s=10.0)


class Gateway:
    """The gateway's logic over a Kubernetes adapter and a Temporal client on `loop`."""

    def __init__(
        self,
        kube: WardenKube,
        client,
        task_queue: str,
        loop: asyncio.AbstractEventLoop,
        *,
        audience: str = "warden",
        service_accounts: frozenset[str] = frozenset({labels.TRAINING_KSA}),
        wait_s: float = 20.0,
        timings: Timings | None = None,
        rules: RuleConfig | None = None,
        meter=None,
    ):
        """`timings`: those of the node workflows a finding starts; `rules`: the detection
        rules (`cleared_quiet_s`); both the worker's."""
        self.kube, self.client, self.task_queue, self.loop = kube, client, task_queue, loop
        self.timings, self.rules = timings or Timings(), rules or RuleConfig()
        self.audience, self.service_accounts, self.wait_s = audience, service_accounts, wait_s
        self.counts: Counter[tuple[str, int]] = Counter()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self._busy = 0
        self.reviews = Reviews(lambda token, aud: self.kube.review_token(token, aud), audience)
        self._meter = meter and meter.create_counter(
            "warden_gateway_requests", "gateway requests by route and reply status"
        )
        self.routes: dict[str, Callable[[Caller, bytes], tuple[int, dict]]] = {
            "/v1/shrink": self.shrink,
            "/v1/stragglers": self.stragglers,
            "/v1/nodechecks": self.nodechecks,
        }

    def answer(self, method: str, path: str, headers: Mapping[str, str], read) -> tuple[int, dict]:
        """Status and JSON reply to one request; `read(n)` reads n bytes of its body
        (Refusal 408 when they do not arrive in time, 400 when fewer come)."""
        try:
            status, reply = self._answer(method, path, headers, read)
        except Refusal as refusal:
            status, reply = refusal.status, {"error": refusal.reason}
        except ApiError as err:  # Kubernetes failed or did not answer: not the caller's fault
            status = 504 if err.status is None else 503
            reply = {"error": f"kubernetes: {first_line(err)}"}
        except TimeoutError as err:  # Temporal did not answer in time
            said = first_line(err) if str(err).strip() else "no answer in time"
            status, reply = 504, {"error": f"temporal: {said}"}
        except RPCError as err:
            status, reply = 503, {"error": f"temporal: {first_line(err)}"}
        except Exception:  # a bug: logged with its traceback, the caller gets one line
            log.exception("gateway: %s %s", method, path[:80])
            status, reply = 500, {"error": "internal error"}
        route = path if path in self.routes or path == "/healthz" else "other"
        with self._lock:
            self.counts[(route, status)] += 1
        if self._meter:
            self._meter.add(1, {"route": route, "status": str(status)})
        if status >= 400:
            log.warning("gateway: %s %s: %d %s", method[:10], route, status, reply["error"])
        return status, reply

    def _answer(self, method, path, headers, read) -> tuple[int, dict]:
        if path == "/healthz" and method == "GET":
            return 200, {"ok": True}
        handler = self.routes.get(path)
        if handler is None:
            raise Refusal(404, f"no route {path[:80]}")
        if method != "POST":
            raise Refusal(405, f"{path} takes POST")
        length = access.body_length(headers, MAX_BODY)
        token = access.bearer(headers.get("Authorization"))
        who = access.caller(self.reviews.status(token), self.audience, self.service_accounts)
        if not self._slots.acquire(blocking=False):
            raise Refusal(429, f"more than {MAX_IN_FLIGHT} requests in flight; retry later")
        with self._lock:
            self._busy += 1
        try:
            return handler(who, read(length))
        finally:
            with self._lock:
                self._busy -= 1
            self._slots.release()

    @property
    def in_flight(self) -> int:
        """Requests holding a slot now (at most MAX_IN_FLIGHT)."""
        with self._lock:
            return self._busy

    def _await(self, coro, timeout_s: float):
        """Run `coro` on the Temporal client's loop; TimeoutError (and cancel) after
        `timeout_s`."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise

    def shrink(self, who: Caller, raw: bytes) -> tuple[int, dict]:
        req = access.parse(access.ShrinkBody, raw)
        access.check_shrink(req, who)
        try:
            cluster = self.kube.get_raycluster(who.namespace, req.raycluster)
        except NotFound:
            raise Refusal(404, f"RayCluster {who.namespace}/{req.raycluster} not found") from None
        access.group_index(cluster, req.worker_group)
        inp = ShrinkInput(who.namespace, req.raycluster, req.worker_group,
                          req.replicas_from, req.replicas_to, list(req.pods))  # fmt: skip
        start = starters.start_shrink(self.client, self.task_queue, inp)
        handle = self._await(start, START_TIMEOUT_S)
        try:
            result = self._await(handle.result(), self.wait_s)
        except TimeoutError:
            return 202, {"workflow_id": handle.id}
        except WorkflowFailureError as err:  # the workflow's one-line report
            raise Refusal(502, f"shrink failed: {first_line(err.cause or err)}") from None
        return 200, {"workflow_id": handle.id, **vars(result)}

    def stragglers(self, who: Caller, raw: bytes) -> tuple[int, dict]:
        req = access.parse(access.StragglersBody, raw)
        findings = [f.model_dump() for f in req.findings if f.persistent]
        for node in sorted({f["node"] for f in findings}):
            if not self.kube.list_pods(node=node, namespace=who.namespace):
                raise Refusal(403, f"node {node} runs no pod of namespace {who.namespace}")
        now, quiet_s = datetime.now(UTC), self.rules.cleared_quiet_s
        findings, skipped = handover.screen(self.kube, findings, now, quiet_s)
        reasons = starters.straggler_reasons(findings)
        started = {}
        for node, reason in reasons.items():
            reason = f"{reason} (reported by namespace {who.namespace})"
            coro = starters.report_node(self.client, node, reason, self.task_queue, self.timings)
            started[node] = self._await(coro, START_TIMEOUT_S)
        return 200, {"started": started, "skipped": skipped}

    def nodechecks(self, who: Caller, raw: bytes) -> tuple[int, dict]:
        """Nodes a run's failure analysis named (runner diagnose --approve): each one that
        runs a pod of the caller's namespace, or is kept for it after the run (keep_nodes),
        gets the ambiguous node workflow (node check first), skipping the nodes the
        straggler sweep skips."""
        req = access.parse(access.NodeChecksBody, raw)
        for node in req.node_names():
            if not self.kube.list_pods(node=node, namespace=who.namespace) and not self._kept_for(
                node, who.namespace
            ):
                raise Refusal(403, f"node {node} runs no pod of namespace {who.namespace} and "
                                   "is not kept for it")  # fmt: skip
        now, quiet_s = datetime.now(UTC), self.rules.cleared_quiet_s
        rows, skipped = handover.screen(self.kube, [{"node": n} for n in req.node_names()],
                                        now, quiet_s)  # fmt: skip
        run = f" of run {who.namespace}/{req.run}" if req.run else ""
        started = {}
        for row in rows:
            reason = f"failure analysis{run}: {req.reason} (approved in namespace {who.namespace})"
            coro = starters.report_node(self.client, row["node"], reason, self.task_queue,
                                        self.timings)  # fmt: skip
            started[row["node"]] = self._await(coro, START_TIMEOUT_S)
        return 200, {"started": started, "skipped": skipped}

    def _kept_for(self, node: str, namespace: str) -> bool:
        try:
            labels_ = (self.kube.get_node(node).get("metadata") or {}).get("labels") or {}
        except Exception:  # gone, or the API failed: not kept
            return False
        return labels_.get(KEPT_FOR) == namespace

    def serve(self, address: str) -> BoundedServer:
        """Serve on `host:port` (port 0: any free port; `server.server_port` says which) in
        a daemon thread; stop with `server.shutdown()`."""
        host, _, port = address.rpartition(":")
        server = BoundedServer((host or "0.0.0.0", int(port)), handler_for(self), LIMITS)
        serve_in_thread(server, "warden-gateway")
        return server


def handler_for(gateway: Gateway) -> type[BoundedHandler]:
    class Handler(BoundedHandler):
        server_version = "warden-gateway"
        body_limit = MAX_BODY

        def _reply(self, method: str) -> None:
            path = self.path.partition("?")[0]
            status, reply = gateway.answer(method, path, self.headers, self._body)
            self.send_json(status, reply)

        def _body(self, length: int) -> bytes:
            try:
                return self.read_body(length)
            except TimeoutError:
                raise Refusal(408, f"body of {length} bytes not received in time") from None
            except EOFError as err:
                raise Refusal(400, str(err)) from None

        def do_GET(self) -> None:  # noqa: N802 (http.server's names)
            self._reply("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._reply("POST")

    return Handler
