"""Kafka principals, and Kafka's ``ssl.principal.mapping.rules`` turning a certificate's DN into a name.

The rules are Kafka's (SslPrincipalMapper): a comma- or newline-separated list of
``RULE:pattern/replacement/`` (optionally followed by ``L`` or ``U`` to lower- or upper-case the
result) and ``DEFAULT`` (the distinguished name unchanged). ``/`` inside a pattern or replacement is
escaped as ``\\/``; the pattern must match the whole DN; ``$1`` in the replacement is a group.
The first matching rule wins; no matching rule refuses the client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tierlog.errors import ConfigError

USER_TYPE = "User"
#: The principal of a connection nothing authenticated (Kafka's KafkaPrincipal.ANONYMOUS).
ANONYMOUS = f"{USER_TYPE}:ANONYMOUS"


def user_principal(name: str) -> str:
    return f"{USER_TYPE}:{name}"


class NoMatchingRule(Exception):
    """No ``ssl.principal.mapping.rules`` rule matched a certificate's DN."""


@dataclass(frozen=True, slots=True)
class _Rule:
    #: None: DEFAULT.
    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        result = match.expand(self.replacement)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


_JAVA_GROUP = re.compile(r"\$(\d+)")


def _read_part(text: str, i: int) -> tuple[str, int]:
    """Text up to the next unescaped ``/`` (escapes other than ``\\/`` are kept for the regex)."""
    out: list[str] = []
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append("/" if text[i + 1] == "/" else text[i:i + 2])
            i += 2
            continue
        if c == "/":
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise ValueError("missing '/'")


class PrincipalMapper:
    KEY = "ssl.principal.mapping.rules"

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = self._parse(rules)

    @classmethod
    def _parse(cls, text: str) -> tuple[_Rule, ...]:
        rules: list[_Rule] = []
        i = 0
        while i < len(text):
            while i < len(text) and text[i] in " \t\r\n,":
                i += 1
            if i >= len(text):
                break
            if text.startswith("DEFAULT", i):
                rules.append(_Rule(None))
                i += len("DEFAULT")
            elif text.startswith("RULE:", i):
                try:
                    pattern, i = _read_part(text, i + len("RULE:"))
                    replacement, i = _read_part(text, i)
                    compiled = re.compile(pattern)
                except (ValueError, re.error) as e:
                    raise ConfigError(cls.KEY, f"invalid rule at {text[i:]!r}: {e}") from None
                case = text[i] if i < len(text) and text[i] in "LU" else ""
                i += len(case)
                rules.append(_Rule(compiled, _JAVA_GROUP.sub(r"\\g<\1>", replacement), case))
            else:
                raise ConfigError(cls.KEY, f"invalid rule at {text[i:]!r}: expected RULE:pattern/replacement/ or DEFAULT")
            while i < len(text) and text[i] not in ",\n":
                i += 1
        return tuple(rules) or (_Rule(None),)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule matches {dn!r}")


def certificate_dn(der: bytes) -> str:
    """The subject of a DER certificate as RFC 2253 (Java's X500Principal.getName(), which Kafka maps)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
