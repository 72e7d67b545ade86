"""The client security settings every client command takes: ``--command-config FILE`` (a Java
properties file, as Kafka's tools take) and ``-X KEY=VALUE`` (librdkafka's way, as kcat takes them),
``-X`` winning over the file.

Both Kafka's Java client names and librdkafka's are understood, so the ``client.properties`` of a
secured Kafka cluster works unchanged:

* ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL;
* TLS in PEM only (``ssl.truststore.type`` / ``ssl.keystore.type`` must be PEM, as the broker's):
  ``ssl.truststore.location`` or ``ssl.ca.location``, ``ssl.truststore.certificates`` or
  ``ssl.ca.pem``; ``ssl.keystore.location`` (a file with the key and the chain) or
  ``ssl.certificate.location`` + ``ssl.key.location``; ``ssl.keystore.certificate.chain`` /
  ``ssl.keystore.key`` or ``ssl.certificate.pem`` / ``ssl.key.pem``; ``ssl.key.password``;
  ``ssl.endpoint.identification.algorithm`` (https, the default, checks the broker's name; empty or
  none does not) and ``enable.ssl.certificate.verification``;
* SASL: ``sasl.mechanism`` (or ``sasl.mechanisms``) and either ``sasl.jaas.config`` with Kafka's
  PlainLoginModule or ScramLoginModule and its ``username``/``password``, or ``sasl.username`` /
  ``sasl.password``.

The librdkafka commands get these translated to librdkafka's names; any other key is passed to
librdkafka as it is (an unknown one is refused there). The protocol commands (cli/_wire.py) refuse
any ``ssl.``/``sasl.``/``security.`` key they do not understand -- a misspelt security key must not
quietly mean no security -- and ignore the rest. A bad key, value or file is a
:class:`ClientConfigError`: one line naming the key, exit 2.
"""

from __future__ import annotations

import argparse
import os
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog._util.pem import load_pem_cert_chain
from tierlog._util.properties import PropertiesError, read_properties
from tierlog.cli._errors import ClientConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_LOGIN_MODULES = {"org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
                  "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512")}
_JAAS = re.compile(r'^\s*(\S+)\s+(required|requisite|sufficient|optional)\s*(.*?)\s*;\s*$', re.S)
_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))')

#: Keys the translation reads (Java and librdkafka names); they are never passed on as they are.
_SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username",
    "sasl.password", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.truststore.password", "ssl.ca.location", "ssl.ca.pem", "ssl.keystore.type", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.certificate.location",
    "ssl.key.location", "ssl.certificate.pem", "ssl.key.pem", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification", "ssl.enabled.protocols",
    "ssl.protocol",
})
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ca_file: str | None = None
    ca_pem: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_pem: str | None = None
    key_pem: str | None = None
    key_password: str | None = None
    check_hostname: bool = True
    verify: bool = True
    tls_versions: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    #: Keys this module does not translate, for librdkafka as they are.
    other: dict[str, str] = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def add_security_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-X", "--client-property", action="append", default=[], metavar="KEY=VALUE",
                        dest="client_properties",
                        help="a client property, Kafka's or librdkafka's name, e.g. -X security.protocol=SASL_SSL "
                             "(repeatable; wins over --command-config)")
    parser.add_argument("--command-config", metavar="FILE", type=Path,
                        help="a client properties file, as Kafka's tools take (security.protocol, ssl.*, sasl.*)")


