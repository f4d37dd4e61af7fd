"""A small OpenAI-compatible chat server for a local Hugging Face model (greedy decoding).

For judges without an API: ``python -m rlvr.rewards.judge_server --model smollm2-135m-instruct
--port 8000`` serves ``POST /v1/chat/completions`` and ``GET /v1/models``, enough for the ``judge``
reward (and for tests that must talk to a real server rather than a mock). One request generates
at a time: a model on CPU gains nothing from interleaving, and the lock keeps generation simple.
Standard library HTTP only.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatModel:
    """A causal LM and its tokenizer, answering chat messages greedily."""

    def __init__(self, name: str, device: str = "cpu", threads: int = 0) -> None:
        from rlvr.models import load_model, load_tokenizer

        if threads > 0:  # on a busy CPU, one thread decodes a small model several times faster
            import torch

            torch.set_num_threads(threads)
        self.name = name
        self.tokenizer = load_tokenizer(name)
        self.model = load_model(name, device=device).eval()
        self.device = device
        self.lock = threading.Lock()

    def reply(self, messages: list[dict[str, str]], max_tokens: int) -> tuple[str, int, int]:
        """(text, prompt tokens, completion tokens) for ``messages``."""
        import torch

        from rlvr.models.chat import encode_prompt

        ids = encode_prompt(self.tokenizer, messages)
        with self.lock, torch.inference_mode():
            output = self.model.generate(
                torch.tensor([ids], device=self.device),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=self.device),
                max_new_tokens=max_tokens,
                do_sample=False,
                use_cache=True,  # load_model turns the KV cache off for training
                pad_token_id=self.tokenizer.pad_token_id,
            )
        new = output[0, len(ids) :].tolist()
        return self.tokenizer.decode(new, skip_special_tokens=True), len(ids), len(new)


def make_server(model: ChatModel, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server for ``model`` bound to ``host:port`` (0: a free port); call ``serve_forever``."""

    class Handler(BaseHTTPRequestHandler):
        requests_served = 0

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass  # quiet: a judge is called thousands of times

        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            if self.path.rstrip("/") != "/v1/models":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            self._send(200, {"object": "list", "data": [{"id": model.name, "object": "model"}]})

        def do_POST(self) -> None:  # noqa: N802 - stdlib naming
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                messages = body["messages"]
                max_tokens = int(body.get("max_tokens") or 64)
            except (ValueError, KeyError, TypeError) as exc:
                return self._send(400, {"error": {"message": f"bad request: {exc}"}})
            text, prompt_tokens, completion_tokens = model.reply(messages, max_tokens)
            type(self).requests_served += 1
            self._send(
                200,
                {
                    "id": f"chatcmpl-{time.monotonic_ns()}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model.name,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "length" if completion_tokens >= max_tokens else "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                    },
                },
            )

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.handler = Handler  # type: ignore[attr-defined] - lets callers read requests_served
    return server


def start_in_thread(
    model: ChatModel, host: str = "127.0.0.1", port: int = 0
) -> tuple[ThreadingHTTPServer, str]:
    """Serve in a daemon thread; return the server (``shutdown()`` to stop) and its base URL."""
    server = make_server(model, host, port)
    threading.Thread(target=server.serve_forever, daemon=True, name="rlvr-judge-server").start()
    return server, f"http://{host}:{server.server_address[1]}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="built-in name or model dir")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    server = make_server(ChatModel(args.model, args.device, args.threads), args.host, args.port)
    print(f"serving {args.model} at http://{args.host}:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
