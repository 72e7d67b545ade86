"""The web console (``console.listener``) in headless Chromium, against a real ``tierlog serve``.

Every page loads without a browser console error; after tiering, a partition's segment timeline
shows as many remote and local segments as the broker holds; seed 004's floor line moves to the
segment a new ``log.retention.min.timestamp`` falls on after ``tierlog topics alter``; a group's
lag drops once its consumer catches up. Screenshots of the pages go into the test's tmp dir (and
into ``$TIERLOG_CONSOLE_SCREENSHOTS`` when set: that is how docs/console/ was made).

Needs Debian's ``chromium`` and ``chromium-driver`` (scripts/_env.sh installs them) and selenium;
skips, naming chromium, without them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer

from tests.helpers.broker import BrokerProcess

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path(shutil.which("chromedriver") or "/usr/bin/chromedriver")
CONSOLE_LINE = "tierlog console on "
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1280,1000")
T = TypeVar("T")
#: Records per produced batch: a batch is about 700 bytes, so with segment.bytes=1024 each starts a segment.
RECORDS_PER_BATCH = 8

pytestmark = pytest.mark.integration


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float = 60.0) -> T:
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("console") / "data"
    b = BrokerProcess(data, {"console.listener": "http://127.0.0.1:0", "remote.log.manager.task.interval.ms": "500"})
    b.start()
    yield b
    assert b.stop() == 0, b.stderr_tail()


def console_url(broker: BrokerProcess) -> str:
    # Printed before the listener line, so start() has read it already.
    lines = [line.strip() for line in broker.stdout_lines if line.startswith(CONSOLE_LINE)]
    assert len(lines) == 1, broker.stdout_lines
    url = lines[0][len(CONSOLE_LINE):]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/")
    return url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
        pytest.skip(f"needs chromium at {CHROMIUM} and chromedriver (apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("needs selenium (pip install selenium) to drive chromium")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


class Pages:
    """Opens console pages, fails on browser console errors, saves screenshots."""

    def __init__(self, driver: Any, base: str, shots: Path) -> None:
        self.driver = driver
        self.base = base
        self.shots = shots
        self.extra = Path(os.environ["TIERLOG_CONSOLE_SCREENSHOTS"]) if os.environ.get("TIERLOG_CONSOLE_SCREENSHOTS") else None

    def open(self, path: str) -> Any:
        self.driver.get(self.base + path.lstrip("/"))
        errors = [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], f"browser console errors on {path}: {errors}"
        return self.driver

    def attr(self, css: str, name: str) -> str | None:
        from selenium.webdriver.common.by import By

        found = self.driver.find_elements(By.CSS_SELECTOR, css)
        return found[0].get_attribute(name) if found else None

    def text(self, css: str) -> str | None:
        from selenium.webdriver.common.by import By

        found = self.driver.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else None

    def shot(self, name: str) -> None:
        self.shots.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))
        if self.extra is not None:
            self.extra.mkdir(parents=True, exist_ok=True)
            self.driver.save_screenshot(str(self.extra / f"{name}.png"))


@pytest.fixture
def pages(browser: Any, console_broker: BrokerProcess, tmp_path: Path) -> Pages:
    return Pages(browser, console_url(console_broker), tmp_path / "screenshots")


def tierlog(broker: BrokerProcess, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tierlog.cli.main", *args, "--bootstrap-server", broker.bootstrap],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def produce_batches(broker: BrokerProcess, topic: str, batches: int, *, timestamps: list[int] | None = None) -> None:
    """``batches`` batches of 8 records of about 80 bytes each: with segment.bytes=1024 each batch
    starts a segment of its own."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    errors: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for b in range(batches):
        for i in range(RECORDS_PER_BATCH):
            value = f'{{"batch": {b}, "record": {i}, "pad": "{"x" * 10}"}}'.encode()
            kwargs: dict[str, Any] = {"timestamp": timestamps[b]} if timestamps else {}
            producer.produce(topic, key=f"k{i}".encode(), value=value, headers={"source": b"console-test"},
                             on_delivery=delivered, **kwargs)
        assert producer.flush(30) == 0 and errors == []


