"""Executor-side work, one module per stage, all on pyarrow and fsspec (the same code reads local disk and S3).

- :mod:`~compaction.clean.tasks.facts`: read the fact columns of a cleaned range and give them the rules'
  facts (and, for a split partition, read a run of segments once for every key range);
- :mod:`~compaction.clean.tasks.key_ranges`: a split partition's key ranges: each row's range, a hash of its key;
- :mod:`~compaction.clean.tasks.decide`: each key's winner with Arrow, and the verdicts a deciding stage hands over
  to the applying one through the store;
- :mod:`~compaction.clean.tasks.apply`: the verdicts applied (rewrites, deletion vectors), and a whole
  partition decided and applied in one task;
- :mod:`~compaction.clean.tasks.erased`: what erasure requests erase that the objects still hold, and the keys
  the verdicts erase;
- :mod:`~compaction.clean.tasks.objects`: the names of the objects a task attempt writes.

Each runs through :mod:`compaction.engine.isolation`, so that a failure stops only its partition.
"""
