"""The HTTP side of ``rlvr serve``: the Tinker SDK's routes (``/api/v1/...``) over the standard
library's threading HTTP server.

A refused request gets a 4xx with a JSON body the SDK shows in its exception (never a 5xx: the SDK
retries those for minutes); a refused *operation* (a bad datum, an unsupported loss) is accepted and
its future answers ``{"error": ..., "category": "user"}``, which the SDK raises as
``RequestFailedError`` without retrying. Bodies are bounded in size before they are read.
"""

from __future__ import annotations

import json
import logging
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlvr.errors import RlvrError
from rlvr.safe_parse import loads_json
from rlvr.serve.service import Service
from rlvr.serve.wire import WireError

log = logging.getLogger("rlvr.serve")

PREFIX = "/api/v1"
POLL_SECONDS = 40.0  # a retrieve_future waits this long for its result before "try_again" (the SDK: 45 s)
MAX_JSON_BYTES = 64 << 20
MAX_PROTO_BYTES = 512 << 20
# known Tinker routes this server does not implement: refused with a message, never a silent no-op
UNSUPPORTED = {
    "save_weights_external": "exporting weights to external storage",
    "copy_weights": "copying weights between runs",
    "create_custom_loss": "server-side custom losses (forward_backward_custom works: it runs on the client)",
    "join_sampling_session": "joining sampling sessions",
    "retrieve_futures": "batched future retrieval",
    "cancel_future": "cancelling requests",
    "auth/token": "token authentication",
    "weights_info": "the weights-info API",
}


class TinkerHandler(BaseHTTPRequestHandler):
    server: TinkerServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, payload: Any, status: int = 200) -> None:
        self._send(status, json.dumps(payload).encode())

    def _refuse(self, status: int, message: str) -> None:
        self._json({"detail": message}, status)

    def _body(self, limit: int) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > limit:
            raise WireError(f"request body of {length} bytes is over this server's limit of {limit}")
        return self.rfile.read(length)

    def _authorised(self) -> bool:
        key = self.server.api_key
        if key is not None and self.headers.get("X-API-Key") != key:
            self._refuse(401, "wrong or missing X-API-Key for this rlvr serve")
            return False
        return True

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._authorised():
            return
        path = self.path.split("?")[0]
        try:
            if path == f"{PREFIX}/healthz":
                return self._json({"status": "ok"})
            if path == f"{PREFIX}/get_server_capabilities":
                name = self.server.service.path
                return self._json(
                    {"supported_models": [{"model_name": name, "trainable": True, "sampleable": True}]}
                )
            match = re.fullmatch(rf"{PREFIX}/samplers/([^/]+)", path)
            if match:
                return self._json(self.server.service.sampler_info(match.group(1)))
        except WireError as err:
            return self._refuse(404, str(err))
        self._refuse(404, f"{path} is not a route of rlvr serve")

    def do_POST(self) -> None:  # noqa: N802
        if not self._authorised():
            return
        path = self.path.split("?")[0]
        route = path[len(PREFIX) + 1 :] if path.startswith(PREFIX + "/") else None
        try:
            if route in ("forward_backward", "forward"):
                future = self.server.service.forward_backward(
                    self._body(MAX_PROTO_BYTES), route == "forward" or None
                )
                return self._json({"request_id": future.request_id})
            raw = self._body(MAX_JSON_BYTES)
            body = loads_json(raw.decode("utf-8"), f"{route} request") if raw else {}
            if not isinstance(body, dict):
                raise WireError("the request body must be a JSON object")
            return self._route(route, body)
        except (WireError, RlvrError) as err:
            return self._refuse(400, str(err))
        except (UnicodeDecodeError, ValueError) as err:
            return self._refuse(400, f"not a JSON request body: {err}")

    def _route(self, route: str | None, body: dict[str, Any]) -> None:
        service = self.server.service
        if route == "client/config":
            return self._json({"use_pyqwest_transport": False, "parallel_fwdbwd_chunks": False})
        if route == "client/dynamic_config":
            return self._json({"refresh_interval_sec": 3600})
        if route == "create_session":
            return self._json({"session_id": service.create_session(), "type": "create_session"})
        if route == "session_heartbeat":
            return self._json({"type": "session_heartbeat"})
        if route == "telemetry":
            return self._json({"status": "accepted"})
        if route is not None and re.fullmatch(r"sessions/[^/]+/finish", route):
            service.finish_session(route.split("/")[1])
            return self._json({})
        if route == "get_info":
            return self._json(service.info(body.get("model_id")))
        if route == "create_sampling_session":
            return self._json({"sampling_session_id": service.create_sampling_session(body)})
        if route == "retrieve_future":
            return self._retrieve(body)
        submit = {
            "create_model": service.create_model,
            "optim_step": service.optim_step,
            "save_weights": service.save_weights,
            "save_weights_for_sampler": service.save_for_sampler,
            "load_weights": service.load_weights,
        }
        if route in submit:
            return self._json({"request_id": submit[route](body).request_id})
        if route == "asample":
            future, n = service.sample(body)
            ids = [f"{future.request_id}-{i}" for i in range(n)]
            return self._json({"request_id": future.request_id, "sample_sequence_ids": ids})
        if route in UNSUPPORTED:
            return self._refuse(400, f"{route}: {UNSUPPORTED[route]} is not supported by rlvr serve")
        self._refuse(404, f"/{PREFIX.strip('/')}/{route} is not a route of rlvr serve")

    def _retrieve(self, body: dict[str, Any]) -> None:
        future = self.server.service.wait(body.get("request_id"), self.server.poll_seconds)
        if future is None:
            return self._json({"type": "try_again"})
        if future.error is not None:
            return self._json(future.error)
        if isinstance(future.result, bytes):
            return self._send(200, future.result, "application/x-protobuf")
        return self._json(future.result)


class TinkerServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        service: Service,
        api_key: str | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        super().__init__(address, TinkerHandler)
        self.service = service
        self.api_key = api_key
        self.poll_seconds = poll_seconds

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"
