"""The key definitions themselves: every key is described, and each description matches its check."""

from __future__ import annotations

import pytest

from tierlog.config import BROKER_DEF, TOPIC_DEF, ConfigKey, Type
from tierlog.config.definition import (
    AtLeast,
    Between,
    DottedPath,
    HostPort,
    Listeners,
    NonEmpty,
    OneOf,
    Validator,
    Value,
    parse_value,
)
from tierlog.errors import ConfigError

ALL_KEYS = [*BROKER_DEF.keys.values(), *TOPIC_DEF.keys.values()]


@pytest.mark.parametrize("key", ALL_KEYS, ids=lambda k: f"{k.scope.value}:{k.name}")
def test_every_key_has_a_doc_sentence_and_valid_values(key: ConfigKey) -> None:
    assert key.valid_values.strip(), key.name
    assert len(key.doc) >= 20 and key.doc[0].isalnum() and key.doc.endswith("."), key.doc
    if key.validator is not None:
        assert key.valid_values == key.validator.describe()


@pytest.mark.parametrize("key", ALL_KEYS, ids=lambda k: f"{k.scope.value}:{k.name}")
def test_every_default_passes_its_own_check(key: ConfigKey) -> None:
    assert parse_value(key, key.default) == key.default


@pytest.mark.parametrize("key", [k for k in ALL_KEYS if k.type in (Type.INT, Type.LONG)],
                         ids=lambda k: f"{k.scope.value}:{k.name}")
def test_numeric_keys_state_their_range(key: ConfigKey) -> None:
    """A number key either has a range check or says in words what its values mean."""
    assert key.validator is not None or "any" in key.valid_values, key.name


def test_valid_values_text_cannot_drift_from_the_validator() -> None:
    with pytest.raises(ValueError, match="differs from its validator"):
        ConfigKey("x.ms", Type.LONG, 1, "A key.", validator=AtLeast(1), valid_values="[0,...]")
    same = ConfigKey("x.ms", Type.LONG, 1, "A key.", validator=AtLeast(1), valid_values="[1,...]")
    derived = ConfigKey("x.ms", Type.LONG, 1, "A key.", validator=AtLeast(1))
    assert same.valid_values == derived.valid_values == "[1,...]"
    assert ConfigKey("flag", Type.BOOLEAN, True, "A flag.").valid_values == "[true, false]"


@pytest.mark.parametrize(
    ("validator", "described", "good", "bad", "message"),
    [
        (AtLeast(14), "[14,...]", [14, 10**12], [13, -1], "below the minimum 14"),
        (Between(1, 10000), "[1,...,10000]", [1, 10000], [0, 10001], r"outside the range \[1,...,10000\]"),
        (OneOf(("delete", "compact")), "[delete, compact]", ["delete", ("compact", "delete")],
         ["Delete", ("delete", "nope")], "not one of delete, compact"),
        (OneOf(("a", "b"), case_insensitive=True), "[a, b] (any case)", ["A", "b"], ["c"], "not one of"),
        (NonEmpty("a directory path"), "a directory path, not empty", ["/x"], [""], "must not be empty"),
        (Listeners(), "comma-separated NAME://HOST:PORT, each NAME once (empty HOST: all interfaces)",
         [("PLAINTEXT://:9092",), ("PLAINTEXT://[::1]:0", "CONTROLLER://h.example:9093")],
         [("localhost:9092",), ("PLAINTEXT://h:99999",), ("A://h:1", "a://h:2")],
         "NAME://HOST:PORT|outside|used twice"),
        (Listeners(required=True), "comma-separated NAME://HOST:PORT, each NAME once (empty HOST: all "
         "interfaces); at least one", [("A://:1",)], [()], "at least one listener is needed"),
        (HostPort(), "HOST:PORT (empty HOST: all interfaces); unset or empty: off",
         ["127.0.0.1:9100", ":9100", "[::1]:9100", ""], ["9100", "host", "h:70000", "http://h:1"],
         "HOST:PORT|outside"),
        (DottedPath(), "a dotted Python path: package.module.Class", ["a.B", "pkg.mod.Class"],
         ["Class", "pkg..Class", "pkg/mod.Class"], "dotted Python path"),
    ],
)
def test_validators_check_what_they_describe(validator: Validator, described: str, good: list[Value],
                                             bad: list[Value], message: str) -> None:
    assert validator.describe() == described
    for value in good:
        validator("k", value)
    for value in bad:
        with pytest.raises(ConfigError, match=message) as info:
            validator("k", value)
        assert info.value.key == "k"


def test_synonyms_in_hours_are_checked_in_hours() -> None:
    """log.roll.hours must be at least 1 hour (segment.ms >= 1); -1 for retention carries over."""
    assert BROKER_DEF.keys["log.roll.hours"].valid_values == "[1,...]"
    assert BROKER_DEF.keys["log.retention.hours"].valid_values == "[-1,...]"
    assert BROKER_DEF.keys["log.roll.jitter.hours"].valid_values == "[0,...]"
    assert BROKER_DEF.keys["log.retention.hours"].type is Type.INT


def test_synonym_docs_say_which_topic_key_they_set_and_what_wins() -> None:
    doc = BROKER_DEF.keys["log.retention.hours"].doc
    assert "topic key retention.ms, in hours" in doc
    assert "ignored when log.retention.ms or log.retention.minutes is set" in doc
    assert doc.startswith(TOPIC_DEF.keys["retention.ms"].doc)


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("segment.bytes", "abc", r"expected an integer, got 'abc'; valid values: \[14,...\]"),
        ("segment.bytes", "1.5", "expected an integer"),
        ("segment.bytes", str(2**31), r"does not fit an int \(\[-2147483648,...,2147483647\]\)"),
        ("preallocate", "yes", "expected true or false, got 'yes'"),
        ("cleanup.policy", "delete,shrink", "'shrink' is not one of delete, compact"),
    ],
)
def test_parse_errors_name_the_key_and_what_is_allowed(name: str, raw: str, message: str) -> None:
    key = TOPIC_DEF.keys[name]
    with pytest.raises(ConfigError, match=message) as info:
        parse_value(key, raw)
    assert info.value.key == name
    assert str(info.value).startswith(f"{name}: ")


def test_one_key_given_under_two_names_is_refused() -> None:
    with pytest.raises(ConfigError, match="given twice, as retention.min.timestamp and log.retention.min.timestamp"):
        TOPIC_DEF.parse({"retention.min.timestamp": "1", "log.retention.min.timestamp": "2"})
