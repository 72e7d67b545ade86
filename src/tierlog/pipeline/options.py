"""The options of ``format("tierlog")``: Spark's Kafka source options with the location options
replaced by ``path`` and the broker's remote-tier keys, parsed and checked the way Spark's Kafka
source checks them (same names, same rules, errors that say which option is wrong)."""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tierlog.config.broker_config import BrokerConfig
from tierlog.errors import TierlogError
from tierlog.ids import TopicPartition
from tierlog.pipeline.broker_tail import BrokerSpec, consumer_options
from tierlog.pipeline.catalog import (
    PartitionLog,
    aborted_transactions,
    discover,
    discover_without_disk,
    last_stable_offset,
    offset_for_timestamp,
)
from tierlog.pipeline.reader import RemoteSpec, ScanRange, props_tuple
from tierlog.tiered.api import plugin_properties
from tierlog.tiered.layout import METADATA_DIR_NAME, default_local_remote_dir

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1
#: Spark's Kafka source's words when failOnDataLoss is false and offsets are skipped.
DATA_LOSS_WARNING = ("Some data may have been lost because they are not available in the log any more; either the "
                     "data was aged out by retention or the topic may have been deleted before all the data in the "
                     "topic was processed. If you want your query to fail on such cases, set the source option "
                     "\"failOnDataLoss\" to \"true\".")
_LOCAL_RSM = "LocalDirectoryRemoteStorageManager"
_RSM_CLASS = "remote.log.storage.manager.class.name"
_RSM_PREFIX = "remote.log.storage.manager.impl.prefix"


class TierlogOptionError(TierlogError, ValueError):
    """An option is missing, malformed or not valid for this kind of query."""


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: ``earliest``, ``latest``, per-partition offsets (with -2/-1),
    one timestamp for every partition, or per-partition timestamps."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = 0

    def describe(self) -> str:
        return self.kind if self.kind in ("earliest", "latest") else f"{self.kind} {dict(self.offsets) or self.timestamp}"


