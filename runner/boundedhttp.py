"""HTTP servers no peer can hold: bounded connections, time and bytes per request.

The standard library's `ThreadingHTTPServer` gives every connection a thread for as long as
the peer keeps it open, reads a request line and headers of any size, and times out per
read only, so a peer sending a byte every few seconds holds its thread forever. Here:

- at most `Limits.connections` connections at once, and `Limits.per_peer` of one address:
  one more is answered 429 and closed by the accepting thread, before any thread is made;
- a request (the wait for it on an idle connection, its line, headers and body together)
  must arrive within `Limits.request_s` and `header_bytes` + the handler's `body_limit`
  bytes: a slower one is answered 408 and closed, a bigger one 431;
- a reply must be sent within `Limits.reply_s` (a peer that reads nothing loses it);
- errors are one line of JSON, `{"error": "..."}`, never the standard library's HTML page;
  an exception that escapes a handler is logged on one line and counted, and the thread
  that serves the accept loop is restarted should it ever end by an exception.

    class Handler(BoundedHandler):   # runner.boundedhandler
        body_limit = 64 * 1024
        def do_POST(self): ...

    server = BoundedServer(("127.0.0.1", 0), Handler, Limits(connections=64, per_peer=32))
    serve_in_thread(server, "gateway")
    server.counts  # Counter: refused connections, timeouts, too large, handler errors

Warden's gateway (warden/gateway.py) and `runner ui` (runner/ui/server.py) serve with it.
"""

from __future__ import annotations

import collections
import json
import logging
import select
import socket
import threading
import time
from http.server import ThreadingHTTPServer

from runner.boundedhandler import BoundedHandler, Limits

log = logging.getLogger("runner.boundedhttp")
LINGER_S = 0.5  # what a closing connection still reads from its peer, at most


class BoundedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer under `Limits` (see the module's docstring)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # connections the kernel holds for the accepting thread

    def __init__(self, address, handler: type[BoundedHandler], limits: Limits | None = None):
        self.limits = limits or Limits()
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._open: collections.Counter[str] = collections.Counter()
        self._closer = _Closer()
        super().__init__(address, handler)

    def count(self, reason: str) -> None:
        with self._lock:
            self.counts[reason] += 1

    @property
    def open_connections(self) -> int:
        with self._lock:
            return sum(self._open.values())

    def process_request(self, request, client_address) -> None:
        peer = str(client_address[0])
        with self._lock:
            busy = sum(self._open.values()) >= self.limits.connections
            mine = self.limits.per_peer is not None and self._open[peer] >= self.limits.per_peer
            if not (busy or mine):
                self._open[peer] += 1
        if busy or mine:
            self.count("refused connection")
            _refuse(request, "too many connections" + (" from this address" if mine else ""))
            self._closer.close(request)  # the accepting thread never waits on a peer
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread could be started
            self._closed(peer)
            self.count("refused connection")
            self.close_request(request)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed(str(client_address[0]))

    def _closed(self, peer: str) -> None:
        with self._lock:
            self._open[peer] -= 1
            if self._open[peer] <= 0:
                del self._open[peer]

    def shutdown_request(self, request) -> None:
        """Close a connection the way a reply survives it: the sending side first, then
        what the peer still sends read and dropped for at most LINGER_S (closing with
        unread bytes would reset the connection, and the peer could lose the reply)."""
        try:
            request.shutdown(socket.SHUT_WR)
            request.settimeout(LINGER_S)
            end = time.monotonic() + LINGER_S
            while time.monotonic() < end and request.recv(65536):
                pass
        except OSError:
            pass
        self.close_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._closer.stop()

    def handle_error(self, request, client_address) -> None:
        """An exception escaped a handler: one line in the log, counted; the thread ends,
        the server serves on."""
        import sys

        err = sys.exc_info()[1]
        self.count("handler error")
        log.error("%s: %s: %s", self.server_address, type(err).__name__, str(err)[:200])


class _Closer:
    """Closes refused connections for the accepting thread: each after its peer's bytes
    were read and dropped for LINGER_S (or at once beyond MAX_LINGERING waiting), so the
    429 is not lost to a reset; one thread serves them all."""

    MAX_LINGERING = 256

    def __init__(self):
        self._lock = threading.Condition()
        self._waiting: dict[socket.socket, float] = {}
        self._stopped = False
        threading.Thread(target=self._run, name="closer", daemon=True).start()

    def stop(self) -> None:
        """End the thread (once nothing lingers any more)."""
        with self._lock:
            self._stopped = True
            self._lock.notify()

    def close(self, sock) -> None:
        with self._lock:
            if len(self._waiting) >= self.MAX_LINGERING:
                sock.close()
                return
            self._waiting[sock] = time.monotonic() + LINGER_S
            self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._stopped:  # no wake-ups while idle
                    self._lock.wait()
                if not self._waiting:
                    return
                waiting = dict(self._waiting)
            ready = _readable(waiting, 0.05)
            now = time.monotonic()
            for sock, deadline in waiting.items():
                try:
                    done = now >= deadline or (sock in ready and not sock.recv(65536))
                except OSError:
                    done = True
                if done:
                    with self._lock:
                        self._waiting.pop(sock, None)
                    sock.close()


def _readable(socks, timeout_s: float) -> set:
    """Those of `socks` with data or an end to read within `timeout_s`. poll, not select:
    select() refuses a descriptor past 1023, which a busy process reaches."""
    poller, by_fd = select.poll(), {}
    for sock in socks:
        fd = sock.fileno()
        if fd >= 0:
            poller.register(fd, select.POLLIN)
            by_fd[fd] = sock
    return {by_fd[fd] for fd, _ in poller.poll(timeout_s * 1000) if fd in by_fd}


def _refuse(sock, reason: str) -> None:
    """Answer 429 on a connection no thread will serve, without waiting for the peer."""
    body = json.dumps({"error": reason}).encode()
    head = (
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    try:
        sock.setblocking(False)
        sock.send(head.encode() + body)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def serve_in_thread(server: BoundedServer, name: str) -> threading.Thread:
    """Serve in a daemon thread until `server.shutdown()`; the loop is started again (and
    counted, `restarts`) should it end by an exception."""

    def loop() -> None:
        while True:
            try:
                server.serve_forever()
                return
            except Exception as err:  # noqa: BLE001 (the accept loop must outlive it)
                server.count("restarts")
                log.error("%s: serving loop ended: %s; serving again", name, err)
                time.sleep(0.1)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread
