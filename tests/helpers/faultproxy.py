"""A fault-injecting HTTP proxy on 127.0.0.1 in front of the test S3 server: forwards every request, and on
command loses a response, answers 503 SlowDown, resets the connection or stalls; or adds a fixed latency to every
request, as a distant object store would (the benchmark's S3 scenarios).

Clients talk to :attr:`FaultProxy.endpoint` instead of the S3 server's. :meth:`FaultProxy.inject` arms a
:class:`Fault` for requests matching a method and a path pattern (all of them, or only the Nth match);
:attr:`FaultProxy.requests` lists every request seen, so a test can first enumerate the calls an operation
makes and then hit each one in turn. Faults for different paths (say, different partitions) do not
disturb each other, so such cases can run at the same time. With ``delay_s``, every request waits that long
before it is forwarded; requests are served on a thread each, so a client's concurrent requests wait together
(:meth:`FaultProxy.hold` keeps every request waiting until :meth:`FaultProxy.release`, so that a test can see how
many wait at once).
"""

from __future__ import annotations

import http.client
import re
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import urlsplit

#: drop: forward the request (it takes effect), then close the connection without answering.
#: slowdown: answer 503 SlowDown without forwarding. reset: reset the connection without forwarding.
#: stall: wait ``stall_s`` seconds, then forward and answer (if the client is still there).
Action = Literal["drop", "slowdown", "reset", "stall"]
ACTIONS: tuple[Action, ...] = ("drop", "slowdown", "reset", "stall")

MAX_STALL_S = 30.0
#: Connections waiting to be accepted: a client that opens many at once (a pool of requests in flight) must
#: not see its connections dropped and retried a second later, which would pass for the store's latency.
LISTEN_BACKLOG = 256
UPSTREAM_TIMEOUT_S = 30.0
IDLE_CONNECTION_S = 30.0  # a kept-alive client connection with no request for this long is closed
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "expect",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "content-length",
}
_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


@dataclass
class Fault:
    """What to do to which requests: those whose method is ``method`` and whose path (with its query)
    matches the regex ``path`` (either left out: any), counted from when the fault is armed; only the
    ``at``-th of them (0-based) when ``at`` is given, else the first ``times``."""

    action: Action
    at: int | None = None
    method: str | None = None
    path: str | None = None
    times: int = 1
    stall_s: float = 0.0
    seen: int = field(default=0, init=False)  # matching requests so far

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r}")
        if not 0 <= self.stall_s <= MAX_STALL_S:
            raise ValueError(f"a stall lasts between 0 and {MAX_STALL_S} s")

    def applies(self, method: str, path: str) -> bool:
        """Count a request; true if the fault hits it."""
        if (self.method is not None and self.method != method) or (
            self.path is not None and re.search(self.path, path) is None
        ):
            return False
        self.seen += 1
        return self.seen - 1 == self.at if self.at is not None else self.seen <= self.times

    @property
    def spent(self) -> bool:
        return self.seen > (self.at if self.at is not None else self.times - 1)


class _Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


