"""Publishing the clean log as an Iceberg table, without copying it: ``compaction publish``, and ``run`` with
``[publish] after.run``.

- :mod:`~compaction.publish.target`: where topics are published (:class:`Target`: the catalog, its properties, the
  tables' namespace, how long a replaced snapshot stays) and the entry points the application calls: a topic, a
  run's topics, the catalog checked before a run, a line per publish, the catalog's secrets masked in errors.
- :mod:`~compaction.publish.topic`: one topic at pinned versions checked and committed as its table's next snapshot.
- :mod:`~compaction.publish.table`: the catalog (configured as pyiceberg configures catalogs) and the topic's
  table: the record schema with the Kafka partition, identity-partitioned, a name mapping for the segments.
- :mod:`~compaction.publish.files`: a partition's live Parquet segments as data files, and what readers skip in
  them (deletion vectors, records below the log start) as v2 position delete files.
- :mod:`~compaction.publish.snapshot`: one snapshot per publish naming each partition's manifest version, the
  catalog's commit check and its retry, pins that keep gc off what retained snapshots read, and expiry.

pyiceberg is an optional dependency (``pip install 'compaction[iceberg]'``): this package and :mod:`.target` import
none of it; the other modules do, and :mod:`.target` loads them when a publish runs.
"""

from compaction.publish.target import Target, check_catalog, describe_publish, publish_topic, publish_topics, redacted

__all__ = ["Target", "check_catalog", "describe_publish", "publish_topic", "publish_topics", "redacted"]