def test_segment_timeline_after_tiering_and_every_page(pages: Pages, console_broker: BrokerProcess,
                                                      topic_name: str) -> None:
    topic = topic_name
    tierlog(console_broker, "topics", "create", topic, "--config", "segment.bytes=1024")
    produce_batches(console_broker, topic, 4)
    part_dir = console_broker.data_dir / f"{topic}-0"
    assert len(list(part_dir.glob("*.log"))) == 4
    tierlog(console_broker, "topics", "alter", topic, "--config", "remote.storage.enable=true",
            "--config", "local.retention.ms=1000")

    def timeline() -> tuple[str | None, str | None, str | None] | None:
        pages.open(f"/topic?name={topic}")
        counts = (pages.attr("#timeline-0", "data-remote"), pages.attr("#timeline-0", "data-local"),
                  pages.attr("#timeline-0", "data-both"))
        return counts if counts == ("3", "1", "0") else None

    # The three closed segments are copied, their local copies go after a second; the active stays.
    wait_for("3 remote and 1 local segment in the timeline", timeline)
    assert len(list(part_dir.glob("*.log"))) == 1
    from selenium.webdriver.common.by import By

    assert len(pages.driver.find_elements(By.CSS_SELECTOR, "#timeline-0 rect.seg-remote")) == 3
    assert len(pages.driver.find_elements(By.CSS_SELECTOR, "#timeline-0 rect.seg-local")) == 1
    pages.shot("topic")

    def tiered_row() -> bool:
        pages.open("/tiering")
        return pages.text(f'tr[data-partition="{topic}-0"] .last-copied') == str(3 * RECORDS_PER_BATCH - 1)

    wait_for("the tiering page to show the third segment copied", tiered_row, timeout_s=30)
    pages.shot("tiering")
    # Offset 0 is only in the remote tier now: the messages page reads it from there.
    pages.open(f"/messages?topic={topic}&partition=0&offset=0&count=3&format=json")
    assert pages.text("#tier") == "remote"
    assert '"batch": 0' in (pages.text("pre.value") or "")
    pages.shot("messages")
    pages.open("/")
    assert pages.text("#cluster-id")
    pages.shot("overview")
    pages.open("/metadata")
    assert pages.text("#metadata-end")
    pages.shot("metadata")
    pages.open("/groups")


def test_floor_line_moves_after_topics_alter(pages: Pages, console_broker: BrokerProcess, topic_name: str) -> None:
    topic = topic_name
    tierlog(console_broker, "topics", "create", topic, "--config", "segment.bytes=1024")
    now = int(time.time() * 1000)
    stamps = [now - 40 * 60_000, now - 30 * 60_000, now - 20 * 60_000, now - 10 * 60_000]
    produce_batches(console_broker, topic, 4, timestamps=stamps)
    pages.open(f"/topic?name={topic}")
    assert pages.attr("#timeline-0 line.floor", "data-at") is None  # no floor set

    def floor_at(threshold: int) -> str | None:
        pages.open(f"/topic?name={topic}")
        if pages.attr("#timeline-0 line.floor", "data-threshold") != str(threshold):
            return None
        return pages.attr("#timeline-0 line.floor", "data-at")

    first = stamps[0] + 60_000  # between the first and second segment's timestamps
    tierlog(console_broker, "topics", "alter", topic, "--config", f"log.retention.min.timestamp={first}")
    assert wait_for("the floor line", lambda: floor_at(first)) == str(RECORDS_PER_BATCH)
    second = stamps[1] + 60_000
    tierlog(console_broker, "topics", "alter", topic, "--config", f"log.retention.min.timestamp={second}")
    assert wait_for("the floor line to move", lambda: floor_at(second)) == str(2 * RECORDS_PER_BATCH)
    # Retention (every 500 ms here) deletes the two segments below the floor.
    wait_for("retention below the floor", lambda: pages.open(f"/topic?name={topic}") and
             pages.attr("#timeline-0 rect.seg", "data-base") == str(2 * RECORDS_PER_BATCH))


def test_group_lag_drops_when_the_consumer_catches_up(pages: Pages, console_broker: BrokerProcess,
                                                      topic_name: str) -> None:
    topic = topic_name
    group = f"{topic}-group"
    tierlog(console_broker, "topics", "create", topic)
    produce_batches(console_broker, topic, 2)
    end = 2 * RECORDS_PER_BATCH
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        seen = 0
        while seen < 5:
            msg = consumer.poll(10)
            assert msg is not None, "no record within 10 s"
            if msg.error() is None:
                seen += 1
                if seen == 5:
                    consumer.commit(message=msg, asynchronous=False)

        def lag_is(expected: str) -> bool:
            pages.open(f"/group?id={group}")
            return pages.text("#total-lag") == expected

        wait_for("lag behind 5 records", lambda: lag_is(str(end - 5)))
        assert pages.text("#group-state") == "Stable"
        pages.shot("group-behind")
        last = None
        while last is None or last.offset() < end - 1:
            msg = consumer.poll(10)
            assert msg is not None, "no record within 10 s"
            if msg.error() is None:
                last = msg
        consumer.commit(message=last, asynchronous=False)
        wait_for("lag 0", lambda: lag_is("0"))
        pages.shot("group")
        pages.open("/groups")
        pages.shot("groups")
    finally:
        consumer.close()