def properties_of(args: argparse.Namespace) -> dict[str, str]:
    """The --command-config file's properties, then each -X over them."""
    props: dict[str, str] = {}
    path: Path | None = getattr(args, "command_config", None)
    if path is not None:
        try:
            props.update(read_properties(path.read_text(encoding="utf-8"), str(path)))
        except (OSError, UnicodeDecodeError) as e:
            raise ClientConfigError(f"--command-config {path}: cannot read it ({_reason(e)})") from None
        except PropertiesError as e:
            raise ClientConfigError(f"--command-config {e}") from None
    for item in getattr(args, "client_properties", None) or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ClientConfigError(f"-X {item!r} is not KEY=VALUE")
        props[key.strip()] = value
    return props


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e)


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """(login module class, options) of one ``sasl.jaas.config`` entry; ClientConfigError if malformed."""
    m = _JAAS.match(text)
    if m is None:
        raise ClientConfigError("sasl.jaas.config: expected '<LoginModule class> required username=\"...\" "
                                "password=\"...\";'")
    options = {k: (quoted.replace('\\"', '"') if quoted or not bare else bare)
               for k, quoted, bare in _JAAS_OPTION.findall(m.group(3))}
    return m.group(1), options


def client_security(props: dict[str, str]) -> ClientSecurity:
    """Kafka's and librdkafka's client security properties, checked; ClientConfigError naming the key."""

    def get(*names: str) -> str | None:
        for n in names:
            if n in props:
                return props[n]
        return None

    protocol = (get("security.protocol") or "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ClientConfigError(f"security.protocol: {props['security.protocol']!r} is not one of {', '.join(PROTOCOLS)}")
    for store in ("ssl.truststore.type", "ssl.keystore.type"):
        if store in props and props[store].strip().upper() != "PEM":
            raise ClientConfigError(f"{store}: {props[store]!r} is not supported; tierlog's tools read PEM only "
                                    f"(convert with openssl pkcs12 / keytool -exportcert -rfc)")
    ca_file = get("ssl.truststore.location", "ssl.ca.location")
    cert_file = get("ssl.certificate.location")
    key_file = get("ssl.key.location")
    keystore = get("ssl.keystore.location")
    if keystore:
        cert_file, key_file = cert_file or keystore, key_file or keystore
    for key, path in (("ssl.truststore.location/ssl.ca.location", ca_file), ("ssl.keystore.location", keystore),
                      ("ssl.certificate.location", get("ssl.certificate.location")),
                      ("ssl.key.location", get("ssl.key.location"))):
        if path and not os.access(path, os.R_OK):
            raise ClientConfigError(f"{key}: cannot read {path}")
    endpoint = get("ssl.endpoint.identification.algorithm")
    if endpoint is not None and endpoint.strip().lower() not in ("", "none", "https"):
        raise ClientConfigError(f"ssl.endpoint.identification.algorithm: {endpoint!r} is not https, none or empty")
    verify_text = get("enable.ssl.certificate.verification")
    if verify_text is not None and verify_text.strip().lower() not in ("true", "false"):
        raise ClientConfigError(f"enable.ssl.certificate.verification: {verify_text!r} is not true or false")
    versions = tuple(v.strip() for v in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if v.strip())
    if not versions or any(v not in _TLS_VERSIONS for v in versions):
        raise ClientConfigError(f"ssl.enabled.protocols: {get('ssl.enabled.protocols')!r} names a version other "
                                f"than TLSv1.2 and TLSv1.3")
    mechanism_text = get("sasl.mechanism", "sasl.mechanisms")
    mechanism = mechanism_text.strip().upper() if mechanism_text else None
    if mechanism is not None and mechanism not in MECHANISMS:
        raise ClientConfigError(f"sasl.mechanism: {mechanism_text!r} is not one of {', '.join(MECHANISMS)}")
    username, password = get("sasl.username"), get("sasl.password")
    jaas = get("sasl.jaas.config")
    if jaas:
        module, options = parse_jaas(jaas)
        if module not in _LOGIN_MODULES:
            raise ClientConfigError(f"sasl.jaas.config: {module} is not supported by tierlog's tools "
                                    f"(one of {', '.join(_LOGIN_MODULES)})")
        if mechanism is not None and mechanism not in _LOGIN_MODULES[module]:
            raise ClientConfigError(f"sasl.jaas.config: {module.rsplit('.', 1)[-1]} does not serve "
                                    f"sasl.mechanism {mechanism}")
        username = options.get("username", username)
        password = options.get("password", password)
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = mechanism or "GSSAPI"
        if mechanism not in MECHANISMS:
            raise ClientConfigError(f"sasl.mechanism: {mechanism} (Kafka's default) is not supported; set PLAIN, "
                                    f"SCRAM-SHA-256 or SCRAM-SHA-512")
        if mechanism != "OAUTHBEARER" and (username is None or password is None):
            raise ClientConfigError(f"sasl.jaas.config: security.protocol {protocol} with {mechanism} needs a "
                                    f"username and password (sasl.jaas.config, or sasl.username and sasl.password)")
    return ClientSecurity(
        protocol=protocol, ca_file=ca_file, ca_pem=get("ssl.truststore.certificates", "ssl.ca.pem"),
        cert_file=cert_file, key_file=key_file,
        cert_pem=get("ssl.keystore.certificate.chain", "ssl.certificate.pem"),
        key_pem=get("ssl.keystore.key", "ssl.key.pem"), key_password=get("ssl.key.password"),
        check_hostname=("https" if endpoint is None else endpoint).strip().lower() == "https",
        verify=(verify_text or "true").strip().lower() == "true", tls_versions=versions,
        mechanism=mechanism, username=username, password=password,
        other={k: v for k, v in props.items() if k not in _SECURITY_KEYS})


def librdkafka_properties(sec: ClientSecurity) -> dict[str, Any]:
    """``sec`` in librdkafka's names, with the untranslated keys as they were given."""
    out: dict[str, Any] = {"security.protocol": sec.protocol.lower()}
    pairs = (("ssl.ca.location", sec.ca_file), ("ssl.ca.pem", sec.ca_pem),
             ("ssl.certificate.location", sec.cert_file), ("ssl.key.location", sec.key_file),
             ("ssl.certificate.pem", sec.cert_pem), ("ssl.key.pem", sec.key_pem),
             ("ssl.key.password", sec.key_password), ("sasl.mechanisms", sec.mechanism),
             ("sasl.username", sec.username), ("sasl.password", sec.password))
    out.update({k: v for k, v in pairs if v is not None})
    if sec.tls:
        out["ssl.endpoint.identification.algorithm"] = "https" if sec.check_hostname else "none"
        out["enable.ssl.certificate.verification"] = sec.verify
    out.update(sec.other)
    return out


def wire_check(sec: ClientSecurity) -> None:
    """The protocol client's limits: every security key it was given must be one it acts on."""
    unknown = sorted(k for k in sec.other if k.startswith(("ssl.", "sasl.", "security.")))
    if unknown:
        raise ClientConfigError(f"{unknown[0]}: not a client security property tierlog's tools understand")
    if sec.sasl and sec.mechanism == "OAUTHBEARER":
        raise ClientConfigError("sasl.mechanism: OAUTHBEARER is not supported by this command (it speaks the "
                                "protocol itself); use PLAIN or SCRAM")


def ssl_context(sec: ClientSecurity) -> ssl.SSLContext:
    """A client TLS context for ``sec``; ClientConfigError naming the key whose file or text fails."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    versions = sorted(_TLS_VERSIONS[v] for v in sec.tls_versions)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    try:
        if sec.ca_file or sec.ca_pem:
            ctx.load_verify_locations(cafile=sec.ca_file, cadata=sec.ca_pem)
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ClientConfigError(f"ssl.truststore.location: cannot load trusted certificates ({_reason(e)})") from None
    ctx.check_hostname = sec.check_hostname and sec.verify
    ctx.verify_mode = ssl.CERT_REQUIRED if sec.verify else ssl.CERT_NONE
    try:
        if sec.cert_file:
            ctx.load_cert_chain(sec.cert_file, sec.key_file, password=sec.key_password)
        elif sec.cert_pem:
            if not sec.key_pem:
                raise ClientConfigError("ssl.keystore.key: ssl.keystore.certificate.chain needs the key too")
            load_pem_cert_chain(ctx, sec.cert_pem, sec.key_pem, sec.key_password)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ClientConfigError(f"ssl.keystore.location: cannot load the certificate and key ({_reason(e)})") from None
    return ctx

