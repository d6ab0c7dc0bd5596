"""A loopback OpenLineage endpoint that collects the events it is sent (or holds each request without answering),
and OpenLineage's published JSON schemas (``openlineage_spec/``: the 2-0-2 event and the facets the job uses, as the
OpenLineage project publishes them) with compaction's own facets, to hold every event to, offline."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

from tests.helpers import ROOT

SPEC = Path(__file__).parent / "openlineage_spec"
FACETS = ROOT / "compaction" / "lineage" / "facets.json"


class Receiver:
    """An OpenLineage HTTP endpoint on 127.0.0.1 (``url``; the client posts to ``/api/v1/lineage``) keeping each
    event it receives; with ``hang``, it reads each request and never answers until it is stopped."""

    def __init__(self, hang: bool = False) -> None:
        self.events: list[dict[str, Any]] = []
        self.requests = 0
        self.stopping = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.requests += 1
                if hang:
                    receiver.stopping.wait(60)
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.events.append(json.loads(body))
                self.send_response(201)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def _registry() -> Registry:
    resources = [Resource.from_contents(json.loads(path.read_text())) for path in [*SPEC.glob("*.json"), FACETS]]
    return Registry().with_resources((resource.id(), resource) for resource in resources)  # type: ignore[misc]


REGISTRY = _registry()


def problems(event: dict[str, Any]) -> list[str]:
    """What is wrong with ``event`` by OpenLineage's schema, and each facet by the schema its ``_schemaURL`` names
    (OpenLineage's facets, or compaction's): every facet is held to a schema known offline."""
    found = [f"event: {e.message}" for e in _validator("https://openlineage.io/spec/2-0-2/OpenLineage.json",
                                                       "#/$defs/RunEvent").iter_errors(event)]
    facets = [*(event["run"].get("facets") or {}).items(), *(event["job"].get("facets") or {}).items()]
    for dataset in event.get("inputs", []) + event.get("outputs", []):
        for kind in ("facets", "inputFacets", "outputFacets"):
            facets += list((dataset.get(kind) or {}).items())
    for name, facet in facets:
        document, _, pointer = facet["_schemaURL"].partition("#")
        if document not in {str(uri) for uri in REGISTRY}:
            found.append(f"facet {name}: its schema {document} is not known")
            continue
        found += [f"facet {name}: {e.message}" for e in _validator(document, "#" + pointer).iter_errors(facet)]
    return found


def _validator(document: str, pointer: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": document + pointer}, registry=REGISTRY,
                                           format_checker=jsonschema.FormatChecker())
