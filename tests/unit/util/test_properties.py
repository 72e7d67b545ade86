"""The one .properties reader/writer accepts every form java.util.Properties.load accepts."""

from __future__ import annotations

import pytest

from tierlog._util.properties import (
    PropertiesError,
    format_properties,
    read_properties,
    read_property_entries,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("a=1\n", {"a": "1"}),
    ("a = 1\n", {"a": "1"}),
    ("a: 1\n", {"a": "1"}),
    ("a:1\n", {"a": "1"}),
    ("a 1\n", {"a": "1"}),
    ("a\t \f1\n", {"a": "1"}),
    ("a   =   1\n", {"a": "1"}),
    ("a\n", {"a": ""}),
    ("a=\n", {"a": ""}),
    ("   \t a=1\n", {"a": "1"}),
    ("a=1 2 3  \n", {"a": "1 2 3  "}),  # trailing whitespace is part of a value
    ("a=b=c\n", {"a": "b=c"}),
    ("a b:c\n", {"a": "b:c"}),
])
def test_separators_and_whitespace(text: str, expected: dict[str, str]) -> None:
    assert read_properties(text) == expected


@pytest.mark.parametrize("comment", ["# a comment", "! a comment", "   # indented", "\t! indented"])
def test_comments_and_blank_lines(comment: str) -> None:
    assert read_properties(f"{comment}\n\n   \na=1\n") == {"a": "1"}


@pytest.mark.parametrize("newline", ["\n", "\r", "\r\n"])
def test_line_endings(newline: str) -> None:
    assert read_properties(f"a=1{newline}b=2{newline}") == {"a": "1", "b": "2"}


def test_continuation_lines() -> None:
    text = "a=one,\\\n    two,\\\n\tthree\nb=x\\\\\nc=y\\\n"
    # An even number of trailing backslashes is an escaped backslash, not a continuation; a
    # continuation at the end of the text ends the value.
    assert read_properties(text) == {"a": "one,two,three", "b": "x\\", "c": "y"}
    entries = list(read_property_entries(text))
    assert [(e.key, e.line_no) for e in entries] == [("a", 1), ("b", 4), ("c", 5)]


def test_a_continued_key() -> None:
    assert read_properties("lo\\\n  ng=v\n") == {"long": "v"}


@pytest.mark.parametrize(("escaped", "value"), [
    ("\\t", "\t"), ("\\n", "\n"), ("\\r", "\r"), ("\\f", "\f"), ("\\\\", "\\"), ("\\=", "="),
    ("\\:", ":"), ("\\ ", " "), ("\\#", "#"), ("\\!", "!"), ("\\u0041", "A"), ("\\u00e9", "é"),
    ("\\z", "z"),  # any other escaped character stands for itself
])
def test_escapes(escaped: str, value: str) -> None:
    assert read_properties(f"k=x{escaped}y\n") == {"k": f"x{value}y"}


def test_escapes_in_keys() -> None:
    assert read_properties("a\\ b\\=c\\:d=1\n") == {"a b=c:d": "1"}


def test_a_later_entry_wins() -> None:
    assert read_properties("a=1\na=2\n") == {"a": "2"}


def test_a_malformed_unicode_escape_names_the_line() -> None:
    with pytest.raises(PropertiesError) as info:
        read_properties("a=1\nb=\\u12G4\n", "x.properties")
    assert (info.value.source, info.value.line_no) == ("x.properties", 2)
    assert str(info.value) == "x.properties:2: malformed \\uxxxx encoding"


def test_separator_is_reported() -> None:
    entries = list(read_property_entries("a=1\nb: 2\nc 3\nd\n"))
    assert [e.separator for e in entries] == ["=", ":", " ", ""]


def test_written_text_reads_back() -> None:
    props = {"k:ey": " lead=#!\\", "x": "a b\tc", "u": "é\n", "e": ""}
    text = format_properties(props, now_ms=0)
    assert text.splitlines()[:2] == ["#", "#Thu Jan 01 00:00:00 UTC 1970"]
    assert read_properties(text) == props
