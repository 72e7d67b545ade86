"""Kafka's error codes of SASL and SCRAM administration (Errors.java), in one place."""

from __future__ import annotations

import enum


class SecurityErrorCode(enum.IntEnum):
    NONE = 0
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    SASL_AUTHENTICATION_FAILED = 58
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
