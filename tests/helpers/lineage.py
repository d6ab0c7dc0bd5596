"""A loopback OpenLineage endpoint that collects the events it is sent (or holds each request without answering),
and the check every event is held to, offline: structured into openlineage-python's classes, which the OpenLineage
project generates from its published JSON schemas, and compaction's own facets validated against their schema."""

from __future__ import annotations

import gzip
import json
import threading
import types
import typing
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from typing import Any

import attrs
import jsonschema
from openlineage.client.event_v2 import RunEvent
from openlineage.client.generated import (
    base,
    environment_variables_run,
    error_message_run,
    job_type_job,
    nominal_time_run,
    output_statistics_output_dataset,
    parent_run,
    processing_engine_run,
    schema_dataset,
    tags_job,
    tags_run,
)
from referencing import Registry, Resource

from compaction.lineage.figures import FACETS_SCHEMA
from tests.helpers import ROOT

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


#: The standard facets the job's events carry, by their key in an event (the tags, and the environment variables
#: where configured, the client adds itself): each is structured into the class openlineage-python generates for it
#: from OpenLineage's schema, for the run, the job or a dataset as the key is found, and must carry that class's
#: ``_get_schema()`` as its ``_schemaURL`` (the facet's version).
STANDARD_FACETS: dict[str, tuple[type[base.BaseFacet], ...]] = {
    "processing_engine": (processing_engine_run.ProcessingEngineRunFacet,),
    "nominalTime": (nominal_time_run.NominalTimeRunFacet,),
    "parent": (parent_run.ParentRunFacet,),
    "errorMessage": (error_message_run.ErrorMessageRunFacet,),
    "tags": (tags_run.TagsRunFacet, tags_job.TagsJobFacet),
    "environmentVariables": (environment_variables_run.EnvironmentVariablesRunFacet,),
    "jobType": (job_type_job.JobTypeJobFacet,),
    "schema": (schema_dataset.SchemaDatasetFacet,),
    "outputStatistics": (output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet,),
}
#: The kinds of facet of OpenLineage's event schema, by their schema URL: a facet of compaction's extends one of them.
FACET_KINDS = {
    kind._get_schema(): kind
    for kind in (base.RunFacet, base.JobFacet, base.DatasetFacet, base.InputDatasetFacet, base.OutputDatasetFacet)
}
#: What the schema requires of every event and facet and the client's classes fill in themselves (so that they give
#: them defaults): the producer and the schema URL.
FILLED_IN = {"producer", "schemaURL", "_producer", "_schemaURL"}
#: The formats the generated classes validate, known by what their validators parse a value with; each is checked to
#: JSON Schema's meaning (an RFC 3986 URI, an RFC 3339 date-time, a UUID) by jsonschema's format checker.
PARSED_WITH = {"urlparse": "uri", "isoparse": "date-time", "UUID": "uuid"}
FORMATS = jsonschema.FormatChecker()
if unchecked := set(PARSED_WITH.values()) - FORMATS.checkers.keys():
    raise ImportError(f"jsonschema cannot check the formats {sorted(unchecked)}: install jsonschema[format-nongpl]")
JSON_TYPES: dict[Any, tuple[type, ...]] = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}
OWN = json.loads(FACETS.read_text())
REGISTRY = Registry().with_resource(FACETS_SCHEMA, Resource.from_contents(OWN))
CLIENT = f"openlineage-python {version('openlineage-python')}"


def problems(event: dict[str, Any]) -> list[str]:
    """What is wrong with ``event`` (the JSON a transport sent), each with where: the event structured into
    openlineage-python's ``RunEvent`` and on down into the classes of its run, job, datasets and facets (every field
    those classes require, of its type, in its format, and no field they do not name), each standard facet by its
    key into its own class and at the version that class names, and each facet of compaction's by the definition its
    ``_schemaURL`` names in compaction/lineage/facets.json."""
    found: list[str] = []
    _object(event, RunEvent, "event", found)
    return found


def _object(
    value: Any,
    cls: type[Any],
    path: str,
    found: list[str],
    schema_url: str | None = None,
    added: frozenset[str] = frozenset(),
) -> Any:
    """``value`` as an instance of the generated class ``cls``, or None with what is wrong added to ``found``;
    ``schema_url``, the ``_schemaURL`` it must carry if not its class's; ``added``, the fields a facet of compaction's
    adds to ``cls``."""
    if not isinstance(value, dict):
        found.append(f"{path}: expected an object ({cls.__name__}), got {_kind(value)}")
        return None
    before = len(found)
    fields = attrs.fields(attrs.resolve_types(cls))
    names = [*(field.name for field in fields), *sorted(added)]
    found += [f"{path}: unknown field {key!r} (known: {', '.join(names)})" for key in value if key not in names]
    arguments = {}
    for field in fields:
        where = f"{path}.{field.name}"
        if field.name not in value:
            if field.default is attrs.NOTHING or field.name in FILLED_IN:
                found.append(f"{path}: missing {field.name}, which {cls.__name__} requires")
        elif field.name in ("schemaURL", "_schemaURL"):
            expected = schema_url or cls._get_schema()
            if value[field.name] != expected:
                found.append(
                    f"{where}: {value[field.name]!r} is not the schema of {cls.__name__} in {CLIENT}, {expected}"
                )
        else:
            arguments[field.alias] = _value(
                value[field.name], field.type, where, found, nullable=field.default is attrs.NOTHING
            )
            form = _format(field)
            if form and isinstance(value[field.name], str) and not FORMATS.conforms(value[field.name], form):
                found.append(f"{where}: {value[field.name]!r} is not a {form}")
    if len(found) > before:
        return None
    try:
        return cls(**arguments)
    except (TypeError, ValueError) as e:
        found.append(f"{path}: {cls.__name__} refuses it: {e}")
        return None


