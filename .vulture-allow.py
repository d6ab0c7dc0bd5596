"""Names vulture cannot see used: serialized fields, pydantic hooks, attributes set on library objects, the public API."""
# ruff: noqa
__getattr__  # PEP 562: the lazy public API (compaction/__init__.py)
__dir__  # PEP 562 (compaction/__init__.py)
messages_read  # unused variable (compaction/clean/results.py:42)
map_bytes_read  # unused variable (compaction/clean/results.py:43)
bytes_read  # unused variable (compaction/clean/results.py:44)
messages_written  # unused variable (compaction/clean/results.py:45)
invalid_messages_read  # unused variable (compaction/clean/results.py:47)
segments_emptied  # unused variable (compaction/clean/results.py:51)
segments_expired  # unused variable (compaction/clean/results.py:54)
version_before  # unused variable (compaction/clean/results.py:73)
version_after  # unused variable (compaction/clean/results.py:74)
checkpoint_before  # unused variable (compaction/clean/results.py:75)
payload_version  # unused variable (compaction/engine/codec.py)
bytes_read  # unused variable (compaction/clean/payloads.py:212)
model_config  # unused variable (compaction/clean/settings.py:140)
model_config  # unused variable (compaction/config.py:49)
model_config  # unused variable (compaction/config.py:66)
model_config  # unused variable (compaction/config.py:81)
_._gather_broker_names  # unused method (compaction/config.py:89)
_._check_broker_keys  # unused method (compaction/config.py:99)
_._check_topic_keys  # unused method (compaction/config.py:108)
read_batches  # public API: compaction.read_batches (compaction/read/scan.py:168)
model_config  # unused variable (compaction/store/manifest.py:54)
_._check_path  # unused method (compaction/store/manifest.py:70)
_._check  # unused method (compaction/store/manifest.py:123)
_._check  # unused method (compaction/store/manifest.py:227)
last_commit_ms  # unused variable (compaction/store/status.py:28)
_.retries  # unused attribute (compaction/store/storage.py:172)
driver_bytes  # a report field (compaction/clean/results.py)
LocalStages  # the engine's in-process stages, which the tests run the pass through (compaction/engine/stages.py)
_.eval  # a Python UDTF's row function, which Spark calls (compaction/spark/functions.py)
_.pushFilters  # the Python data source API's names, which Spark calls (compaction/spark/)
_.abort
_.streamReader
_.streamWriter
_.initialOffset
_.latestOffset
