"""A real HTTP server on 127.0.0.1 for source-client tests: scripted routes and injected faults.

Clients under test talk to it over a real socket with httpx, so retries, timeouts and truncated
bodies are exercised as on the network. Faults are scripted per path prefix and consumed in
order: an int is an HTTP status (429 carries `Retry-After: 0`), "timeout" sleeps past the
client's timeout, "truncated" sends the first half of the real body, "reset" closes the socket.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Handler = Callable[[str, dict[str, list[str]], dict[str, str], bytes], tuple[int, Any]]
"""(path, query, headers, body) -> (status, JSON-serialisable body or bytes)."""


class FakeSourceServer:
    def __init__(self, timeout_sleep: float = 1.5) -> None:
        self.routes: dict[str, Handler] = {}
        self.faults: dict[str, deque] = {}
        self.requests: list[tuple[str, str, dict[str, list[str]], dict[str, str]]] = []
        self.timeout_sleep = timeout_sleep
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def route(self, path: str, handler: Handler) -> None:
        self.routes[path] = handler

    def inject(self, path_prefix: str, *faults: int | str) -> None:
        with self._lock:
            self.faults.setdefault(path_prefix, deque()).extend(faults)

    def __enter__(self) -> FakeSourceServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next_fault(self, path: str) -> int | str | None:
        with self._lock:
            for prefix, queue in self.faults.items():
                if path.startswith(prefix) and queue:
                    return queue.popleft()
        return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def _serve(self, method: str) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query, keep_blank_values=True)
                headers = {k.lower(): v for k, v in self.headers.items()}
                length = int(headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                server.requests.append((method, parts.path, query, headers))
                fault = server._next_fault(parts.path)
                if fault == "timeout":
                    time.sleep(server.timeout_sleep)
                    return self._send(200, b"{}")
                if fault == "reset":
                    self.close_connection = True
                    self.connection.close()
                    return None
                if isinstance(fault, int):
                    extra = {"Retry-After": "0"} if fault == 429 else {}
                    return self._send(fault, json.dumps({"error": {"code": fault}}).encode(), extra)
                handler = server.routes.get(parts.path)
                if handler is None:
                    return self._send(404, b'{"error": {"code": "NOT_FOUND"}}')
                status, payload = handler(parts.path, query, headers, body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                if fault == "truncated":
                    data = data[: max(1, len(data) // 2)]
                return self._send(status, data)

            def _send(self, status: int, data: bytes, extra: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:  # noqa: N802
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

        return _Handler
