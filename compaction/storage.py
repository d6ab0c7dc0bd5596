"""The I/O boundary: a store root on any fsspec filesystem, reduced to the few verbs the store needs."""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import fsspec
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem

from compaction.errors import MissingObjectError, StoreError

T = TypeVar("T")
TEMP_PREFIX = ".tmp-"


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


def _explain(err: Exception) -> str:
    name = type(err).__name__
    if name == "NoCredentialsError":
        return ("no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile or an instance "
                "role in the environment")
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError"):
        return f"the endpoint cannot be reached ({err})"
    return f"{name}: {err}"


def _is_precondition_failure(err: OSError) -> bool:
    """S3 answers an If-None-Match PUT on an existing key with 412 (s3fs may map it to EINVAL)."""
    text = str(err).lower()
    return err.errno == errno.EINVAL and ("precondition" in text or "412" in text)


class Storage:
    """A store root: resolves relative paths under it and performs the store's filesystem calls.

    Every filesystem call goes through :meth:`_call`, the single seam where tests inject crashes.
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, url: str,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.is_local = isinstance(fs, LocalFileSystem)

    @classmethod
    def from_url(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> Storage:
        """Resolve a URL (``file://``, a plain path, ``s3://``, ``memory://``...) to a filesystem and root."""
        try:
            fs, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
        except (ImportError, ValueError) as err:
            raise StoreError(f"cannot open store {url!r}: {err}") from err
        return cls(fs, root, url, storage_options)

    def __getstate__(self) -> dict[str, Any]:
        # Executors re-resolve the URL themselves; filesystem objects need not travel.
        return {"url": self.url, "storage_options": self.storage_options}

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
        except OSError:
            raise
        except Exception as err:
            if type(err).__module__.split(".")[0] in _CLIENT_LIBRARIES:
                raise StoreError(f"cannot {op} {self.describe(rel)}: {_explain(err)}") from err
            raise

    def read_bytes(self, rel: str) -> bytes:
        try:
            return self._call("read", rel, lambda: self.fs.cat_file(self.path(rel)))
        except FileNotFoundError as err:
            raise MissingObjectError(f"object {self.describe(rel)} does not exist") from err

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a new object; callers only write fresh unique names, so overwriting never happens."""
        if self.is_local:
            self._call("mkdir", rel, lambda: self.fs.makedirs(os.path.dirname(self.path(rel)), exist_ok=True))
        self._call("write", rel, lambda: self.fs.pipe_file(self.path(rel), data))

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Publish ``data`` at ``rel`` only if nothing is there yet; return False if it already exists.

        Local disk: write a temporary file, then hard-link it into place (``link`` never clobbers).
        Object stores: a conditional PUT (``If-None-Match: *``) through ``pipe_file(mode="create")``.
        Readers see either nothing or the whole object.
        """
        if self.is_local:
            folder = os.path.dirname(rel)
            temp = f"{folder}/{TEMP_PREFIX}{uuid.uuid4().hex}"
            self.write_bytes(temp, data)
            try:
                self._call("link", rel, lambda: os.link(self.path(temp), self.path(rel)))
            except FileExistsError:
                return False
            finally:
                self._call("delete", temp, lambda: self.fs.rm_file(self.path(temp)))
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
            infos.append(ObjectInfo(name=name, size=int(entry.get("size") or 0),
                                    mtime_ms=_mtime_ms(entry) if detail else None,
                                    is_dir=entry.get("type") == "directory"))
        return infos

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

    def exists(self, rel: str) -> bool:
        return bool(self._call("exists", rel, lambda: self.fs.exists(self.path(rel))))

    def describe(self, rel: str) -> str:
        """The object's full URL-like name for messages (never includes credentials)."""
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        prefix = "" if protocol in ("file", "local") else f"{protocol}://"
        return prefix + self.path(rel)
