"""The store's contract on a real S3 API (a moto server on loopback): the unit tests that take the ``store`` or
``backend`` fixture, run again here with the backend S3 (they run on memory:// and a local folder in tests/unit/).

Listing, exclusive creates (conditional PUTs), reads of object ranges and every error are then the server's.
"""

from __future__ import annotations

from tests.unit.test_bad_input import (  # noqa: F401
    seeded,
    test_a_segment_that_cannot_be_read_is_reported_by_verify,
    test_a_segment_whose_bytes_changed_but_still_decode_is_never_read_whole,
    test_append_overlapping_an_existing_segment,
    test_manifest_referencing_a_missing_object,
    test_manifest_referencing_a_path_outside_its_partition,
    test_manifest_that_is_not_json,
    test_manifest_with_overlapping_segments,
    test_segment_with_a_wrong_column_type,
    test_truncated_segment,
    test_truncated_segment_of_the_recorded_size_is_still_named,
)
from tests.unit.test_crash import (  # noqa: F401
    test_crash_at_every_step_leaves_old_or_new_version,
)
from tests.unit.test_hostile_input import (  # noqa: F401
    test_every_backend_lists_only_legal_partitions_and_names_the_rest,
)
from tests.unit.test_store import (  # noqa: F401
    test_a_change_that_breaks_the_manifest_rules_is_a_bug_not_a_conflict,
    test_an_error_a_change_raises_passes_through_as_itself,
    test_append_and_read_touch_only_the_partitions_manifests_and_asked_objects,
    test_append_assigns_offsets_from_the_log_end,
    test_append_keeps_explicit_offsets_and_gaps,
    test_append_rejects_unordered_offsets,
    test_deletion_vector_hides_offsets_from_readers,
    test_explicit_offsets_overlapping_the_log_are_rejected_and_nothing_changes,
    test_listing_topics_and_partitions,
    test_many_partitions_on_an_object_store_have_their_versions_listed_by_topic,
    test_missing_partition_is_a_typed_error,
    test_open_transactions_bound_the_last_stable_offset,
    test_read_returns_an_offset_range_from_the_overlapping_segments_only,
    test_replace_of_a_segment_someone_else_replaced_is_a_conflict,
    test_replace_rebases_over_a_concurrent_append,
    test_replace_swaps_segments_and_moves_the_checkpoint,
)
