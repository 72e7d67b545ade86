"""DescribeTopicPartitions' paging (Kafka's DescribeTopicPartitionsRequestHandler rules) as a pure
function: name order, the cursor, the partition limit, unknown and invalid names."""

from __future__ import annotations

import pytest

from tierlog.errors import ErrorCode
from tierlog.server.handlers.topic_partitions import TopicPage, page

COUNTS = {"a": 3, "b": 2, "c": 4}


def test_everything_fits_in_one_response() -> None:
    assert page(COUNTS, None, None, 2000) == ([TopicPage("a", 0, 3), TopicPage("b", 0, 2), TopicPage("c", 0, 4)], None)


def test_a_topic_cut_short_sets_the_cursor_to_its_next_partition() -> None:
    assert page(COUNTS, None, None, 4) == ([TopicPage("a", 0, 3), TopicPage("b", 0, 1)], ("b", 1))
    assert page(COUNTS, None, ("b", 1), 4) == ([TopicPage("b", 1, 2), TopicPage("c", 0, 3)], ("c", 3))
    assert page(COUNTS, None, ("c", 3), 4) == ([TopicPage("c", 3, 4)], None)


def test_a_limit_used_up_at_a_topic_end_points_at_the_next_topic() -> None:
    assert page(COUNTS, None, None, 3) == ([TopicPage("a", 0, 3)], ("b", 0))
    assert page(COUNTS, None, None, 0) == ([TopicPage("a", 0, 1)], ("a", 1))  # at least one partition


def test_named_topics_sorted_with_unknown_and_invalid_names_answered() -> None:
    got, cursor = page(COUNTS, ["c", "nope", "a", "bad name!"], None, 2000)
    assert cursor is None
    assert got == [TopicPage("a", 0, 3), TopicPage("bad name!", error_code=ErrorCode.INVALID_TOPIC_EXCEPTION),
                   TopicPage("c", 0, 4), TopicPage("nope", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


def test_a_cursor_outside_the_named_topics_or_negative_is_invalid() -> None:
    with pytest.raises(ValueError, match="cursor topic"):
        page(COUNTS, ["a"], ("b", 0), 10)
    with pytest.raises(ValueError, match="cursor partition"):
        page(COUNTS, None, ("b", -1), 10)
    assert page(COUNTS, ["a", "c"], ("c", 1), 10) == ([TopicPage("c", 1, 4)], None)
