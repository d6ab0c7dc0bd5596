"""A DAG downstream of the nightly compaction (compaction_nightly.py): scheduled on a cleaned topic's asset, it runs
once a night's run has cleaned that topic, every partition of it (a topic with a failed or uncleanable partition is
not marked updated, so it does not run on half-cleaned data).

Put the URI of your topic in ``ORDERS``: the topic's folder under the store's URL, as ``compaction_nightly`` names
it (``s3://my-bucket/topics/orders`` for the topic ``orders`` of the store ``s3://my-bucket/topics``). Each event of
the asset carries the run report's figures of the topic (partitions cleaned and skipped, records and bytes before
and after, the manifest version each cleaned partition committed) as its extra.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Asset, task

ORDERS = Asset("s3://my-bucket/topics/orders")

with DAG(
    dag_id="compaction_downstream",
    description="Reads the orders topic once compaction_nightly has cleaned it",
    schedule=[ORDERS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["compaction"],
) as dag:

    @task
    def read_orders(triggering_asset_events=None) -> None:  # type: ignore[no-untyped-def]
        for event in triggering_asset_events[ORDERS]:
            figures = event.extra
            print(
                f"{ORDERS.uri} cleaned by {event.source_dag_id} ({event.source_run_id}): "
                f"{figures.get('records_before')} -> {figures.get('records_after')} records, versions "
                f"{figures.get('versions')}"
            )

    read_orders()
