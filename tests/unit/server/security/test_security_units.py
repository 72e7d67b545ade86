"""Pure pieces of listener security: principal mapping rules, per-listener keys, cipher names, log limiting."""

from __future__ import annotations

import logging

import pytest

from tierlog.config import BrokerConfig
from tierlog.errors import ConfigError
from tierlog.server.security.peer_log import PeerLogLimiter
from tierlog.server.security.principal import NoMatchingRule, PrincipalMapper
from tierlog.server.security.tls import openssl_cipher_name

DN = "CN=alice,OU=eng,O=tierlog-test"


@pytest.mark.parametrize(("rules", "dn", "name"), [
    ("DEFAULT", DN, DN),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L,DEFAULT", "CN=Alice,OU=Eng,O=x", "alice@eng"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=svc,OU=ServiceUsers,O=x", "svc"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", DN, DN),
    ("RULE:^CN=(.*?),.*$/$1/U", DN, "ALICE"),
    (r"RULE:^CN=([^,]*),.*$/users\/$1/", DN, "users/alice"),
    ("RULE:^CN=(.*?),OU=(.*?)$/$1/,\n RULE:^.*$/other/", "CN=bob,OU=ops", "bob"),
])
def test_principal_mapping_rules(rules: str, dn: str, name: str) -> None:
    assert PrincipalMapper(rules).name(dn) == name


def test_no_matching_rule_refuses() -> None:
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=x$/y/").name(DN)


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/x/", "RULE:abc", "BOGUS"])
def test_bad_rules_name_the_key(rules: str) -> None:
    with pytest.raises(ConfigError, match=r"ssl\.principal\.mapping\.rules"):
        PrincipalMapper(rules)


def test_per_listener_keys_win() -> None:
    config = BrokerConfig({
        "listeners": "PLAINTEXT://:0,SSL://:0,INTERNAL://:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SASL_PLAINTEXT",
        "ssl.keystore.location": "/k.pem",
        "ssl.client.auth": "requested",
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.internal.plain.sasl.jaas.config": "x required;",
        "inter.broker.listener.name": "INTERNAL",
    })
    assert config.listener_value("SSL", "ssl.client.auth") == "required"
    assert config.listener_value("PLAINTEXT", "ssl.client.auth") == "requested"
    assert config.security_protocol("internal") == "SASL_PLAINTEXT"
    assert config.jaas_configs == {("INTERNAL", "PLAIN"): "x required;"}


@pytest.mark.parametrize(("props", "key"), [
    ({"listeners": "X://:0"}, "listener.security.protocol.map"),
    ({"listener.name.plaintext.log.dirs": "/x"}, "listener.name.plaintext.log.dirs"),
    ({"listener.name.plaintext.gssapi.sasl.jaas.config": "x"}, "listener.name.plaintext.gssapi.sasl.jaas.config"),
    ({"listener.name.nope.ssl.client.auth": "none"}, "listener.name.nope"),
    ({"listener.name.plaintext.ssl.enabled.protocols": "SSLv3"}, "listener.name.plaintext.ssl.enabled.protocols"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
    ({"listeners": "SASL_SSL://:0"}, "listener.name.sasl_ssl.ssl.keystore.location"),
])
def test_bad_security_config_names_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig(props)
    assert e.value.key.startswith(key), e.value


@pytest.mark.parametrize(("iana", "openssl"), [
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"),
    ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
])
def test_cipher_names(iana: str, openssl: str) -> None:
    assert openssl_cipher_name(iana) == openssl


def test_peer_log_limiter(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limiter = PeerLogLimiter(logging.getLogger("t"), lambda: now[0], interval_s=60)
    with caplog.at_level(logging.WARNING):
        assert limiter.warning("1.2.3.4", "refused %s", "a")
        assert not limiter.warning("1.2.3.4", "refused %s", "b")
        assert limiter.warning("5.6.7.8", "refused %s", "c")
        now[0] = 61
        assert limiter.warning("1.2.3.4", "refused %s", "d")
    assert [r.getMessage() for r in caplog.records] == [
        "refused a", "refused c", "refused d (1 more from this host not logged)"]


def test_dynamic_tls_keys_win_as_in_kafka() -> None:
    """Per listener over broker-wide; at the same level the dynamic value over server.properties; the
    inline PEM forms set dynamically replace a static keystore file."""
    from tierlog.server.security.tls import TlsSettings

    config = BrokerConfig({"listeners": "SSL://127.0.0.1:0,OTHER://127.0.0.1:0",
                           "listener.security.protocol.map": "SSL:SSL,OTHER:SSL",
                           "ssl.keystore.location": "/static.pem",
                           "listener.name.other.ssl.keystore.location": "/other-static.pem"})
    assert TlsSettings.from_config(config, "SSL").keystore_location == "/static.pem"
    dyn = {"ssl.keystore.location": "/dyn.pem"}
    assert TlsSettings.from_config(config, "SSL", dyn).keystore_location == "/dyn.pem"
    # A static per-listener value beats a dynamic broker-wide one; a dynamic per-listener one beats it.
    assert TlsSettings.from_config(config, "OTHER", dyn).keystore_location == "/other-static.pem"
    dyn["listener.name.other.ssl.keystore.location"] = "/other-dyn.pem"
    assert TlsSettings.from_config(config, "OTHER", dyn).keystore_location == "/other-dyn.pem"
    inline = TlsSettings.from_config(config, "SSL", {"listener.name.ssl.ssl.keystore.certificate.chain": "C",
                                                     "listener.name.ssl.ssl.keystore.key": "K"})
    assert (inline.keystore_location, inline.certificate_chain, inline.private_key) == (None, "C", "K")


def test_only_the_reconfigurable_tls_keys_take_a_listener_prefix_in_alter_configs() -> None:
    from tierlog.metadata import ConfigResourceType
    from tierlog.metadata.configs import stored_key

    name, key = stored_key(ConfigResourceType.BROKER, "listener.name.SASL_SSL.ssl.keystore.location")
    assert (name, key.name) == ("listener.name.sasl_ssl.ssl.keystore.location", "ssl.keystore.location")
    for bad in ("listener.name.ssl.ssl.client.auth", "listener.name.ssl.nonsense", "listener.name.ssl"):
        with pytest.raises(ConfigError, match="cannot be updated dynamically"):
            stored_key(ConfigResourceType.BROKER, bad)
    with pytest.raises(ConfigError):
        stored_key(ConfigResourceType.TOPIC, "listener.name.ssl.ssl.keystore.location")
