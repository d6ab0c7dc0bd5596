"""Erasure requests: forget a key everywhere in the store, within a bound, and prove it.

A compacted topic is how Kafka users carry out a right-to-erasure request: a tombstone for the key, and
compaction removes its older values. In an object store those values can outlive the request in three places: a
clean segment where a deletion vector only hides them, a superseded segment waiting out gc's grace, an orphaned
object gc has not reached. This package closes all three, over the layers below it:

- :mod:`~compaction.erasure.requests`: ``forget`` finds the partitions that hold a key, appends a tombstone for it
  there and records a request in the manifest (the key's SHA-256 digest, never the key; when; the deadline).
- the cleaner (:mod:`compaction.clean`) selects a partition with a pending request at once, rolls its active
  segment, drops every record of the key below the tombstone whatever its version (``rules``, rule 0) and rewrites
  every segment whose object holds one, seen or hidden (``layout.lay_out``); the commit marks the request
  rewritten.
- gc (:mod:`compaction.store.gc`, :mod:`compaction.store.erasure`) removes what still holds the key after
  ``erasure.grace.ms`` and marks the request gone once nothing under the partition's folders does.
- :mod:`~compaction.erasure.status`: each request's state and what it waits for (``compaction erasure``).
- :mod:`~compaction.erasure.proof`: ``attest``, a proof from every object (``compaction attest``).
"""

from compaction.erasure.proof import Proof, attest
from compaction.erasure.requests import DEFAULT_ERASURE_MAX_DELAY_MS, Forgotten, forget, request_erasure
from compaction.erasure.status import RequestStatus, erasure_status, overdue_requests

__all__ = [
    "DEFAULT_ERASURE_MAX_DELAY_MS",
    "Forgotten",
    "Proof",
    "RequestStatus",
    "attest",
    "erasure_status",
    "forget",
    "overdue_requests",
    "request_erasure",
]
