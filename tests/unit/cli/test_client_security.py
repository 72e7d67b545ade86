"""The client commands' security settings (cli/_security.py) and the protocol commands' SCRAM client
(cli/_sasl.py): Kafka's and librdkafka's names, one line and exit 2 for a bad property or file on
every client family, and a SCRAM exchange against the broker's own SCRAM server."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tierlog.cli._errors import ClientConfigError
from tierlog.cli._sasl import SaslClientError, ScramClient, plain_token
from tierlog.cli._security import client_security, librdkafka_properties, parse_jaas
from tierlog.cli.main import main
from tierlog.server.auth.mechanisms import SCRAM_MECHANISMS, PlainServer, ScramCredential, ScramServer

#: One command of each client family (librdkafka commands and protocol commands alike).
FAMILIES = [
    ["topics", "list"], ["produce", "t"], ["consume", "t"], ["groups", "list"], ["acls", "list"],
    ["quotas", "describe"], ["users", "scram", "list"], ["features", "describe"], ["transactions", "list"],
]
# Port 9 (discard) on loopback: nothing listens, so a command that got past its settings would fail
# with exit 1 (no broker), not 2.
BOOTSTRAP = ["--bootstrap-server", "127.0.0.1:9", "--timeout", "1"]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: " ".join(f[:2]))
@pytest.mark.parametrize(("props", "names"), [
    (["-X", "security.protocol=SASL_SSLL"], "security.protocol"),
    (["-X", "security.protocol=SSL", "-X", "ssl.truststore.location=/nonexistent/ca.crt"], "ssl.truststore.location"),
    (["-X", "ssl.truststore.type=JKS"], "ssl.truststore.type"),
    (["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-1"], "sasl.mechanism"),
    (["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN"], "sasl.jaas.config"),
    (["-X", "security.protocol=SASL_PLAINTEXT", "-X",
      "sasl.jaas.config=com.example.Login required username=\"a\" password=\"b\";"], "sasl.jaas.config"),
    (["-X", "sasl.mechansim=PLAIN"], "sasl.mechansim"),
    (["-X", "no-equals-sign"], "-X"),
    (["--command-config", "/nonexistent/client.properties"], "--command-config"),
], ids=["protocol", "truststore-file", "truststore-type", "mechanism", "no-credentials", "login-module",
        "misspelt-key", "not-key-value", "missing-file"])
def test_a_bad_property_or_file_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], family: list[str],
                                                       props: list[str], names: str) -> None:
    rc, err = _run(capsys, [*family, *BOOTSTRAP, *props])
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert names in lines[0], lines[0]


def test_a_command_config_file_is_read_and_x_wins(tmp_path: Path) -> None:
    import argparse

    from tierlog.cli._security import properties_of

    f = tmp_path / "client.properties"
    f.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                 "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
                 "    username=\"alice\" password=\"a\\\\\"b\";\n")
    args = argparse.Namespace(command_config=f, client_properties=["sasl.mechanism=SCRAM-SHA-256"])
    sec = client_security(properties_of(args))
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_SSL", "SCRAM-SHA-256", "alice", 'a"b')


def test_java_names_become_librdkafka_names(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    sec = client_security({"security.protocol": "sasl_ssl", "ssl.truststore.location": str(ca),
                           "ssl.keystore.location": str(ca), "ssl.endpoint.identification.algorithm": "",
                           "sasl.mechanism": "PLAIN", "client.id": "me",
                           "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                               'username="u" password="p";'})
    assert librdkafka_properties(sec) == {
        "security.protocol": "sasl_ssl", "ssl.ca.location": str(ca), "ssl.certificate.location": str(ca),
        "ssl.key.location": str(ca), "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p",
        "ssl.endpoint.identification.algorithm": "none", "enable.ssl.certificate.verification": True,
        "client.id": "me"}


def test_jaas_options_quoted_and_bare() -> None:
    module, options = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                 'username=admin password="s p;a=ce";')
    assert module.endswith("PlainLoginModule")
    assert options == {"username": "admin", "password": "s p;a=ce"}
    with pytest.raises(ClientConfigError, match="sasl.jaas.config"):
        parse_jaas("PlainLoginModule username=a")


@pytest.mark.parametrize("mechanism", sorted(SCRAM_MECHANISMS))
def test_scram_client_against_the_brokers_scram_server(mechanism: str) -> None:
    mech = SCRAM_MECHANISMS[mechanism]
    salt, iterations = b"0123456789abcdef", 4096
    stored, server_key = mech.keys(mech.salted_password(b"pa,ss=word", salt, iterations))
    credentials = {"al,i=ce": ScramCredential(salt, stored, server_key, iterations)}

    def exchange(password: str) -> tuple[ScramServer, ScramClient]:
        server = ScramServer(mech, credentials.get, b"secret")
        client = ScramClient(mechanism, "al,i=ce", password)
        final = client.final(server.evaluate(client.first()))
        client.verify(server.evaluate(final))
        return server, client

    server, _ = exchange("pa,ss=word")
    assert server.complete and server.user == "al,i=ce"
    from tierlog.server.auth.mechanisms import AuthenticationFailed

    with pytest.raises(AuthenticationFailed):
        exchange("wrong")


def test_scram_client_refuses_a_server_that_does_not_know_the_password() -> None:
    client = ScramClient("SCRAM-SHA-256", "bob", "pw", nonce="abc")
    salt = base64.b64encode(b"salt").decode()
    client.final(f"r=abcdef,s={salt},i=4096".encode())
    with pytest.raises(SaslClientError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))
    with pytest.raises(SaslClientError, match="nonce"):
        ScramClient("SCRAM-SHA-256", "bob", "pw", nonce="abc").final(f"r=xyz123,s={salt},i=4096".encode())
    with pytest.raises(SaslClientError, match="iterations"):
        ScramClient("SCRAM-SHA-256", "bob", "pw", nonce="abc").final(f"r=abcdef,s={salt},i=100".encode())


def test_plain_token_is_what_the_brokers_plain_server_takes() -> None:
    server = PlainServer({"admin": "s3cret"})
    server.evaluate(plain_token("admin", "s3cret"))
    assert server.complete and server.user == "admin"