@dataclass(frozen=True)
class ReadOptions:
    paths: tuple[str, ...]
    remote: RemoteSpec | None
    subscribe: tuple[str, ...] | None = None
    pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    starting_strategy: str = "error"
    include_headers: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    #: ``maxBytesPerPartition``: segment ranges are packed into Spark input partitions of up to this
    #: many bytes (None: Spark's rule for files, see :func:`tierlog.pipeline.packing.pack_ranges`).
    max_bytes_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    check_crcs: bool = True
    #: ``pruneByFilters``: whether the batch reader takes Spark's pushed filters (partition, offset,
    #: timestamp) to skip what cannot match. Off by default: Spark 4.3 keeps the partitions one query
    #: planned from its filters on the DataFrame and reuses them for a later query on the same
    #: DataFrame without filters, which then silently reads too few rows.
    prune_by_filters: bool = False
    #: The consumer's isolation.level: read_committed stops at the last stable offset and skips
    #: aborted transactions; read_uncommitted (Kafka's and Spark's default) returns both.
    read_committed: bool = False
    #: Where the offsets the remote tier does not hold come from: "local" (the log dirs in
    #: ``paths``), "broker" (``broker``, with the Kafka protocol) or "none" (only the remote tier).
    tail: str = "local"
    broker: BrokerSpec | None = None

    def latest(self, plog: PartitionLog) -> int:
        """Where "latest" is for this reader: the log end, or the last stable offset."""
        return last_stable_offset(plog) if self.read_committed else plog.latest

    # -- which partitions ------------------------------------------------------------------------------

    def partitions(self, logs: Mapping[TopicPartition, PartitionLog]) -> list[PartitionLog]:
        """The partitions to read. A subscribed topic or an assigned partition that is in neither tier
        is an error naming what was looked for and where: an empty result would look like an empty
        topic. (A pattern matching nothing is not: Spark's Kafka source reads nothing then too.)"""
        if self.assign is not None:
            missing = [tp for tp in self.assign if tp not in logs]
            if missing:
                raise TierlogOptionError(
                    f"option 'assign': {', '.join(f'{t}-{p}' for t, p in missing)} not found in {self._where()}"
                    f"{self._topics_hint(logs, {t for t, _ in missing})}")
            return [logs[tp] for tp in self.assign]
        if self.subscribe is not None:
            wanted = set(self.subscribe)
            missing_topics = sorted(wanted - {t for t, _ in logs})
            if missing_topics:
                raise TierlogOptionError(
                    f"option 'subscribe': topic {', '.join(map(repr, missing_topics))} not found in {self._where()}"
                    f"{self._topics_hint(logs, set(missing_topics))}")
            return [logs[tp] for tp in sorted(logs) if tp[0] in wanted]
        assert self.pattern is not None
        regex = re.compile(self.pattern)
        # The consumer's pattern subscription leaves out internal topics (exclude.internal.topics).
        return [logs[tp] for tp in sorted(logs) if not tp[0].startswith("__") and regex.fullmatch(tp[0])]

    def discover(self) -> dict[TopicPartition, PartitionLog]:
        if self.tail == "local":
            return discover([Path(p) for p in self.paths], self.remote)
        return discover_without_disk(self.remote, self.broker if self.tail == "broker" else None, self.wants_topic)

    def wants_topic(self, topic: str) -> bool:
        """Whether a topic can hold partitions to read (so the broker is asked only about those)."""
        if self.assign is not None:
            return any(t == topic for t, _ in self.assign)
        if self.subscribe is not None:
            return topic in self.subscribe
        return self.pattern is not None and not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None

    def _where(self) -> str:
        if self.tail == "broker" and self.broker is not None:
            where = f"the broker at {self.broker.bootstrap}"
        elif self.tail == "none":
            where = "the remote tier's manifests"
        else:
            where = f"the log director{'y' if len(self.paths) == 1 else 'ies'} {', '.join(self.paths)}"
            if self.remote is not None:
                where += " or the remote tier"
        return where

    @staticmethod
    def _topics_hint(logs: Mapping[TopicPartition, PartitionLog], missing: set[str]) -> str:
        present = sorted({t for t, _ in logs})
        partitions = {t: sorted(p for tt, p in logs if tt == t) for t in missing if t in present}
        if partitions:
            return " (it has partitions " + "; ".join(f"{t}: {ps}" for t, ps in partitions.items()) + ")"
        return f" (topics there: {', '.join(present[:20])}{', ...' if len(present) > 20 else ''})" if present else ""


# -- Spark conf -------------------------------------------------------------------------------------------

#: Spark conf keys under this prefix are option defaults: ``spark.tierlog.s3.X`` is the S3 plugin's
#: ``rsm.config.s3.X``, and ``spark.tierlog.<option>`` any other option (e.g. ``spark.tierlog.
#: remote.log.storage.manager.class.name``). Options given to the reader win.
SPARK_CONF_PREFIX = "spark.tierlog."
#: Hadoop's S3A settings that mean the same to the S3 plugin (a cluster that reads S3 has them set).
S3A_CONF = {
    "spark.hadoop.fs.s3a.access.key": "rsm.config.s3.access.key.id",
    "spark.hadoop.fs.s3a.secret.key": "rsm.config.s3.secret.access.key",
    "spark.hadoop.fs.s3a.session.token": "rsm.config.s3.session.token",
    "spark.hadoop.fs.s3a.endpoint": "rsm.config.s3.endpoint",
    "spark.hadoop.fs.s3a.endpoint.region": "rsm.config.s3.region",
}


def conf_options(conf: Mapping[str, str]) -> dict[str, str]:
    """The data-source option defaults a Spark conf holds (S3A's first, then ``spark.tierlog.*``)."""
    out = {option: conf[key] for key, option in S3A_CONF.items() if conf.get(key)}
    for key, value in conf.items():
        if key.startswith(SPARK_CONF_PREFIX + "s3."):
            out["rsm.config." + key[len(SPARK_CONF_PREFIX):]] = value
        elif key.startswith(SPARK_CONF_PREFIX):
            out[key[len(SPARK_CONF_PREFIX):]] = value
    return out


def with_defaults(defaults: Mapping[str, str], options: Mapping[str, str]) -> dict[str, str]:
    """``options`` over ``defaults``, keys compared without case as Spark compares option names."""
    given = {k.lower() for k in options}
    return {**{k: v for k, v in defaults.items() if k.lower() not in given}, **options}


