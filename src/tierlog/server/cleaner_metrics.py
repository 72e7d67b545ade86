"""The log cleaner's Prometheus metrics, named after Kafka's (kafka.log:type=LogCleaner and
LogCleanerManager): ``max-dirty-percent`` → ``tierlog_log_cleaner_max_dirty_percent`` and so on,
plus per-partition dirty ratio and bytes cleaned. Read from the cleaner's plain figures at scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tierlog.storage.cleaner.manager import LogCleaner


def cleaner_metrics(cleaner: LogCleaner | None) -> Iterator[Metric]:
    if cleaner is None:
        return
    now_ms = cleaner.clock.wall_ms()
    m = cleaner.metrics
    gauges = [
        ("max_dirty_percent", "max-dirty-percent: the dirty share of the dirtiest compacted log, in percent.",
         m.max_dirty_percent),
        ("time_since_last_run_ms", "time-since-last-run-ms: since the cleaner last finished a pass.",
         cleaner.time_since_last_run_ms(now_ms)),
        ("max_clean_time_secs", "max-clean-time-secs: the longest of each cleaner thread's last cleaning.",
         m.max_clean_time_secs),
        ("max_buffer_utilization_percent", "max-buffer-utilization-percent: how full the key to offset map got "
         "in the last cleaning.", m.max_buffer_utilization_percent),
        ("cleaner_recopy_percent", "cleaner-recopy-percent: bytes written over bytes read in the last cleaning.",
         m.cleaner_recopy_percent),
        ("max_compaction_delay_secs", "max-compaction-delay-secs: how far past max.compaction.lag.ms the most "
         "overdue log is.", m.max_compaction_delay_secs),
        ("dead_thread_count", "DeadThreadCount: cleaner threads that died.", m.dead_thread_count),
    ]
    for name, doc, value in gauges:
        yield GaugeMetricFamily(f"tierlog_log_cleaner_{name}", doc, value=value)
    # Per log dir, as Kafka tags them (logDirectory).
    count = GaugeMetricFamily("tierlog_log_cleaner_uncleanable_partitions_count", "uncleanable-partitions-count: "
                              "partitions the cleaner stopped cleaning (damaged data, a failed cleaning).",
                              labels=["log_directory"])
    size = GaugeMetricFamily("tierlog_log_cleaner_uncleanable_bytes", "uncleanable-bytes: dirty bytes of those "
                             "partitions.", labels=["log_directory"])
    for d in dict.fromkeys([*(str(p) for p in cleaner.manager.log_dirs), *m.uncleanable_partitions_by_dir]):
        count.add_metric([d], m.uncleanable_partitions_by_dir.get(d, 0))
        size.add_metric([d], m.uncleanable_bytes_by_dir.get(d, 0))
    yield count
    yield size
    yield CounterMetricFamily("tierlog_log_cleaner_read_bytes", "Bytes the cleaner read.", value=m.bytes_read)
    yield CounterMetricFamily("tierlog_log_cleaner_written_bytes", "Bytes the cleaner wrote.", value=m.bytes_written)
    labels = ["topic", "partition"]
    ratio = GaugeMetricFamily("tierlog_log_cleaner_dirty_ratio", "A compacted partition's dirty bytes over its "
                              "cleanable bytes.", labels=labels)
    cleaned = CounterMetricFamily("tierlog_log_cleaner_partition_cleaned_bytes", "Bytes the cleaner read while "
                                  "cleaning the partition.", labels=labels)
    for (topic, partition), state in sorted(cleaner.states.items()):
        ratio.add_metric([topic, str(partition)], state.dirty_ratio)
        cleaned.add_metric([topic, str(partition)], state.bytes_cleaned)
    yield ratio
    yield cleaned
