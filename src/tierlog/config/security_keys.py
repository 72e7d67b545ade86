"""The security keys: listeners' protocols, TLS, SASL, authorization and quotas (Kafka's names).

Every key of :data:`LISTENER_KEYS` may also be set for one listener with Kafka's prefix
``listener.name.<listener name, lower case>.<key>``; that value wins over the broker-wide one for
that listener. ``sasl.jaas.config`` is only given that way, with the mechanism in between
(``listener.name.sasl_ssl.plain.sasl.jaas.config``), as in Kafka.
"""

from __future__ import annotations

from tierlog.config.definition import ConfigKey, Importance, Scope, Type, Validator, Value, at_least, one_of

H = Importance.HIGH
M = Importance.MEDIUM
L = Importance.LOW

#: Kafka's security protocols, in the order its docs list them.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms tierlog's brokers serve.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: ``authorizer.class.name`` values that turn on tierlog's authorizer (Kafka's StandardAuthorizer rules);
#: Kafka's class name is accepted so a Kafka server.properties works unchanged.
AUTHORIZER_CLASS_NAMES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "tierlog.StandardAuthorizer")
#: The prefix of a per-listener override.
LISTENER_PREFIX = "listener.name."
#: The per-listener key naming a mechanism's JAAS configuration.
JAAS_SUFFIX = ".sasl.jaas.config"
#: The per-listener key naming a mechanism's server callback handler (Kafka's class names; tierlog
#: reads it for OAUTHBEARER, where naming Kafka's unsecured validator opts into unsigned tokens).
CALLBACK_HANDLER_SUFFIX = ".sasl.server.callback.handler.class"


def _key(name: str, type_: Type, default: Value, doc: str, *, importance: Importance = M,
         validator: Validator | None = None, valid: str = "", dynamic: bool = False, group: str = "security") -> ConfigKey:
    return ConfigKey(name=name, type=type_, default=default, doc=doc, importance=importance, scope=Scope.BROKER,
                     validator=validator, valid_values=valid, dynamic=dynamic, group=group)


LISTENER_KEYS: list[ConfigKey] = [
    _key("ssl.keystore.type", Type.STRING, "PEM",
         "The format of the broker's certificate and key; tierlog reads PEM only (Kafka's PEM keystore).",
         validator=one_of("PEM", case_insensitive=True), dynamic=True),
    _key("ssl.keystore.location", Type.STRING, None,
         "A PEM file holding the broker's private key and its certificate chain (leaf first). The file is "
         "checked for changes as connections arrive (at most once a second) and a changed one is used for new "
         "connections without a restart. Dynamic, per broker and best per listener "
         "(listener.name.<name>.ssl.keystore.location through IncrementalAlterConfigs on the broker): the new "
         "keystore is loaded and checked first (a bad one is refused with INVALID_REQUEST and the old one stays) "
         "and serves new connections at once.", importance=H, dynamic=True),
    _key("ssl.keystore.password", Type.PASSWORD, None,
         "Accepted for Kafka compatibility; a PEM keystore has no store password (use ssl.key.password).", dynamic=True),
    _key("ssl.key.password", Type.PASSWORD, None,
         "The password of an encrypted private key in ssl.keystore.location or ssl.keystore.key.", importance=H, dynamic=True),
    _key("ssl.keystore.certificate.chain", Type.PASSWORD, None,
         "The broker's certificate chain in PEM, inline (instead of ssl.keystore.location).", dynamic=True),
    _key("ssl.keystore.key", Type.PASSWORD, None,
         "The broker's private key in PEM, inline (instead of ssl.keystore.location).", dynamic=True),
    _key("ssl.truststore.type", Type.STRING, "PEM",
         "The format of the trusted certificates that client certificates are checked against; PEM only.",
         validator=one_of("PEM", case_insensitive=True), dynamic=True),
    _key("ssl.truststore.location", Type.STRING, None,
         "A PEM file of CA certificates trusted to sign client certificates (mutual TLS).", importance=H, dynamic=True),
    _key("ssl.truststore.password", Type.PASSWORD, None,
         "Accepted for Kafka compatibility; a PEM truststore has no password.", dynamic=True),
    _key("ssl.truststore.certificates", Type.PASSWORD, None,
         "Trusted CA certificates in PEM, inline (instead of ssl.truststore.location).", dynamic=True),
    _key("ssl.client.auth", Type.STRING, "none",
         "Whether TLS clients must present a certificate: required refuses a client without a trusted one, "
         "requested asks for one and accepts a client without, none does not ask.",
         importance=M, validator=one_of("required", "requested", "none")),
    _key("ssl.enabled.protocols", Type.LIST, ("TLSv1.2", "TLSv1.3"), "The TLS versions accepted.",
         validator=one_of("TLSv1.2", "TLSv1.3")),
    _key("ssl.protocol", Type.STRING, "TLSv1.3",
         "Accepted for Kafka compatibility; the versions used are ssl.enabled.protocols."),
    _key("ssl.cipher.suites", Type.LIST, (),
         "The TLS 1.2 cipher suites accepted, by IANA or OpenSSL name; empty: OpenSSL's secure defaults. "
         "TLS 1.3 suites are always OpenSSL's."),
    _key("ssl.principal.mapping.rules", Type.STRING, "DEFAULT",
         "How the distinguished name of a client certificate becomes the principal's name: Kafka's rules, "
         "RULE:pattern/replacement/[LU] or DEFAULT (the whole name, RFC 2253), separated by commas; the first "
         "rule whose pattern matches applies."),
    _key("ssl.endpoint.identification.algorithm", Type.STRING, "https",
         "Accepted for Kafka compatibility (it concerns a client checking the broker's name)."),
    _key("ssl.allow.dn.changes", Type.BOOLEAN, False,
         "Whether a dynamic keystore update may change the certificate's subject (distinguished name); false, "
         "Kafka's default, refuses a keystore whose certificate names another subject."),
    _key("ssl.allow.san.changes", Type.BOOLEAN, False,
         "Whether a dynamic keystore update may drop subject alternative names of the certificate; false, "
         "Kafka's default, refuses a keystore whose certificate lacks one the old one had."),
    _key("sasl.enabled.mechanisms", Type.LIST, ("GSSAPI",),
         "The SASL mechanisms served on SASL listeners; tierlog serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and "
         "OAUTHBEARER (Kafka's default, GSSAPI, is not served and is ignored in this list).", importance=H,
         validator=one_of("GSSAPI", *SASL_MECHANISMS)),
    _key("connections.max.reauth.ms", Type.LONG, 0,
         "KIP-368: the longest a SASL session lasts before the client must authenticate again (0: for ever). "
         "A request on an expired session closes the connection.", validator=at_least(0)),
    _key("sasl.oauthbearer.jwks.endpoint.url", Type.STRING, None,
         "Where the JSON Web Key Set that signs OAUTHBEARER tokens is fetched (http(s):// or file:)."),
    _key("sasl.oauthbearer.expected.audience", Type.LIST, (),
         "The audiences a token must name one of (aud claim); empty: not checked."),
    _key("sasl.oauthbearer.expected.issuer", Type.STRING, None, "The issuer a token must name (iss); unset: not checked."),
    _key("sasl.oauthbearer.clock.skew.seconds", Type.INT, 30,
         "How far the broker's clock and the token issuer's may disagree when exp, nbf and iat are checked.",
         validator=at_least(0)),
    _key("sasl.oauthbearer.sub.claim.name", Type.STRING, "sub", "The claim naming the principal."),
    _key("sasl.oauthbearer.jwks.endpoint.refresh.ms", Type.LONG, 3600000,
         "How often the JWKS is fetched again (also at once when a token names an unknown key id).",
         validator=at_least(1)),
]