def _value(value: Any, kind: Any, path: str, found: list[str], nullable: bool = False) -> Any:
    """``value`` as the type ``kind`` of a generated class's field. ``X | None`` is an optional field, which the
    client leaves out rather than writing null; null only where a required one is ``X | None`` (``nullable``)."""
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        options = [option for option in arguments if option is not type(None)]
        if value is None and nullable and len(options) < len(arguments):
            return None
        if len(options) == 1:
            return _value(value, options[0], path, found)
        for option in options:
            tried: list[str] = []
            result = _value(value, option, path, tried)
            if not tried:
                return result
        found.append(f"{path}: {_kind(value)} is none of {', '.join(map(_name, options))}")
        return None
    if isinstance(kind, type) and issubclass(kind, Enum):
        if value not in [member.value for member in kind]:
            found.append(f"{path}: {value!r} is none of {', '.join(repr(member.value) for member in kind)}")
            return None
        return kind(value)
    if origin is typing.Literal:
        if value not in arguments:
            found.append(f"{path}: {value!r} is none of {', '.join(map(repr, arguments))}")
        return value
    expected = {list: list, dict: dict}.get(origin) or (dict if attrs.has(kind) else None)
    if expected is not None and not isinstance(value, expected):
        found.append(f"{path}: expected {_name(kind)}, got {_kind(value)}")
        return None
    if origin is list:
        return [_value(item, arguments[0], f"{path}[{i}]", found) for i, item in enumerate(value)]
    if origin is dict:
        if isinstance(arguments[1], type) and issubclass(arguments[1], base.BaseFacet):
            return {key: _facet(key, facet, arguments[1], f"{path}.{key}", found) for key, facet in value.items()}
        return {key: _value(item, arguments[1], f"{path}.{key}", found) for key, item in value.items()}
    if attrs.has(kind):
        return _object(value, kind, path, found)
    if kind is Any:
        return value
    if kind not in JSON_TYPES:
        raise TypeError(f"{path}: the check does not know the type {kind!r}")
    if not isinstance(value, JSON_TYPES[kind]) or (isinstance(value, bool) and kind is not bool):
        found.append(f"{path}: expected {_name(kind)}, got {_kind(value)}")
        return None
    return value


def _facet(key: str, value: Any, kind: type[base.BaseFacet], path: str, found: list[str]) -> Any:
    """The facet under ``key`` where the schema has a facet of ``kind`` (a run, job, dataset, input or output facet):
    compaction's by its ``_schemaURL``, a standard one by its key."""
    url = value.get("_schemaURL") if isinstance(value, dict) else None
    if isinstance(url, str) and url.startswith(f"{FACETS_SCHEMA}#"):
        return _own(value, url, kind, path, found)
    standard = [facet for facet in STANDARD_FACETS.get(key, ()) if issubclass(facet, kind)]
    if not standard:
        found.append(
            f"{path}: {key!r} is the key of no standard {kind.__name__} the job's events carry, and its "
            f"_schemaURL {url!r} names none of compaction's"
        )
        return None
    return _object(value, standard[0], path, found)


def _own(value: dict[str, Any], url: str, kind: type[base.BaseFacet], path: str, found: list[str]) -> Any:
    """A facet of compaction's: structured into the kind of facet of OpenLineage's that its definition in facets.json
    extends (its ``$ref``), and validated against the definition's own part with jsonschema."""
    name = url.removeprefix(f"{FACETS_SCHEMA}#/$defs/")
    parts = OWN["$defs"].get(name, {}).get("allOf")
    if not parts:
        found.append(f"{path}._schemaURL: {url!r} names no facet defined in {FACETS.name}")
        return None
    refs = [part["$ref"] for part in parts if "$ref" in part]
    extended = FACET_KINDS.get(refs[0]) if len(refs) == 1 else None
    if extended is None or not issubclass(extended, kind):
        found.append(
            f"{path}: {name} extends {' and '.join(refs) or 'nothing'} in {FACETS.name}, where a "
            f"{kind.__name__} of {CLIENT} ({kind._get_schema()}) belongs"
        )
        return None
    added: set[str] = set()
    for i, part in enumerate(parts):
        if "$ref" not in part:
            added |= part.get("properties", {}).keys()
            validator = jsonschema.Draft202012Validator(
                {"$ref": f"{FACETS_SCHEMA}#/$defs/{name}/allOf/{i}"}, registry=REGISTRY, format_checker=FORMATS
            )
            found += [
                f"{path}{''.join(f'.{step}' for step in error.absolute_path)}: {error.message}"
                for error in validator.iter_errors(value)
            ]
    return _object(value, extended, path, found, schema_url=url, added=frozenset(added))


def _format(field: attrs.Attribute) -> str | None:
    """The format a generated class validates ``field`` to, known by what its validator parses the value with."""
    if field.validator is None:
        return None
    used = set(field.validator.__code__.co_names) & PARSED_WITH.keys()
    if len(used) != 1:
        raise TypeError(f"the check does not know what the validator of the field {field.name} checks")
    return PARSED_WITH[used.pop()]


def _kind(value: Any) -> str:
    """A JSON value's type, as a message names it, with the value."""
    kinds = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "an object",
        type(None): "null",
    }
    return f"{kinds.get(type(value), type(value).__name__)} ({json.dumps(value)[:60]})"


def _name(kind: Any) -> str:
    """A type of a generated class's field, as a message names it."""
    if attrs.has(kind):
        return f"an object ({kind.__name__})"
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        list: "an array",
        dict: "an object",
    }
    return names.get(typing.get_origin(kind) or kind, repr(kind))
