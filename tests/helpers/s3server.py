"""A real S3 API server (moto's ``ThreadedMotoServer``) on 127.0.0.1 for tests, with S3's atomic conditional PUT.

moto checks ``If-None-Match: *`` and then stores the object in two steps, so two concurrent PUTs of the same
key can both succeed, which real S3 never allows. The server here makes that check and store one step for each key
(a lock per key, taken by conditional PUTs alone, as S3 itself must) and serves every other request concurrently:
the store's commits take their atomicity from the conditional PUT, as on S3, and nothing else is serialised.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.server import ThreadedMotoServer

from tests.helpers import ROOT

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def atomic_conditional_puts() -> None:
    """Make moto's PUT with ``If-None-Match: *`` (in this process) check for the key and store it as one step per
    key, as S3 does; other requests are left as they are."""
    from moto.s3.responses import S3Response

    original = S3Response.put_object
    if getattr(original, "atomic", False):
        return
    locks: dict[tuple[str, str], threading.Lock] = {}
    guard = threading.Lock()

    def put_object(self: Any) -> Any:
        if self.headers.get("If-None-Match") != "*":
            return original(self)
        with guard:
            lock = locks.setdefault((self.bucket_name, self.parse_key_name()), threading.Lock())
        with lock:
            return original(self)

    put_object.atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]


def start_server(port: int = 0) -> ThreadedMotoServer:
    """moto's threaded server on 127.0.0.1 in this process, its conditional PUTs atomic."""
    atomic_conditional_puts()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server


def serve(port: int = 0) -> None:
    """Run the server in this process until terminated, printing its port on the first line."""
    server = start_server(port)
    print(server.get_host_and_port()[1], flush=True)
    threading.Event().wait()


@contextmanager
def s3_server_here() -> Iterator[str]:
    """Serve S3 from this process (a test that ages the objects it wrote, :func:`age_objects`); yields the
    endpoint; stops it."""
    server = start_server()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def age_objects(bucket_url: str, seconds: int) -> int:
    """Make every object of a bucket that :func:`s3_server_here` serves look ``seconds`` older, as if written that
    long ago (what a test of gc's grace on S3 needs, S3 having no way to set an object's time); returns how many."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    name = bucket_url.removeprefix("s3://")
    aged = 0
    for backend in s3_backends[DEFAULT_ACCOUNT_ID].values():
        bucket = backend.buckets.get(name)
        for key in bucket.keys.values() if bucket is not None else ():
            key.last_modified -= datetime.timedelta(seconds=seconds)
            aged += 1
    return aged


@contextmanager
def s3_server() -> Iterator[str]:
    """Serve S3 on 127.0.0.1 (a free port) from a child process; yields the endpoint; stops it by pid.

    A separate process keeps moto's request handling off the test process's interpreter lock.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.s3server"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        text=True,
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        if not line.strip().isdigit():
            raise RuntimeError(f"the S3 test server did not start (exit code {process.poll()})")
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def storage_options(endpoint: str) -> dict[str, Any]:
    return {
        "client_kwargs": {"endpoint_url": endpoint},
        "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "skip_instance_cache": True,
    }


def new_bucket(endpoint: str) -> str:
    """Create a fresh bucket and return its s3:// URL."""
    import s3fs

    name = f"store-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(**storage_options(endpoint)).mkdir(name)
    return f"s3://{name}"


def set_credentials_env() -> None:
    for key, value in CREDENTIALS.items():
        os.environ.setdefault(key, value)


if __name__ == "__main__":
    serve()
