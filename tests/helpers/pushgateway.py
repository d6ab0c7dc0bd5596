"""A loopback HTTP server standing in for a Prometheus Pushgateway in tests."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Pushgateway:
    """A loopback HTTP server standing in for a Pushgateway: it records each push (method, path, body)."""

    def __init__(self) -> None:
        self.pushes: list[tuple[str, str, str]] = []
        pushes = self.pushes

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                pushes.append((self.command, self.path, body))
                self.send_response(200)
                self.end_headers()

            do_POST = do_PUT = _record

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Pushgateway:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
