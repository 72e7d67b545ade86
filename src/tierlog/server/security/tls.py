"""TLS for SSL and SASL_SSL listeners: contexts from Kafka's ``ssl.*`` keys, reloaded when files change.

Only PEM keystores and truststores are read (``ssl.keystore.type=PEM``): a file holding the key and
the certificate chain, or both inline. A context is built per listener; the files it was built from
are looked at again (at most once a second, when a connection arrives) and a changed certificate is
used for new connections without a restart. A file that no longer loads leaves the previous context
in place and is reported once per change.

Kafka's dynamic keystore update -- ``listener.name.<l>.ssl.keystore.location`` (or the other
:data:`RECONFIGURABLE_TLS_KEYS`) altered on the broker resource -- goes through
:func:`check_keystore_update` before it is recorded (SslFactory's rules: it loads, and the certificate
keeps its subject and alternative names unless ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``)
and :meth:`TlsContextSource.replace` after.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from tierlog._util.pem import load_pem_cert_chain
from tierlog.config import BrokerConfig
from tierlog.config.security_keys import LISTENER_PREFIX, RECONFIGURABLE_TLS_KEYS
from tierlog.errors import ConfigError

log = logging.getLogger(__name__)

#: How often the files behind a context are looked at, at most.
RECHECK_INTERVAL_S = 1.0

_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    listener: str
    keystore_location: str | None
    key_password: str | None
    certificate_chain: str | None
    private_key: str | None
    truststore_location: str | None
    truststore_certificates: str | None
    client_auth: str
    enabled_protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]

    @classmethod
    def from_config(cls, config: BrokerConfig, listener: str, dynamic: Mapping[str, str] | None = None) -> TlsSettings:
        """The listener's settings from server.properties, with the TLS keys set dynamically for this
        broker (AlterConfigs; :data:`RECONFIGURABLE_TLS_KEYS`) over them. As in Kafka, a per-listener
        value wins over a broker-wide one, and at the same level a dynamic one over the static one."""
        dynamic = dynamic or {}
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."

        def text(key: str) -> str | None:
            value: object = None
            if key in RECONFIGURABLE_TLS_KEYS and prefix + key in dynamic:
                value = dynamic[prefix + key]
            elif key in config.listener_props.get(listener.upper(), {}):
                value = config.listener_value(listener, key)
            elif key in RECONFIGURABLE_TLS_KEYS and key in dynamic:
                value = dynamic[key]
            else:
                value = config.listener_value(listener, key)
            return None if value is None or value == "" else str(value)

        def items(key: str) -> tuple[str, ...]:
            value = config.listener_value(listener, key)
            return value if isinstance(value, tuple) else ()

        def set_dynamically(key: str) -> bool:
            return prefix + key in dynamic or key in dynamic

        location = text("ssl.keystore.location")
        if not set_dynamically("ssl.keystore.location") and (
                set_dynamically("ssl.keystore.certificate.chain") or set_dynamically("ssl.keystore.key")):
            # The inline PEM forms given through AlterConfigs replace a keystore file set in server.properties.
            location = None
        return cls(listener=listener, keystore_location=location,
                   key_password=text("ssl.key.password"), certificate_chain=text("ssl.keystore.certificate.chain"),
                   private_key=text("ssl.keystore.key"), truststore_location=text("ssl.truststore.location"),
                   truststore_certificates=text("ssl.truststore.certificates"),
                   client_auth=text("ssl.client.auth") or "none",
                   enabled_protocols=items("ssl.enabled.protocols") or ("TLSv1.2", "TLSv1.3"),
                   cipher_suites=items("ssl.cipher.suites"))

    def watched_files(self) -> tuple[str, ...]:
        return tuple(p for p in (self.keystore_location, self.truststore_location) if p)

    def key(self, name: str) -> str:
        """A key's name as the operator would set it for this listener (for error messages)."""
        return f"listener.name.{self.listener.lower()}.{name}"