# -- parsing ---------------------------------------------------------------------------------------------


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise TierlogOptionError(f"option '{key}' must be true or false, got {raw!r}")
    return value == "true"


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise TierlogOptionError(f"option '{key}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise TierlogOptionError(f"option '{key}' must be a positive integer, got {raw!r}")
    return value


def _json_object(key: str, raw: str) -> dict[str, object]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise TierlogOptionError(f"option '{key}' is not valid JSON ({e}): {raw!r}") from None
    if not isinstance(value, dict):
        raise TierlogOptionError(f"option '{key}' must be a JSON object, got {raw!r}")
    return value


def _partition_map(key: str, raw: str) -> dict[TopicPartition, int]:
    """``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}``."""
    out: dict[TopicPartition, int] = {}
    for topic, parts in _json_object(key, raw).items():
        if not isinstance(parts, dict):
            raise TierlogOptionError(f"option '{key}': expected {{\"{topic}\": {{\"0\": value}}}}, got {raw!r}")
        for p, value in parts.items():
            if not (isinstance(p, str) and p.lstrip("-").isdigit()) or not isinstance(value, int) or isinstance(value, bool):
                raise TierlogOptionError(f"option '{key}': partition {p!r} of {topic!r} needs an integer, got {raw!r}")
            out[(topic, int(p))] = value
    return out


def _assign(raw: str) -> tuple[TopicPartition, ...]:
    """``{"topicA":[0,1],"topicB":[2,4]}``."""
    out: list[TopicPartition] = []
    for topic, parts in _json_object("assign", raw).items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise TierlogOptionError(f"option 'assign': expected {{\"{topic}\": [0, 1]}}, got {raw!r}")
        out.extend((topic, p) for p in parts)
    return tuple(out)


def _timestamp(key: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise TierlogOptionError(f"option '{key}' must be a timestamp in milliseconds, got {raw!r}") from None


def _offset_spec(options: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    """Spark's precedence: the global timestamp, then per-partition timestamps, then offsets."""
    ts = options.get(f"{which}timestamp")
    if ts is not None:
        return OffsetSpec("timestamp", timestamp=_timestamp(f"{which}Timestamp", ts))
    by_ts = options.get(f"{which}offsetsbytimestamp")
    if by_ts is not None:
        return OffsetSpec("timestamps", _partition_map(f"{which}OffsetsByTimestamp", by_ts))
    raw = options.get(f"{which}offsets", default).strip()
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec(raw.lower())
    return OffsetSpec("offsets", _partition_map(f"{which}Offsets", raw))


def remote_spec(options: Mapping[str, str], config: BrokerConfig | None, first_dir: Path | None) -> RemoteSpec | None:
    """The remote tier as the broker sees it: options override the config file's keys, and the
    local-directory plugin defaults to the broker's default directory beside the first log dir
    (None: no log dir and no option naming the tier)."""
    class_name = options.get(_RSM_CLASS) or (config.get_str(_RSM_CLASS) if config else None)
    if not class_name:
        class_name = "tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager"
    prefix = options.get(_RSM_PREFIX) or (config.get_str(_RSM_PREFIX) if config else "rsm.config.")
    props = plugin_properties(config.plugin_props, prefix) if config else {}
    props.update(plugin_properties(options, prefix))
    defaulted = False
    if class_name.endswith(_LOCAL_RSM) and "dir" not in props:
        if first_dir is None:
            return None
        props["dir"] = str(default_local_remote_dir(first_dir.resolve()))
        defaulted = True
    return RemoteSpec(class_name, props_tuple(props), str(first_dir / METADATA_DIR_NAME) if first_dir else "", defaulted)


#: The kafka.* options the source interprets itself; the others go to the tail's consumer.
_INTERPRETED_KAFKA = frozenset({"kafka.bootstrap.servers", "kafka.isolation.level", "kafka.check.crcs"})
TAILS = ("broker", "local", "none")


def _tail(options: Mapping[str, str], paths: tuple[str, ...], master: str | None) -> str:
    """``tail``: given, else local where Spark runs here (a local master) with a path that is a log
    dir here -- or any path when no broker is named, so a mistyped one is reported as such -- and
    broker otherwise."""
    raw = options.get("tail")
    if raw is not None:
        tail = raw.strip().lower()
        if tail not in TAILS:
            raise TierlogOptionError(f"option 'tail' must be one of {', '.join(TAILS)}, got {raw!r}")
        return tail
    local_master = master is None or master.strip().lower().startswith("local")
    here = bool(paths) and (Path(paths[0]).is_dir() or not options.get("kafka.bootstrap.servers", "").strip())
    return "local" if local_master and here else "broker"


def _broker_spec(raw: Mapping[str, str], options: Mapping[str, str], tail: str, read_committed: bool,
                 config: BrokerConfig | None) -> BrokerSpec | None:
    if tail != "broker":
        return None
    bootstrap = options.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise TierlogOptionError(
            "option 'tail' is broker (the default unless the master is local and the path a log dir here): "
            "give option 'kafka.bootstrap.servers' to read the offsets not in the remote tier through the "
            "broker, or tail=local (every node sees the log dirs) or tail=none (only the remote tier)")
    props = {"bootstrap.servers": bootstrap, **consumer_options(raw, _INTERPRETED_KAFKA)}
    return BrokerSpec(props_tuple(props), read_committed)


def parse_options(raw: Mapping[str, str], *, streaming: bool = False, master: str | None = None) -> ReadOptions:
    """``master``: Spark's master URL (None: a local one), for the default of ``tail``."""
    # Spark's Kafka options are case-insensitive; the plugin's rsm.config.* values keep their case.
    options = {k.lower(): v for k, v in raw.items()}
    config: BrokerConfig | None = None
    if options.get("config"):
        try:
            config = BrokerConfig.from_file(Path(options["config"]))
        except OSError as e:
            raise TierlogOptionError(f"option 'config': cannot read {options['config']}: {e}") from None
    paths = tuple(p.strip() for p in options.get("path", "").split(",") if p.strip())
    if not paths and config is not None:
        paths = tuple(str(d) for d in config.log_dirs)
    tail = _tail(options, paths, master)
    if not paths and tail == "local":
        raise TierlogOptionError("option 'path' is required with tail=local: the broker's log directory (comma-separate "
                                 "several); or read through a broker (tail=broker, kafka.bootstrap.servers)")
    plugin_options = {k: v for k, v in raw.items() if k.lower() in (_RSM_CLASS, _RSM_PREFIX)
                      or k.lower().startswith("rsm.config.")}
    remote = remote_spec({k.lower() if not k.lower().startswith("rsm.") else k: v for k, v in plugin_options.items()},
                         config, Path(paths[0]) if paths else None)
    if remote is None and tail == "none":
        raise TierlogOptionError("tail=none reads only the remote tier: give its plugin and options "
                                 "(remote.log.storage.manager.class.name, rsm.config.*) or a path")

    given = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k, "").strip()]
    if len(given) != 1:
        names = "subscribe, subscribePattern, assign"
        if not given:
            raise TierlogOptionError(f"One of the following options must be specified for the tierlog source: {names}")
        raise TierlogOptionError(f"Only one of the following options can be specified for the tierlog source: {names}")
    subscribe = pattern = assign = None
    if given[0] == "subscribe":
        subscribe = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise TierlogOptionError("No topics to subscribe to as specified value for option 'subscribe' is empty")
    elif given[0] == "subscribepattern":
        pattern = options["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as e:
            raise TierlogOptionError(f"option 'subscribePattern' is not a valid pattern: {e}") from None
    else:
        assign = _assign(options["assign"])

    starting = _offset_spec(options, "starting", "latest" if streaming else "earliest")
    ending = _offset_spec(options, "ending", "latest")
    if streaming:
        for key in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if key in options:
                raise TierlogOptionError(f"option '{key}' is not valid for streaming queries")
    else:
        if starting.kind == "latest" or (starting.kind == "offsets" and LATEST in starting.offsets.values()):
            raise TierlogOptionError("starting offset can't be latest for batch queries on tierlog")
        if ending.kind == "earliest" or (ending.kind == "offsets" and EARLIEST in ending.offsets.values()):
            raise TierlogOptionError("ending offset can't be earliest for batch queries on tierlog")
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise TierlogOptionError(f"option 'startingOffsetsByTimestampStrategy' must be error or latest, got {strategy!r}")
    read_committed = _isolation(options)
    if read_committed and tail == "none":
        raise TierlogOptionError("kafka.isolation.level=read_committed needs tail=local or tail=broker: whether a "
                                 "tiered record was aborted can depend on a transaction marker not tiered yet")
    return ReadOptions(
        paths=paths, remote=remote, tail=tail,
        broker=_broker_spec(raw, options, tail, read_committed, config), subscribe=subscribe, pattern=pattern, assign=assign,
        starting=starting, ending=ending, starting_strategy=strategy,
        include_headers=_bool(options, "includeHeaders", False),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        min_partitions=_positive_int(options, "minPartitions"),
        max_records_per_partition=_positive_int(options, "maxRecordsPerPartition"),
        max_bytes_per_partition=_positive_int(options, "maxBytesPerPartition"),
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        check_crcs=_bool(options, "kafka.check.crcs", True),
        prune_by_filters=_bool(options, "pruneByFilters", False),
        read_committed=read_committed,
    )


def _isolation(options: Mapping[str, str]) -> bool:
    level = options.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if level not in ("read_uncommitted", "read_committed"):
        raise TierlogOptionError(f"option 'kafka.isolation.level' must be read_uncommitted or read_committed, "
                                 f"got {level!r}")
    return level == "read_committed"


# -- resolving positions to offsets ------------------------------------------------------------------------


def _require_all(spec: OffsetSpec, which: str, parts: Sequence[PartitionLog]) -> None:
    assigned = {(p.topic, p.partition) for p in parts}
    if set(spec.offsets) != assigned:
        raise TierlogOptionError(
            f"If {which} contains specific offsets, you must specify all TopicPartitions. "
            f"Use -1 for latest, -2 for earliest. Specified: {sorted(spec.offsets)} Assigned: {sorted(assigned)}")


def resolve(spec: OffsetSpec, which: str, parts: Sequence[PartitionLog], opts: ReadOptions) -> dict[TopicPartition, int]:
    """Each partition's offset for a starting or ending position (exclusive for ending)."""
    if spec.kind in ("offsets", "timestamps"):
        _require_all(spec, f"{which}Offsets" + ("ByTimestamp" if spec.kind == "timestamps" else ""), parts)
    out: dict[TopicPartition, int] = {}
    for plog in parts:
        tp = (plog.topic, plog.partition)
        if spec.kind == "earliest":
            out[tp] = plog.earliest
        elif spec.kind == "latest":
            out[tp] = opts.latest(plog)
        elif spec.kind == "offsets":
            value = spec.offsets[tp]
            out[tp] = plog.earliest if value == EARLIEST else opts.latest(plog) if value == LATEST else value
        else:
            ts = spec.timestamp if spec.kind == "timestamp" else spec.offsets[tp]
            found = offset_for_timestamp(plog, ts, opts.remote)
            if found is None:
                if which == "starting" and opts.starting_strategy == "error":
                    raise TierlogOptionError(
                        f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and timestamp {ts} "
                        "(startingOffsetsByTimestampStrategy=error; use latest to start at the end instead)")
                found = opts.latest(plog)
            out[tp] = found
    return out


def check_range(plog: PartitionLog, start: int, end: int, opts: ReadOptions) -> tuple[int, int]:
    """Apply failOnDataLoss to [start, end): offsets below the earliest or beyond the latest are an
    error with it, skipped without it."""
    tp = f"{plog.topic}-{plog.partition}"
    if start > end:
        raise TierlogOptionError(f"{tp}: the ending offset {end} is before the starting offset {start}")
    if start < plog.earliest or end > plog.latest:
        if opts.fail_on_data_loss:
            raise TierlogOptionError(
                f"{tp}: offsets [{start}, {end}) are not all available (the log holds [{plog.earliest}, "
                f"{plog.latest})). Some data may have been lost because it is not available any more; "
                "set failOnDataLoss to false to read what there is")
        skipped = [(lo, hi) for lo, hi in ((start, min(end, plog.earliest)), (max(start, plog.latest), end)) if lo < hi]
        start = min(max(start, plog.earliest), plog.latest)
        end = max(min(end, plog.latest), start)
        for lo, hi in skipped:
            _report_data_loss(f"{tp}: offsets [{lo}, {hi}) are not available (the log holds [{plog.earliest}, "
                              f"{plog.latest}))")
    return start, end


def _report_data_loss(message: str) -> None:
    """failOnDataLoss=false: the skipped offsets are logged at WARN, with the words of Spark's Kafka
    source (KafkaSourceProvider.INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_FALSE)."""
    log.warning("%s. %s", message, DATA_LOSS_WARNING)


def _outside(rng: ScanRange, timestamps_ms: tuple[int | None, int | None]) -> bool:
    """Whether no row of the remote segment ``rng`` reads can have a timestamp in the inclusive
    bounds: its smallest record timestamp (recorded at upload, the manifest's ``min_timestamp_ms``)
    above the upper one, or its largest (taken from its records) below the lower one. Timestamps
    need not grow with offsets (CreateTime), so this is per segment, not a cut of the offset range;
    local segments and the broker's offsets have no such figures and are always read."""
    md = rng.remote
    if md is None:
        return False
    low, high = timestamps_ms
    if high is not None and md.min_timestamp_ms is not None and md.min_timestamp_ms > high:
        return True
    return low is not None and md.max_timestamp_from_records and md.max_timestamp_ms < low


def plan_ranges(parts: Sequence[PartitionLog], starts: Mapping[TopicPartition, int],
                ends: Mapping[TopicPartition, int], opts: ReadOptions,
                timestamps_ms: tuple[int | None, int | None] = (None, None)) -> list[ScanRange]:
    """One range per segment overlapping each partition's [start, end), split for minPartitions;
    remote segments holding no row within ``timestamps_ms`` (inclusive bounds of pushed filters on
    ``timestamp``) left out unopened."""
    ranges: list[ScanRange] = []
    for plog in parts:
        tp = (plog.topic, plog.partition)
        start, end = check_range(plog, starts[tp], ends[tp], opts)
        if opts.read_committed:
            end = max(start, min(end, last_stable_offset(plog)))  # nothing past an open transaction
        if start >= end:
            continue
        gaps = plog.missing(start, end)
        if gaps and opts.fail_on_data_loss:
            raise TierlogOptionError(
                f"{plog.topic}-{plog.partition}: offsets {gaps} are in neither the local log nor the remote tier. "
                "Some data may have been lost; set failOnDataLoss to false to read what there is")
        for lo, hi in gaps:
            _report_data_loss(f"{plog.topic}-{plog.partition}: offsets [{lo}, {hi}) are in neither the local log "
                              "nor the remote tier")
        for r in plog.ranges(start, end):
            if _outside(r, timestamps_ms):
                continue
            if opts.read_committed:
                aborted = tuple(a for a in aborted_transactions(plog, opts.remote)
                                if a[1] < r.end_offset and a[2] >= r.start_offset)
                r = replace(r, aborted=aborted)
            ranges.append(r)
    return split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)


def split_ranges(ranges: list[ScanRange], min_partitions: int | None,
                 max_records: int | None = None) -> list[ScanRange]:
    """Split ranges by offsets, in proportion to their sizes, until there are at least
    ``min_partitions`` (where ranges hold enough offsets) and none spans more than ``max_records``
    offsets, like Spark's KafkaOffsetRangeCalculator."""
    wants_more = bool(min_partitions) and len(ranges) < (min_partitions or 0)
    too_big = max_records is not None and any(r.end_offset - r.start_offset > max_records for r in ranges)
    if not wants_more and not too_big:
        return ranges
    total = sum(r.end_offset - r.start_offset for r in ranges)
    if total == 0:
        return ranges
    out: list[ScanRange] = []
    for r in ranges:
        size = r.end_offset - r.start_offset
        parts = math.ceil(size * min_partitions / total) if wants_more and min_partitions else 1
        if max_records is not None:
            parts = max(parts, math.ceil(size / max_records))
        parts = max(1, min(size, parts))
        for i in range(parts):
            lo = r.start_offset + size * i // parts
            hi = r.start_offset + size * (i + 1) // parts
            out.append(replace(r, start_offset=lo, end_offset=hi))
    return out

