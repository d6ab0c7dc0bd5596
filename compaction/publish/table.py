"""The Iceberg table a topic is published as: its catalog, name, schema, partitioning and what it belongs to.

The schema is the record's (``compaction.schema.RECORD_SCHEMA``) with the Kafka partition first, as ``compaction
read`` returns a topic; the table is partitioned by ``partition`` (identity), a column no segment holds: readers
take it from each data file's partition value, as the Iceberg spec says for identity partitions. Segments are
written without Parquet field ids, so the table's default name mapping (``schema.name-mapping.default``) maps
their columns to its fields by name.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchTableError, NotInstalledError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
)

from compaction.errors import ConfigError, PublishError

#: Field ids as a new table assigns them (top-level fields first, then nested ones, in order).
SCHEMA = Schema(
    NestedField(1, "partition", IntegerType(), required=False),
    NestedField(2, "offset", LongType(), required=False),
    NestedField(3, "timestamp", LongType(), required=False),
    NestedField(4, "key", BinaryType(), required=False),
    NestedField(5, "value", BinaryType(), required=False),
    NestedField(
        6,
        "headers",
        ListType(
            13,
            StructType(
                NestedField(14, "key", StringType(), required=False),
                NestedField(15, "value", BinaryType(), required=False),
            ),
            element_required=False,
        ),
        required=False,
    ),
    NestedField(7, "producer_id", LongType(), required=False),
    NestedField(8, "producer_epoch", IntegerType(), required=False),  # Iceberg's smallest integer holds Kafka's Short
    NestedField(9, "is_transactional", BooleanType(), required=False),
    NestedField(10, "is_control", BooleanType(), required=False),
    NestedField(11, "control_type", StringType(), required=False),
    NestedField(12, "delete_horizon_ms", LongType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="partition"))

#: Table properties saying which store and topic a table publishes: another topic is never published into it.
STORE_PROPERTY, TOPIC_PROPERTY = "compaction.store", "compaction.topic"


def open_catalog(name: str, properties: Mapping[str, str]) -> Catalog:
    """The catalog ``name`` as pyiceberg configures it (``.pyiceberg.yaml``, ``PYICEBERG_CATALOG__NAME__*``), with
    ``properties`` (the ``[publish]`` table's) over its own; ConfigError when it cannot be loaded."""
    try:
        return load_catalog(name, **properties)
    except (ValueError, NotInstalledError, ImportError) as err:
        raise ConfigError(f"Iceberg catalog {name!r} cannot be loaded: {err}") from err


def identifier(text: str | None, namespace: str, topic: str) -> tuple[str, ...]:
    """``NAMESPACE.TABLE`` (the last dot splits), or the topic in ``namespace`` (a topic name may hold dots)."""
    if text is None:
        return (namespace, topic)
    *space, table = text.split(".")
    if not space or not all(space) or not table:
        raise ConfigError(f"--table {text!r} must look like NAMESPACE.TABLE")
    return (*space, table)


def open_table(catalog: Catalog, ident: tuple[str, ...], store_url: str, topic: str) -> Table:
    """The topic's table: created (format v2, partitioned by ``partition``) when absent; refused when it publishes
    another store or topic, or was not created by a publish."""
    name = ".".join(ident)
    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
        catalog.create_namespace_if_not_exists(ident[:-1])
        table = catalog.create_table_if_not_exists(
            ident,
            schema=SCHEMA,
            partition_spec=SPEC,
            properties={
                "format-version": "2",
                STORE_PROPERTY: store_url,
                TOPIC_PROPERTY: topic,
                TableProperties.DEFAULT_NAME_MAPPING: SCHEMA.name_mapping.model_dump_json(),
                # Each commit writes a metadata file: keep the last few, as a long-lived table should.
                TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
                # Segments carry Parquet statistics for these two columns only: their bounds let engines skip files.
                "write.metadata.metrics.default": "none",
                "write.metadata.metrics.column.offset": "full",
                "write.metadata.metrics.column.timestamp": "full",
            },
        )
    owner = (table.properties.get(STORE_PROPERTY), table.properties.get(TOPIC_PROPERTY))
    if owner == (None, None):
        raise PublishError(
            f"Iceberg table {name} exists and was not created by compaction publish: give another --table"
        )
    if owner != (store_url, topic):
        raise PublishError(
            f"Iceberg table {name} publishes topic {owner[1]} of store {owner[0]}, not topic {topic} "
            f"of {store_url}: give another --table"
        )
    if table.format_version != 2 or table.spec() != SPEC or table.schema().as_struct() != SCHEMA.as_struct():
        raise PublishError(
            f"Iceberg table {name} no longer has the schema, partitioning (identity on partition) or "
            f"format version (2) a publish writes"
        )
    return table