def openssl_cipher_name(name: str) -> str:
    """Kafka takes IANA suite names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); OpenSSL wants its own
    (ECDHE-RSA-AES128-GCM-SHA256). A name without ``_WITH_`` is taken as an OpenSSL name."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, cipher = name[len("TLS_"):].partition("_WITH_")
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256").replace("_CBC", "")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    return f"{kx}_{cipher}".replace("_", "-")


def build_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context for ``settings``; ConfigError naming the key at fault."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_VERSIONS[p] for p in settings.enabled_protocols if p in _VERSIONS)
    if not versions:
        raise ConfigError(settings.key("ssl.enabled.protocols"), "names no TLS version tierlog serves")
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    suites = [openssl_cipher_name(s) for s in settings.cipher_suites if not s.startswith("TLS_AES_")
              and not s.startswith("TLS_CHACHA20_")]
    if suites:
        try:
            ctx.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise ConfigError(settings.key("ssl.cipher.suites"),
                              f"no usable cipher suite in {', '.join(settings.cipher_suites)}") from None
    _load_keystore(ctx, settings)
    ctx.verify_mode = _CLIENT_AUTH[settings.client_auth]
    if settings.client_auth != "none":
        _load_truststore(ctx, settings)
    return ctx


def _load_keystore(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    where = s.key("ssl.keystore.location")
    if s.keystore_location and (s.certificate_chain or s.private_key):
        # Kafka refuses this too ("Invalid PEM keystore configs"): which one would be meant is a guess.
        raise ConfigError(where, "set either ssl.keystore.location or ssl.keystore.certificate.chain and "
                                 "ssl.keystore.key, not both")
    try:
        if s.keystore_location:
            ctx.load_cert_chain(s.keystore_location, password=s.key_password)
            return
        if not s.certificate_chain or not s.private_key:
            raise ConfigError(where, "set ssl.keystore.location, or both ssl.keystore.certificate.chain and "
                                     "ssl.keystore.key")
        where = s.key("ssl.keystore.certificate.chain")
        load_pem_cert_chain(ctx, s.certificate_chain, s.private_key, s.key_password)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ConfigError(where, f"cannot load the certificate and key: {e}") from None


def _load_truststore(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    try:
        if s.truststore_location:
            ctx.load_verify_locations(cafile=s.truststore_location)
        elif s.truststore_certificates:
            ctx.load_verify_locations(cadata=s.truststore_certificates)
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ConfigError(s.key("ssl.truststore.location"), f"cannot load the trusted certificates: {e}") from None


def _stamp(paths: tuple[str, ...]) -> tuple[tuple[int, int, int], ...]:
    out: list[tuple[int, int, int]] = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((0, -1, 0))
    return tuple(out)


class TlsContextSource:
    """The current context of one listener, rebuilt when its files change."""

    def __init__(self, settings: TlsSettings, now_s: Callable[[], float]) -> None:
        self.settings = settings
        self._now_s = now_s
        self._stamp = _stamp(settings.watched_files())
        self._context = build_context(settings)
        self._checked_s = now_s()
        self._failed_stamp: tuple[tuple[int, int, int], ...] | None = None
        self.reloads = 0

    def replace(self, settings: TlsSettings) -> None:
        """Serve new connections with ``settings`` (a dynamic keystore update); ConfigError leaves the
        current context in place."""
        context = build_context(settings)
        self.settings, self._context = settings, context
        self._stamp, self._failed_stamp = _stamp(settings.watched_files()), None
        self.reloads += 1
        log.info("listener %s: serving a new certificate (dynamic keystore update)", settings.listener)

    def current(self) -> ssl.SSLContext:
        now = self._now_s()
        if now - self._checked_s >= RECHECK_INTERVAL_S:
            self._checked_s = now
            self._maybe_reload()
        return self._context

    def _maybe_reload(self) -> None:
        stamp = _stamp(self.settings.watched_files())
        if stamp == self._stamp or stamp == self._failed_stamp:
            return
        try:
            context = build_context(self.settings)
        except ConfigError as e:
            # Half-written files (a copy in progress) land here too; the next change is tried again.
            self._failed_stamp = stamp
            log.error("listener %s keeps its previous certificate: %s", self.settings.listener, e)
            return
        self._context, self._stamp, self._failed_stamp = context, stamp, None
        self.reloads += 1
        log.info("listener %s: reloaded its certificate and trusted certificates", self.settings.listener)


_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


def leaf_certificate(settings: TlsSettings) -> x509.Certificate | None:
    """The first certificate of the keystore (the broker's own), None if none can be read."""
    try:
        data = Path(settings.keystore_location).read_bytes() if settings.keystore_location else \
            (settings.certificate_chain or "").encode("ascii", "replace")
    except OSError:
        return None
    found = _PEM_CERTIFICATE.search(data)
    if found is None:
        return None
    try:
        return x509.load_pem_x509_certificate(found.group(0))
    except ValueError:
        return None


def _subject_alt_names(cert: x509.Certificate) -> set[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    return {f"{type(n).__name__}:{n.value}" for n in ext.value}


def check_keystore_update(old: TlsSettings, new: TlsSettings, *, allow_dn_changes: bool,
                          allow_san_changes: bool) -> None:
    """Kafka's SslFactory.validateReconfiguration: the new keystore and truststore must load, and
    unless allowed the new certificate names the same subject and at least the old one's alternative
    names (so clients that verify the broker's name keep connecting). ConfigError says why."""
    build_context(new)
    if (old.keystore_location, old.certificate_chain) == (new.keystore_location, new.certificate_chain):
        return
    before, after = leaf_certificate(old), leaf_certificate(new)
    where = new.key("ssl.keystore.location")
    if before is None or after is None:
        return  # the old one is gone from disk (nothing to compare) or the new one loaded above as a key only
    if not allow_dn_changes and before.subject.rfc4514_string().lower() != after.subject.rfc4514_string().lower():
        raise ConfigError(where, f"Keystore DistinguishedName does not match: existing={{DN={before.subject.rfc4514_string()}}}, "
                                 f"new={{DN={after.subject.rfc4514_string()}}} (ssl.allow.dn.changes=false)")
    if not allow_san_changes and not _subject_alt_names(before) <= _subject_alt_names(after):
        raise ConfigError(where, f"Keystore SubjectAltNames do not match: existing={{SAN={sorted(_subject_alt_names(before))}}}, "
                                 f"new={{SAN={sorted(_subject_alt_names(after))}}} (ssl.allow.san.changes=false)")
