"""A real S3 API server (moto) on 127.0.0.1 for tests, with S3's atomic conditional PUT.

moto checks ``If-None-Match: *`` and then stores the object in two steps, so two concurrent PUTs of the
same key can both succeed, which real S3 never allows. The server here runs moto's application behind a
lock that serialises requests, so the server honours the contract the commit protocol relies on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from tests.helpers import ROOT

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class _Serialised:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with self.lock:
            return list(self.app(environ, start_response))


def serve(port: int = 0) -> None:
    """Run the server in this process until terminated, printing its port on the first line."""
    server = make_server("127.0.0.1", port, _Serialised(DomainDispatcherApplication(create_backend_app)), threaded=True)
    print(server.server_port, flush=True)
    server.serve_forever()


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
