"""The I/O boundary: a store root on any fsspec filesystem, reduced to the few verbs the store needs."""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import fsspec
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from compaction.errors import MissingObjectError, StoreError

T = TypeVar("T")
TEMP_PREFIX = ".tmp-"
#: A storage option of ours (never passed to fsspec): how long a failing call may take, retries included.
RETRY_BUDGET_OPTION = "retry_budget_ms"
DEFAULT_RETRY_BUDGET_MS = 60_000
_S3_PROTOCOLS = ("s3", "s3a")
#: Connections one S3 client keeps open: the driver reads manifests and commits partitions many at once, and a
#: task reads and writes several partitions' objects at once (botocore's default, 10, would queue them).
MAX_POOL_CONNECTIONS = 64


@dataclass(frozen=True)
class ObjectInfo:
    """One listed entry: its name relative to the listed folder, size, modification time, and kind."""

    name: str
    size: int
    mtime_ms: int | None
    is_dir: bool


def _mtime_ms(entry: Mapping[str, Any]) -> int | None:
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = entry.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, (int, float)):
            return int(value * 1000)
    return None


#: Libraries whose exceptions mean the store could not be reached or refused us (translated to StoreError).
_CLIENT_LIBRARIES = {"botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "google", "azure", "gcsfs", "adlfs"}


def s3_client_config(budget_ms: int) -> dict[str, Any]:
    """botocore settings (s3fs ``config_kwargs``) under which a failing S3 call gives up within ``budget_ms``.

    botocore's standard retry mode is the one retry layer: exponential backoff with full jitter (a random
    pause of up to 1 s, then up to 2 s) on throttling, 5xx and connection errors. A call's worst case is
    attempts x (connect + read timeout) + the pauses; the budget is split so that this adds up to it, with
    three attempts when each can still get 2 s, fewer for smaller budgets.
    """
    budget_s = budget_ms / 1000
    for attempts in (3, 2, 1):
        pauses_s = 2 ** (attempts - 1) - 1  # the worst case of botocore's jittered pauses: 1 s, then 2 s
        attempt_s = (budget_s - pauses_s) / attempts
        if attempt_s >= 2:
            break
    connect_s = min(5.0, attempt_s / 3)
    return {
        "connect_timeout": connect_s,
        "read_timeout": attempt_s - connect_s,
        "retries": {"mode": "standard", "total_max_attempts": attempts},
        "max_pool_connections": MAX_POOL_CONNECTIONS,
    }


def _endpoint(err: Exception) -> str:
    """The endpoint (scheme and host) a botocore connection error names, or "" when it names none."""
    url = (getattr(err, "kwargs", None) or {}).get("endpoint_url")
    if not isinstance(url, str):
        return ""
    parts = urlsplit(url)
    return f" {parts.scheme}://{parts.netloc}" if parts.netloc else f" {url}"


def _explain(err: Exception, budget_ms: int) -> str:
    name = type(err).__name__
    if name == "NoCredentialsError":
        return (
            "no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile or an instance "
            "role in the environment"
        )
    gave_up = f"gave up within the retry budget of {budget_ms / 1000:g} s"
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError"):
        return f"the endpoint{_endpoint(err)} cannot be reached ({err}); {gave_up}"
    if name in ("ReadTimeoutError", "ConnectionClosedError"):
        return f"the endpoint{_endpoint(err)} did not answer ({err}); {gave_up}"
    return f"{name}: {err}"


def _fsync(path: str, data_only: bool = False) -> None:
    """Flush a file or a folder (its entries) to the device; ``data_only``: a file's data and what reading it needs
    (its size), not its times (``fdatasync``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        (os.fdatasync if data_only else os.fsync)(fd)
    finally:
        os.close(fd)


def _write(path: str, data: bytes | memoryview, flush: bool = True) -> None:
    with open(path, "wb") as stream:
        stream.write(data)
        if flush:
            stream.flush()
            os.fdatasync(stream.fileno())  # the data and what reading it needs (its size), not its times


def _make_folders_durably(folder: str) -> None:
    """Create ``folder`` and its missing parents, fsyncing the parent of each new one (its entry is there)."""
    missing = []
    probe = folder
    while not os.path.isdir(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    if not missing:
        return
    os.makedirs(folder, exist_ok=True)
    for created in reversed(missing):
        _fsync(os.path.dirname(created))


def _is_precondition_failure(err: OSError) -> bool:
    """S3 answers an If-None-Match PUT on an existing key with 412 (s3fs may map it to EINVAL)."""
    text = str(err).lower()
    return err.errno == errno.EINVAL and ("precondition" in text or "412" in text)


class Storage:
    """A store root: resolves relative paths under it and performs the store's filesystem calls.

    Every filesystem call goes through :meth:`_call`, the single seam where tests inject crashes.
    """

    def __init__(
        self, fs: fsspec.AbstractFileSystem, root: str, url: str, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.retry_budget_ms = int(self.storage_options.get(RETRY_BUDGET_OPTION, DEFAULT_RETRY_BUDGET_MS))
        self.is_local = isinstance(fs, LocalFileSystem)
        protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        self.is_s3 = any(p in _S3_PROTOCOLS for p in protocols)
        # A call on local disk or in memory fails whole: a failed create wrote nothing. Over a network, an
        # error can come after the write took effect.
        self.calls_fail_whole = isinstance(fs, (LocalFileSystem, MemoryFileSystem))

    @classmethod
    def from_url(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> Storage:
        """Resolve a URL (``file://``, a plain path, ``s3://``, ``memory://``...) to a filesystem and root.

        ``storage_options`` go to fsspec, except ``retry_budget_ms``: on S3 it sets botocore's attempts and
        timeouts (:func:`s3_client_config`; explicit ``config_kwargs`` win) and switches off s3fs's own retry
        loop, which would multiply botocore's attempts and pause without jitter.
        """
        options = dict(storage_options or {})
        budget = options.pop(RETRY_BUDGET_OPTION, DEFAULT_RETRY_BUDGET_MS)
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0:
            raise StoreError(
                f"cannot open store {url!r}: storage option {RETRY_BUDGET_OPTION} must be a positive "
                f"number of milliseconds, not {budget!r}"
            )
        s3 = fsspec.core.split_protocol(url)[0] in _S3_PROTOCOLS
        if s3:
            options["config_kwargs"] = {**s3_client_config(int(budget)), **options.get("config_kwargs", {})}
        try:
            fs, root = fsspec.core.url_to_fs(url, **options)
        except (ImportError, ValueError) as err:
            raise StoreError(f"cannot open store {url!r}: {err}") from err
        if s3:
            fs.retries = 1  # s3fs's class attribute: the tries of its own loop around every botocore call
        return cls(fs, root, url, storage_options)

    def __getstate__(self) -> dict[str, Any]:
        # Executors re-resolve the URL themselves; filesystem objects need not travel. A local store goes as the
        # absolute path the driver resolved: an executor's working folder is not the driver's (a cluster's worker,
        # a Spark Connect server), and a relative path would name another folder there.
        return {"url": self.root if self.is_local else self.url, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        other = Storage.from_url(state["url"], state["storage_options"])
        self.__dict__.update(other.__dict__)

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _call(self, op: str, rel: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (FileNotFoundError, FileExistsError):
            raise
        except PermissionError as err:
            raise StoreError(f"access to {self.describe(rel)} was denied: {err}") from err
        except Exception as err:
            # Also botocore's timeouts, which are OSErrors too (through requests' exception classes).
            if type(err).__module__.split(".")[0] in _CLIENT_LIBRARIES:
                raise StoreError(f"cannot {op} {self.describe(rel)}: {_explain(err, self.retry_budget_ms)}") from err
            raise

    def read_bytes(self, rel: str, size: int | None = None) -> bytes:
        """A whole object's bytes. On S3 an object that is small (``size``, when the caller knows it, or any object
        of unknown size: manifests, pins) is fetched with one GET: s3fs otherwise asks for its size first (a HEAD),
        to fetch a large one in parallel parts, and a request's round trip costs more than a small object's bytes."""
        options = {}
        if self.is_s3 and (size is None or size <= getattr(self.fs, "default_block_size", 0)):
            options["max_concurrency"] = 1
        try:
            return cast(bytes, self._call("read", rel, lambda: self.fs.cat_file(self.path(rel), **options)))
        except FileNotFoundError as err:
            raise MissingObjectError(f"object {self.describe(rel)} does not exist") from err

    def write_bytes(self, rel: str, data: bytes | memoryview, *, flush: bool = True) -> None:
        """Write a new object (any buffer); callers only write fresh unique names, so overwriting never happens.

        On local disk the object and its folder are flushed to the device (``fsync``) before this returns, so
        that what names it afterwards never names an object a power cut could take back; unless not ``flush``:
        objects a manifest will name are flushed by the commit that publishes it (:meth:`flush`), and objects
        no manifest names (a pass's hand-over) need not be. A flush waits for whatever else the device holds in
        its journal at that moment: a task that flushed each object it wrote waited for every other task's too.
        """
        if self.is_local:
            path = self.path(rel)
            self._call("mkdir", rel, lambda: _make_folders_durably(os.path.dirname(path)))
            self._call("write", rel, lambda: _write(path, data, flush))
            if flush:
                self._call("sync", rel, lambda: _fsync(os.path.dirname(path)))
            return
        payload = data if isinstance(data, bytes) else bytes(data)  # what every fsspec client takes
        self._call("write", rel, lambda: self.fs.pipe_file(self.path(rel), payload))

    def flush(self, rels: Iterable[str]) -> None:
        """Flush objects written with ``flush=False`` and their folders to the device (local disk; elsewhere an
        object is durable once written): a commit does so before its manifest names them."""
        if not self.is_local:
            return
        folders: dict[str, str] = {}  # a folder to flush, and an object of it to name in an error
        for rel in rels:
            path = self.path(rel)
            self._call("sync", rel, partial(_fsync, path, data_only=True))
            folders.setdefault(os.path.dirname(path), rel)
        for folder, rel in folders.items():
            self._call("sync", rel, partial(_fsync, folder))

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Publish ``data`` at ``rel`` only if nothing is there yet; return False if it already exists.

        Local disk: write and fsync a temporary file, hard-link it into place (``link`` never clobbers),
        then fsync the folder, so the published name survives a power cut once this returns.
        Object stores: a conditional PUT (``If-None-Match: *``) through ``pipe_file(mode="create")``.
        Readers see either nothing or the whole object.
        """
        if self.is_local:
            folder = os.path.dirname(self.path(rel))
            temp = f"{os.path.dirname(rel)}/{TEMP_PREFIX}{uuid.uuid4().hex}"
            self._call("mkdir", rel, lambda: _make_folders_durably(folder))
            self._call("write", temp, lambda: _write(self.path(temp), data))
            try:
                self._call("link", rel, lambda: os.link(self.path(temp), self.path(rel)))
            except FileExistsError:
                return False
            finally:
                self._call("delete", temp, lambda: os.unlink(self.path(temp)))
            self._call("sync", rel, lambda: _fsync(folder))
            return True
        try:
            self._call("create", rel, lambda: self.fs.pipe_file(self.path(rel), data, mode="create"))
        except FileExistsError:
            return False
        except OSError as err:
            if _is_precondition_failure(err):
                return False
            raise
        return True

    def list_dir(self, rel: str, detail: bool = True) -> list[ObjectInfo]:
        """List a folder (fresh, never from a listing cache); a missing folder lists as empty."""
        full = self.path(rel)
        self.fs.invalidate_cache(full)
        try:
            entries = self._call("list", rel, lambda: self.fs.ls(full, detail=True))
        except FileNotFoundError:
            return []
        finally:
            # A cached listing would later answer "not found" for objects created after it (s3fs does).
            self.fs.invalidate_cache(full)
        infos = []
        for entry in entries:
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            infos.append(
                ObjectInfo(
                    name=name,
                    size=int(entry.get("size") or 0),
                    mtime_ms=_mtime_ms(entry) if detail else None,
                    is_dir=entry.get("type") == "directory",
                )
            )
        return infos

    def find(self, rel: str, prefix: str = "") -> list[str]:
        """Every object below the folder ``rel`` whose path under it starts with ``prefix``, as paths relative to
        ``rel``, from one paginated listing (fresh, never from a listing cache); a missing folder has none. On S3 the
        prefix filters on the server: the listings of several prefixes can run side by side."""
        full = self.path(rel)
        self.fs.invalidate_cache(full)
        try:
            if self.is_s3:
                found = self._call("list", rel, lambda: self.fs.find(full, prefix=prefix))
            else:
                found = [
                    name
                    for name in self._call("list", rel, lambda: self.fs.find(full))
                    if name[len(full) + 1 :].startswith(prefix)
                ]
        except FileNotFoundError:
            return []
        finally:
            self.fs.invalidate_cache(full)
        root = self.fs._strip_protocol(full).rstrip("/") + "/"
        return [name[len(root) :] for name in (self.fs._strip_protocol(n) for n in found) if name.startswith(root)]

    def open_output(self, rel: str) -> Any:
        """Open a new object for a streaming write (exports, never the store's own objects); the caller closes
        it. Local folders are created as needed."""
        if self.is_local:
            path = self.path(rel)
            self._call("mkdir", rel, lambda: os.makedirs(os.path.dirname(path), exist_ok=True))
            return self._call("open", rel, lambda: open(path, "wb"))
        return self._call("open", rel, lambda: self.fs.open(self.path(rel), "wb"))

    def delete(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._call("delete", rel, lambda: self.fs.rm_file(self.path(rel)))

    def open_input(self, rel: str) -> tuple[Any, int]:
        """Open an object for random-access reads; returns (file, size). Local files are memory-mapped."""
        try:
            if self.is_local:
                mapped = self._call("open", rel, lambda: pa.memory_map(self.path(rel), "r"))
                return mapped, mapped.size()
            handle = self._call("open", rel, lambda: self.fs.open(self.path(rel), "rb"))
            return handle, int(handle.size)
        except FileNotFoundError as err:
            raise MissingObjectError(f"object {self.describe(rel)} does not exist") from err

    def read_buffer(self, rel: str, size: int | None = None) -> pa.Buffer:
        """A whole object's bytes: memory-mapped on local disk (no copy), fetched in one request elsewhere
        (``size``: the object's, when the caller knows it; see :meth:`read_bytes`)."""
        if not self.is_local:
            return pa.py_buffer(self.read_bytes(rel, size))
        try:
            with self._call("open", rel, lambda: pa.memory_map(self.path(rel), "r")) as mapped:
                return mapped.read_buffer()
        except FileNotFoundError as err:
            raise MissingObjectError(f"object {self.describe(rel)} does not exist") from err

    def exists(self, rel: str) -> bool:
        return bool(self._call("exists", rel, lambda: self.fs.exists(self.path(rel))))

    def describe(self, rel: str) -> str:
        """The object's full URL-like name for messages (never includes credentials)."""
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        prefix = "" if protocol in ("file", "local") else f"{protocol}://"
        return prefix + self.path(rel)