class FaultProxy:
    """The proxy server; start and stop it with :func:`fault_proxy`. ``delay_s``: the latency added to every
    request (before it is forwarded, and before any fault acts)."""

    def __init__(self, upstream: str, delay_s: float = 0.0) -> None:
        if not 0 <= delay_s <= MAX_STALL_S:
            raise ValueError(f"a delay lasts between 0 and {MAX_STALL_S} s")
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.delay_s = delay_s
        self.requests: list[str] = []  # "METHOD /path?query" of every request, in arrival order
        self.ranges: list[tuple[str, str | None]] = []  # (path, Range header) of every GET: the bytes asked for
        self.hits: list[str] = []  # "action METHOD /path?query" of every fault applied
        self.stalled: list[str] = []  # "METHOD /path?query" of every stalled request once it reached upstream
        self._stalled_changed = threading.Condition()
        self.waiting = 0  # requests in their delay (or held) now
        self._waiting_changed = threading.Condition()
        self._released = threading.Event()
        self._released.set()
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="fault-proxy", daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def inject(self, fault: Fault) -> None:
        """Arm a fault; it counts requests from now."""
        with self._lock:
            self._faults.append(fault)

    def clear(self) -> None:
        """Disarm every fault and forget the requests seen."""
        with self._lock:
            self._faults.clear()
            self.requests.clear()
            self.ranges.clear()
            self.hits.clear()
        with self._stalled_changed:
            self.stalled.clear()

    def wait_for_stalled(self, count: int, timeout_s: float = MAX_STALL_S + UPSTREAM_TIMEOUT_S) -> bool:
        """Wait until ``count`` stalled requests have reached the upstream server (and taken effect there); false
        if they have not within ``timeout_s``, which only bounds a run that goes wrong."""
        with self._stalled_changed:
            return self._stalled_changed.wait_for(lambda: len(self.stalled) >= count, timeout=timeout_s)

    def hold(self) -> None:
        """Keep every request from now on waiting, after its delay, until :meth:`release`."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def wait_for_waiting(self, count: int, timeout_s: float = MAX_STALL_S) -> bool:
        """Wait until ``count`` requests wait at once; false if they do not within ``timeout_s``, which only bounds
        a run that goes wrong."""
        with self._waiting_changed:
            return self._waiting_changed.wait_for(lambda: self.waiting >= count, timeout=timeout_s)

    def _wait(self) -> None:
        """A request's delay, and the hold if one is on."""
        with self._waiting_changed:
            self.waiting += 1
            self._waiting_changed.notify_all()
        try:
            self._stopping.wait(self.delay_s)
            self._released.wait(MAX_STALL_S)
        finally:
            with self._waiting_changed:
                self.waiting -= 1

    def _reached_upstream(self, method: str, path: str) -> None:
        with self._stalled_changed:
            self.stalled.append(f"{method} {path}")
            self._stalled_changed.notify_all()

    def _decide(self, method: str, path: str) -> Fault | None:
        with self._lock:
            self.requests.append(f"{method} {path}")
            hit = next(iter([fault for fault in self._faults if fault.applies(method, path)]), None)  # all count
            self._faults = [fault for fault in self._faults if not fault.spent]
            if hit is not None:
                self.hits.append(f"{hit.action} {method} {path}")
            return hit

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@contextmanager
def fault_proxy(upstream: str, delay_s: float = 0.0) -> Iterator[FaultProxy]:
    """Run a proxy in front of ``upstream`` (an http:// endpoint) for the duration of the block, adding
    ``delay_s`` to every request."""
    proxy = FaultProxy(upstream, delay_s)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def connections_accepted(sock: socket.socket) -> int:
    """How many connections the kernel accepted for a listening socket nobody serves (a silent endpoint): one per
    attempt of a client that gave up on it."""
    sock.setblocking(False)
    count = 0
    while True:
        try:
            connection, _ = sock.accept()
        except OSError:
            return count
        connection.close()
        count += 1


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects
        timeout = IDLE_CONNECTION_S

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            upstream = http.client.HTTPConnection(*proxy.upstream, timeout=UPSTREAM_TIMEOUT_S)
            try:
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                return response.status, response.reason, response.getheaders(), response.read()
            finally:
                upstream.close()

        def _reset(self) -> None:
            # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        def _drop(self) -> None:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        def _answer(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response_only(status, reason)
            length = None
            for key, value in headers:
                if key.lower() == "content-length":
                    length = value
                elif key.lower() not in _HOP_BY_HOP:
                    self.send_header(key, value)
            # A HEAD answer keeps the object's length but carries no body.
            self.send_header("Content-Length", length if self.command == "HEAD" and length else str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()

        def _handle(self) -> None:
            body = self._body()
            if proxy.delay_s or not proxy._released.is_set():
                proxy._wait()
            if self.command == "GET":
                with proxy._lock:
                    proxy.ranges.append((self.path, self.headers.get("Range")))
            fault = proxy._decide(self.command, self.path)
            try:
                if fault is None:
                    self._answer(*self._forward(body))
                elif fault.action == "slowdown":
                    self._answer(503, "Slow Down", [("Content-Type", "application/xml")], _SLOW_DOWN)
                elif fault.action == "reset":
                    self._reset()
                elif fault.action == "drop":
                    self._forward(body)
                    self._drop()
                else:
                    proxy._stopping.wait(fault.stall_s)
                    answer = self._forward(body)
                    proxy._reached_upstream(self.command, self.path)
                    self._answer(*answer)
            except OSError:
                self.close_connection = True  # the client went away (it gave up on a stall): nothing to answer

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    return Handler
