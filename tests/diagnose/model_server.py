"""A loopback HTTP server that answers like an OpenAI-compatible chat endpoint (or Vertex
AI's generateContent) with recorded replies, one per request, and keeps what it was sent.

    with ModelServer([reply_text, ...]) as server:      # server.url: http://127.0.0.1:<port>/v1
        ...; server.requests                            # [(path, headers, body json)]
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chat(content: str) -> bytes:
    """An OpenAI chat completion carrying `content`."""
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


def vertex(content: str) -> bytes:
    return json.dumps(
        {"candidates": [{"content": {"role": "model", "parts": [{"text": content}]}}]}
    ).encode()


class ModelServer:
    def __init__(self, replies: list, kind: str = "openai"):
        self.replies, self.kind, self.requests = list(replies), kind, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((self.path, dict(self.headers), json.loads(body)))
                reply = outer.replies.pop(0) if outer.replies else ""
                status, data = (
                    reply
                    if isinstance(reply, tuple)
                    else (200, (chat if outer.kind == "openai" else vertex)(reply))
                )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> ModelServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