OTHER_KEYS: list[ConfigKey] = [
    _key("listener.security.protocol.map", Type.LIST,
         ("SASL_SSL:SASL_SSL", "PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT"),
         "The security protocol of each listener name, NAME:PROTOCOL; every listener's name must be in it. "
         "Every ssl.*, sasl.* and connections.max.reauth.ms key may also be set for one listener as "
         "listener.name.<name>.<key>, and SASL/PLAIN users are listed in "
         "listener.name.<name>.plain.sasl.jaas.config (Kafka's PlainLoginModule syntax). OAUTHBEARER validates "
         "signed tokens against sasl.oauthbearer.jwks.endpoint.url; Kafka's unsecured (unsigned) tokens are "
         "accepted only when listener.name.<name>.oauthbearer.sasl.server.callback.handler.class names "
         "Kafka's OAuthBearerUnsecuredValidatorCallbackHandler (its full class name).",
         importance=H),
    _key("inter.broker.listener.name", Type.STRING, None,
         "Accepted (it must name a listener); a single tierlog node has no other broker to talk to."),
    _key("security.inter.broker.protocol", Type.STRING, "PLAINTEXT",
         "Accepted for Kafka compatibility; a single tierlog node has no other broker to talk to.",
         validator=one_of(*SECURITY_PROTOCOLS)),
    _key("sasl.mechanism.inter.broker.protocol", Type.STRING, "GSSAPI",
         "Accepted for Kafka compatibility; a single tierlog node has no other broker to talk to."),
    _key("authorizer.class.name", Type.STRING, "",
         "The authorizer checking every request against the ACLs in the metadata log, with Kafka's "
         "StandardAuthorizer rules; empty: no authorization (every principal may do everything, and "
         "CreateAcls/DescribeAcls/DeleteAcls answer SECURITY_DISABLED).", importance=H,
         validator=one_of("", *AUTHORIZER_CLASS_NAMES)),
    _key("super.users", Type.STRING, "",
         "Principals allowed every operation whatever the ACLs say, separated by semicolons "
         "(User:admin;User:CN=ops,O=example).", importance=H),
    _key("allow.everyone.if.no.acl.found", Type.BOOLEAN, False,
         "What a request on a resource that no ACL applies to gets: true allows it, false (Kafka's default) "
         "denies it.", importance=H),
]

#: Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: the TLS keys a broker takes through AlterConfigs without a
#: restart (per broker, with or without a listener prefix), each validated before it is recorded.
RECONFIGURABLE_TLS_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates",
})

SECURITY_KEYS = LISTENER_KEYS + OTHER_KEYS
LISTENER_KEY_NAMES = frozenset(k.name for k in LISTENER_KEYS)
