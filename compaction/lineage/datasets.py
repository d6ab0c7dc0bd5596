"""A store's topic as a dataset of OpenLineage's naming conventions: the namespace and name its scheme gives (an
``s3://bucket`` namespace and the object key's path, ``file`` and the absolute path for local disk...), with no
credential in either."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import fsspec

#: fsspec's protocols of object stores, and the scheme OpenLineage names their buckets with.
BUCKET_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}
AZURE_PROTOCOLS = ("abfs", "abfss", "az")
LOCAL_PROTOCOLS = (None, "file", "local")


@dataclass(frozen=True)
class DatasetName:
    """A dataset's identity in OpenLineage: the namespace of its data source and its name within it."""

    namespace: str
    name: str


def topic_dataset(store_url: str, topic: str, storage_options: Mapping[str, Any] | None = None) -> DatasetName:
    """The dataset of ``topic`` in the store at ``store_url`` (its folder, ``<store>/<topic>``)."""
    return dataset_at(f"{store_url.rstrip('/')}/{topic}", storage_options)


def dataset_at(url: str, storage_options: Mapping[str, Any] | None = None) -> DatasetName:
    """The dataset at ``url`` (a path or an fsspec URL), named as OpenLineage names datasets on that storage:
    ``s3://bucket`` or ``gs://bucket`` and the key; ``abfss://container@account.dfs.core.windows.net`` and the path
    (the account from the URL or the ``account_name`` storage option); ``hdfs://host:port`` and the path; ``file``
    and the absolute path; any other scheme, ``scheme://host[:port]`` and the path. A URL's user and password never
    make it into a name."""
    protocol, path = fsspec.core.split_protocol(url)
    if protocol in LOCAL_PROTOCOLS:
        return DatasetName("file", os.path.abspath(path))
    parts = urlsplit(url)
    host = parts.hostname or ""  # without the userinfo a URL may carry
    key = parts.path.lstrip("/")
    if protocol in BUCKET_SCHEMES:
        return DatasetName(f"{BUCKET_SCHEMES[protocol]}://{host}", key)
    if protocol in AZURE_PROTOCOLS:
        if parts.username:  # abfss://container@account.dfs.core.windows.net/path
            container, account = parts.username, host
        else:  # abfs://container/path, the account in the storage options
            name = (storage_options or {}).get("account_name")
            container, account = host, f"{name}.dfs.core.windows.net" if name else ""
        return DatasetName(f"abfss://{container}@{account}" if account else f"abfss://{container}", key)
    port = f":{parts.port}" if parts.port else ""
    return DatasetName(f"{protocol}://{host}{port}", "/" + key if protocol == "hdfs" else key or "/")
