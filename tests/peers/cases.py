"""Hostile peers of an HTTP serving loop, as cases: bytes to send (with pauses) and the
answers the server may give.

    for case in cases("gateway", info, random.Random(7), request_s=2.0, count=1000): ...

Kinds, for both servers: garbage and broken request lines, bad and oversized headers, slow
senders (a byte at a time, slower than the request may take), silent and half-sent
connections, split and pipelined requests, floods of connections. The gateway's add deep
nesting, huge and short bodies, wrong tokens (unknown, expired, another audience, account
or namespace, malformed, oversized), replays of a good request, and non-finite or
oversized numbers; the UI's add more than 20 query fields, bad parameters, paths outside
its files and foreign Host headers. An expected answer of 0 means "closed without a reply".
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace

CLOSED = 0
LINES = [b"GET / HTTP/9.9", b"GET /\x00 HTTP/1.1", b"BREW / HTTP/1.1", b"GET",
         b"GET / HTTP/1.1 extra", b"get / http/1.1", b"GET http://evil.example/ HTTP/1.1",
         b"\x16\x03\x01\x02\x00"]  # fmt: skip
# Any answer may be 429: the server refuses what it has no room for, rather than queueing.
BUSY = frozenset({429})


@dataclass(frozen=True)
class Case:
    kind: str
    parts: tuple[tuple[float, bytes], ...]  # (pause before, bytes)
    expect: frozenset[int]
    connections: int = 1  # a flood: this many at once
    close_after: bool = False  # shut the sending side once everything is sent


def request(method: str, path: str, headers: dict[str, str], body: bytes = b"",
            version: str = "HTTP/1.1") -> bytes:  # fmt: skip
    head = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode("latin-1", "replace") + b"\r\n" + body


def one(kind: str, data: bytes, *expect: int, **kwargs) -> Case:
    return Case(kind, ((0.0, data),), frozenset(expect) | BUSY, **kwargs)


def slow(kind: str, data: bytes, pause: float, *expect: int) -> Case:
    """`data` a few bytes at a time, `pause` seconds apart."""
    step = max(1, len(data) // 8)
    parts = tuple((pause, data[i : i + step]) for i in range(0, len(data), step))
    return Case(kind, parts, frozenset(expect) | BUSY)


def split(kind: str, data: bytes, rng: random.Random, *expect: int) -> Case:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(2, 12))))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return Case(kind, tuple((rng.uniform(0, 0.05), p) for p in pieces), frozenset(expect) | BUSY)


def common(rng: random.Random, base: bytes, ok: frozenset[int], request_s: float) -> Case:
    """A hostile case that fits any HTTP server; `base` is a request it answers with one
    of `ok`."""
    pick = rng.randrange(12)
    if pick == 0:
        return one("garbage", bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000)))
                   + b"\r\n\r\n", 400, 414, 431, 501, CLOSED)  # fmt: skip
    if pick == 1:
        return one("request line", b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, 431)
    if pick == 2:
        line = rng.choice(LINES)
        return one("request line", line + b"\r\n\r\n", 400, 403, 404, 501, 505, CLOSED)
    if pick == 3:
        headers = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 10) for i in range(rng.choice([101, 500])))
        return one("headers", b"GET / HTTP/1.1\r\n" + headers + b"\r\n", 431)
    if pick == 4:
        return one("headers", b"GET / HTTP/1.1\r\nX: " + b"v" * rng.choice([20_000, 70_000])
                   + b"\r\n\r\n", 431)  # fmt: skip
    if pick == 5:
        bad = rng.choice([b"NoColon\r\n", b"X: \x00\x01\r\n", b" folded: x\r\n", b"X:\xff\xfe\r\n"])
        return one("headers", b"GET / HTTP/1.1\r\n" + bad + b"\r\n", 200, 400, 403, 404, 431)
    if pick == 6:
        early = {status for status in ok if 400 <= status < 500}  # refused on its headers
        return slow("slow sender", base, request_s / 3, 408, CLOSED, *early)
    if pick == 7:
        return Case("silent", ((request_s + 0.5, b""),), frozenset({CLOSED}) | BUSY)
    if pick == 8:  # the server may answer what it got, or close
        return one("premature close", base[: rng.randint(1, len(base) - 1)], CLOSED, *ok,
                   *range(400, 500), close_after=True)  # fmt: skip
    if pick == 9:
        return split("split", base, rng, *ok)
    if pick == 10:
        keep = base.replace(b"\r\n", b"\r\nConnection: keep-alive\r\n", 1)
        return one("pipelined", keep + keep + b"GARBAGE\r\n\r\n", *ok)
    return Case("flood", ((0.0, base),), ok | BUSY | {503}, connections=40)


def gateway_body(rng: random.Random, info: dict) -> tuple[str, bytes, frozenset[int]]:
    """(path, body, statuses) of a gateway request whose body is hostile (or good)."""
    good = {"raycluster": "lm-x7", "worker_group": "h200", "replicas_from": 4, "replicas_to": 3}
    finding = {"rank": 1, "node": info["other_node"], "persistent": True,
               "straggler_windows": 3, "windows": 4, "delay_us": 10.0}  # fmt: skip
    pick = rng.randrange(9)
    if pick == 0:
        n = rng.choice([9, 100, 10_000, 30_000])
        return "/v1/shrink", b'{"raycluster": ' + b"[" * n + b"]" * n + b"}", frozenset({400})
    if pick == 1:
        n = rng.choice([9, 1000, 6000])
        return "/v1/stragglers", b'{"a": ' * n + b"1" + b"}" * n, frozenset({400})
    if pick == 2:
        value = rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e400"])
        text = json.dumps({"findings": [{**finding, "delay_us": 0}]}).encode()
        return "/v1/stragglers", text.replace(b'"delay_us": 0', b'"delay_us": ' + value), \
            frozenset({400})  # fmt: skip
    if pick == 3:
        big = rng.choice(["9" * 5000, "1" + "0" * 30, "-1", "4.0", "true", '"4"'])
        text = json.dumps(good).replace('"replicas_from": 4', f'"replicas_from": {big}')
        return "/v1/shrink", text.encode(), frozenset({400})
    if pick == 4:
        return "/v1/shrink", bytes(rng.randrange(256) for _ in range(200)), frozenset({400})
    if pick == 5:
        many = [finding] * rng.choice([257, 2000])
        return "/v1/stragglers", json.dumps({"findings": many}).encode(), frozenset({400, 413})
    if pick == 6:
        return "/v1/stragglers", json.dumps({"findings": [finding]}).encode(), frozenset({403})
    if pick == 7:  # a workflow start Temporal never answers
        return "/v1/shrink", json.dumps({**good, "replicas_to": 0}).encode(), frozenset({504})
    return "/v1/shrink", json.dumps(good).encode(), frozenset({202})


GOOD = json.dumps({"raycluster": "lm-x7", "worker_group": "h200", "replicas_from": 4,
                   "replicas_to": 3}).encode()  # fmt: skip


def gateway(rng: random.Random, info: dict, request_s: float) -> Case:
    token = info["token"]
    auth = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    path, body, statuses = gateway_body(rng, info)
    post = lambda h, b=body: request("POST", path, {**h, "Content-Length": str(len(b))}, b)  # noqa: E731
    good = lambda h: request("POST", "/v1/shrink", {**h, "Content-Length": str(len(GOOD))}, GOOD)  # noqa: E731
    pick = rng.randrange(10)
    if pick < 3:
        return Case("body", ((0.0, post(auth)),), statuses | BUSY)
    if pick == 3:  # wrong tokens
        other = rng.choice(list(info["tokens"].values()) + [
            "0" * 32, "x" * 9000, "a b", "tok\u00e9n", "", "Zm9v" * 1000, token + "x"])  # fmt: skip
        scheme = rng.choice(["Bearer", "Basic", "bearer", "Token"])
        statuses = frozenset({401, 403, 404, 431})
        return one("wrong token", good({**auth, "Authorization": f"{scheme} {other}"}), *statuses)
    if pick == 4:  # a good request, again and again
        return one("replay", good(auth), 202)
    if pick == 5:  # bad lengths and types
        length = rng.choice(["\u00b2", "-1", "1e3", "99999999999999999999", "12, 12", "0x10",
                             str(10**7), ""])  # fmt: skip
        headers = {**auth, "Content-Length": length}
        if rng.random() < 0.3:
            headers = {**auth, "Transfer-Encoding": "chunked", "Content-Length": "5"}
        if rng.random() < 0.2:
            headers = {**headers, "Content-Type": "text/plain"}
        return one("length", request("POST", path, headers, body), 400, 411, 413, 415)
    if pick == 6:  # a short body: sent in part, then closed or stalled
        data = good(auth)[: -max(1, len(GOOD) // 2)]
        if rng.random() < 0.5:
            return one("short body", data, 400, CLOSED, close_after=True)
        return Case("short body", ((0.0, data), (request_s + 0.5, b"")), frozenset({408}) | BUSY)
    if pick == 7:  # a huge body, announced or sent
        if rng.random() < 0.5:
            return one("huge body", post(auth, b"x" * 200_000), 413, CLOSED)
        return one("huge body", request("POST", path, {**auth, "Content-Length": "10000000"},
                                        b"{"), 413)  # fmt: skip
    return common(rng, post(auth), statuses, request_s)


def ui(rng: random.Random, info: dict, request_s: float) -> Case:
    run = f"/api/run?team={info['team']}&run={info['run']}"
    get = lambda path, **h: request("GET", path, {"Host": info["host"], **h})  # noqa: E731
    pick = rng.randrange(10)
    if pick == 0:
        fields = "&".join(f"f{i}=1" for i in range(rng.choice([21, 100, 5000])))
        return one("query fields", get(f"{run}&{fields}"), 400, 414)
    if pick == 1:
        key = rng.choice(["points", "ranks", "window_s", "windows"])
        value = rng.choice(["\u00b2", "%C2%B2", "-1", "1e3", "9" * 40, "nan", "", "%00", "1.5"])
        return one("parameter", get(f"{run}&{key}={value}"), 400 if value else 200)  # "": unset
    if pick == 2:
        name = rng.choice(["../x", "%00", "a" * 200, "%2e%2e", "x y", "\u00e9", "-"])
        return one("name", get(f"/api/run?team={name}&run={info['run']}"), 400)
    if pick == 3:
        path = rng.choice(["/static/../server.py", "/static/%2e%2e/server.py", "/static/" +
                           "a" * 5000, "/static/%00", "/static/\x00", "/static/", "/x",
                           "/api/nope", "/api/run?team=zz&run=none", "/static//etc/passwd",
                           "/static/vendor", "/" + "a" * 8000])  # fmt: skip
        return one("path", get(path), 400, 404)
    if pick == 4:
        host = rng.choice(["evil.example", "", "127.0.0.1:1", "localhost:80"])
        return one("host", request("GET", run, {"Host": host}), 403)
    if pick == 5:
        method = rng.choice(["POST", "PUT", "DELETE", "HEAD", "OPTIONS", "TRACE"])
        return one("method", request(method, run, {"Host": info["host"]}), 501)
    if pick == 6:
        return one("replay", get(run), 200)
    return common(rng, get(run), frozenset({200}), request_s)


def cases(kind: str, info: dict, rng: random.Random, request_s: float, count: int) -> list[Case]:
    if kind == "gateway":
        return [gateway(rng, info, request_s) for _ in range(count)]
    # a request that reaches the UI's store may find its calls all taken (503), as 429
    # refuses one that finds no connection: both an answer to load, not a fault
    made = [ui(rng, info, request_s) for _ in range(count)]
    return [replace(c, expect=c.expect | {503}) if 200 in c.expect else c for c in made]
