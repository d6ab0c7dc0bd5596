"""Sending a command's OpenLineage events without letting the transport change the command: in order, on a daemon
thread (openlineage's import, the client's configuration and every send happen there), waited for at most
``timeout_s`` once the command is done; whatever fails or does not answer in time is one warning line."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

from compaction import logs

log = logging.getLogger("compaction.lineage")

#: How long a command waits, once done, for its events to be delivered.
DELIVERY_TIMEOUT_S = 10.0
THREAD = "compaction-lineage"


#: The loggers that speak on the delivery thread of what a transport does: urllib3's retries and the HTTP transport.
TRANSPORT_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry", "openlineage.client.transport.http")


class Quiet(logging.Filter):
    """What a transport logs on the delivery thread (urllib3's retries...) shows only with ``-v``: a delivery that
    fails is told once, by this module."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName != THREAD or logging.getLogger().getEffectiveLevel() <= logging.INFO


def quiet_transports() -> None:
    for name in TRANSPORT_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, Quiet) for f in logger.filters):
            logger.addFilter(Quiet())


Build = Callable[[], Any]


class Delivery:
    """The events of one command, each built by a function (``send``) and emitted by the client ``connect`` makes,
    in order, on a thread of their own; :meth:`close` waits for them, bounded by ``timeout_s``."""

    def __init__(self, connect: Callable[[], Any], secrets: Iterable[str] = (), timeout_s: float | None = None) -> None:
        self._connect = connect
        self._secrets = set(secrets)
        self._timeout_s = DELIVERY_TIMEOUT_S if timeout_s is None else timeout_s
        self._queue: queue.SimpleQueue[Build | None] = queue.SimpleQueue()
        self._failures: list[str] = []
        self._sent = 0
        self._thread = threading.Thread(target=self._work, name=THREAD, daemon=True)
        quiet_transports()
        self._thread.start()

    def send(self, build: Build) -> None:
        self._queue.put(build)

    def close(self) -> None:
        """Wait (at most ``timeout_s``) for the events sent so far; say in one warning line what was not delivered."""
        self._queue.put(None)
        self._thread.join(self._timeout_s)
        if self._thread.is_alive():
            self._warn(
                f"OpenLineage events not delivered within {self._timeout_s:g} s (the transport did not "
                f"answer; {self._sent} delivered)"
            )
        elif self._failures:
            self._warn(f"{len(self._failures)} OpenLineage event(s) not delivered: {self._failures[0]}")

    def _warn(self, text: str) -> None:
        log.warning("%s; the command's outcome is not affected", logs.redact(text, self._secrets))

    def _work(self) -> None:
        client = None
        while (build := self._queue.get()) is not None:
            # A transport or a facet that fails must never change the command: whatever it raises is told once.
            try:
                client = client or self._connect()
                client.emit(build())
                self._sent += 1
            except Exception as err:
                self._failures.append(f"{type(err).__name__}: {err}")
        if client is not None:
            try:
                client.close(self._timeout_s)
            except Exception as err:
                self._failures.append(f"{type(err).__name__}: {err}")