def test_a_consumer_protocol_group_shows_its_members_and_assignment(pages: Pages, console_broker: BrokerProcess,
                                                                   topic_name: str) -> None:
    """A KIP-848 group (``group.protocol=consumer``) is listed with its state, member count and
    server-side assignor, and its page shows the member's assignment and the lag."""
    topic = topic_name
    group = f"{topic}-kip848"
    tierlog(console_broker, "topics", "create", topic, "--partitions", "2")
    produce_batches(console_broker, topic, 1)
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        last = None
        seen = 0
        deadline = time.monotonic() + 60
        while seen < RECORDS_PER_BATCH and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                seen += 1
                last = msg
        assert seen == RECORDS_PER_BATCH and last is not None
        consumer.commit(asynchronous=False)

        def listed() -> list[str] | None:
            pages.open("/groups")
            from selenium.webdriver.common.by import By

            for row in pages.driver.find_elements(By.CSS_SELECTOR, "#groups tr"):
                cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
                if cells and cells[0] == group and cells[1] == "Stable":
                    return cells
            return None

        cells = wait_for("the KIP-848 group listed as Stable", listed)
        assert cells[2] == "1" and cells[3] == "consumer (uniform)", cells

        def assigned() -> str | None:
            pages.open(f"/group?id={group}")
            text = pages.text("#members") or ""
            return text if f"{topic}: 0, 1" in text else None

        wait_for("the member's assignment on the group page", assigned)
        assert pages.text("#group-state") == "Stable"
        assert wait_for("lag 0", lambda: pages.open(f"/group?id={group}") and pages.text("#total-lag") == "0")
        pages.shot("group-consumer-protocol")
    finally:
        consumer.close()


def test_next_retention_pass_snapshot_reason_and_messages_by_timestamp(
        browser: Any, tmp_path: Path, topic_name: str) -> None:
    """On a broker whose retention pass runs hourly, segments past ``retention.ms`` are outlined as
    the next pass's deletions with the retention line after them; a time-based metadata snapshot
    (seed 000) is listed with its reason; the Messages page finds records by timestamp and shows them
    as hex within the bytes asked for."""
    broker = BrokerProcess(tmp_path / "data", {"console.listener": "http://127.0.0.1:0",
                                               "log.retention.check.interval.ms": "3600000",
                                               "metadata.log.max.snapshot.interval.ms": "1000"})
    broker.start()
    try:
        pages = Pages(browser, console_url(broker), tmp_path / "screenshots")
        topic = topic_name
        tierlog(broker, "topics", "create", topic, "--config", "segment.bytes=1024")
        now = int(time.time() * 1000)
        stamps = [now - 40 * 60_000, now - 30 * 60_000, now - 20 * 60_000, now - 10 * 60_000]
        produce_batches(broker, topic, 4, timestamps=stamps)
        tierlog(broker, "topics", "alter", topic, "--config", f"retention.ms={25 * 60_000}")

        def outlined() -> tuple[list[str], str | None] | None:
            from selenium.webdriver.common.by import By

            pages.open(f"/topic?name={topic}")
            doomed = [e.get_attribute("data-base") or ""
                      for e in pages.driver.find_elements(By.CSS_SELECTOR, "#timeline-0 rect.seg.doomed")]
            line = pages.attr("#timeline-0 line.retention", "data-at")
            return (doomed, line) if doomed else None

        doomed, line = wait_for("segments outlined for the next retention pass", outlined)
        assert doomed == ["0", str(RECORDS_PER_BATCH)] and line == str(2 * RECORDS_PER_BATCH), (doomed, line)
        pages.shot("topic-retention")

        def snapshot_reason() -> str | None:
            pages.open("/metadata")
            return pages.text("#snapshots td.reason")

        assert wait_for("a time-based metadata snapshot", snapshot_reason) == "max_interval"
        pages.shot("metadata")

        between = stamps[1] + 60_000  # after every record of batch 1: batch 2 is the first at or after it
        pages.open(f"/messages?topic={topic}&partition=0&timestamp={between}&count=2&format=hex&max_kib=4")
        assert pages.text("#read-error") is None
        from selenium.webdriver.common.by import By

        rows = pages.driver.find_elements(By.CSS_SELECTOR, "#records tr")[1:]
        assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == \
            [str(2 * RECORDS_PER_BATCH), str(2 * RECORDS_PER_BATCH + 1)]
        assert "6b30" in rows[0].text.replace(" ", "")  # the key b"k0" in hex
        assert "at most 2 records and 4.0 KiB" in (pages.text("#read-summary") or "")
    finally:
        assert broker.stop() == 0, broker.stderr_tail()


def test_the_console_is_plain_http_and_read_only(console_broker: BrokerProcess) -> None:
    url = console_url(console_broker)
    with urllib.request.urlopen(url + "static/console.css", timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/css")
    request = urllib.request.Request(url, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=10)
    assert e.value.code == 501  # no handler for anything but GET and HEAD
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "topic?name=no-such-topic", timeout=10)
    assert e.value.code == 404
