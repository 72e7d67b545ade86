"""ACLs with real clients over SASL_SSL SCRAM-SHA-512: Kafka's StandardAuthorizer rules end to end.

Users: ``admin`` (a super user, SASL/PLAIN), and SCRAM users ``alice`` (ALL on topics prefixed
``app-``, READ on groups prefixed ``app-``), ``bob`` (WRITE on the literal topic ``app-orders``) and
``eve`` (no ACL). ``User:*`` is DENYed READ on ``app-secret``. The attack suite prints, per attempt,
what was tried and what came back, and counts the unauthorized reads and writes that got through.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.security.conftest import Pki, SecureBroker
from tests.security.test_sasl import PLAIN_JAAS, sasl_overrides

TIMEOUT_S = 30.0
SCRAM_USERS = {"alice": "alice-pw", "bob": "bob-pw", "eve": "eve-pw"}


def _conf(pki: Pki, broker: SecureBroker, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    return {"bootstrap.servers": broker.address("SASL_SSL"), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca_file), "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


def _admin_conf(pki: Pki, broker: SecureBroker) -> dict[str, str]:
    return _conf(pki, broker, "admin", "admin-secret", "PLAIN")


def _acl_overrides(pki: Pki) -> dict[str, str]:
    return sasl_overrides(pki, **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    })


def _bindings() -> list[Any]:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    pre, lit = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
    return [
        AclBinding(ResourceType.TOPIC, "app-", pre, "User:alice", "*", AclOperation.ALL, allow),
        AclBinding(ResourceType.GROUP, "app-", pre, "User:alice", "*", AclOperation.READ, allow),
        AclBinding(ResourceType.TOPIC, "app-orders", lit, "User:bob", "*", AclOperation.WRITE, allow),
        AclBinding(ResourceType.TOPIC, "app-secret", lit, "User:*", "*", AclOperation.READ, deny),
    ]


def _setup(broker: SecureBroker, pki: Pki) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(_admin_conf(pki, broker))
    for f in admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), p.encode())
            for u, p in SCRAM_USERS.items()]).values():
        f.result(TIMEOUT_S)
    for f in admin.create_acls(_bindings()).values():
        f.result(TIMEOUT_S)
    for f in admin.create_topics([NewTopic(t, num_partitions=1) for t in ("app-orders", "app-secret", "other")]).values():
        f.result(TIMEOUT_S)
    produce(_admin_conf(pki, broker), "app-secret", [b"classified"])


@pytest.fixture
def acl_broker(secure_broker_factory: type, pki: Pki) -> SecureBroker:
    broker: SecureBroker = secure_broker_factory.start(_acl_overrides(pki))
    try:
        _setup(broker, pki)
    except Exception:
        print(broker.log_text()[-5000:])
        raise
    return broker


def produce(conf: dict[str, str], topic: str, values: list[bytes]) -> list[str]:
    """Each value's delivery outcome: "ok" or the error's name."""
    from confluent_kafka import Producer

    outcomes: list[str] = []
    producer = Producer({**conf, "linger.ms": 0, "message.timeout.ms": 15000})
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, _msg: outcomes.append("ok" if err is None else err.name()))
    producer.flush(TIMEOUT_S)
    return outcomes


def consume(conf: dict[str, str], topic: str, group: str, want: int) -> tuple[list[bytes], str | None]:
    """Up to ``want`` values read from the start, and the first error seen (None if none)."""
    from confluent_kafka import Consumer

    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    error: str | None = None
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < want and error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                error = msg.error().name()
                continue
            got.append(msg.value())
    finally:
        consumer.close()
    return got, error


def read_assigned(conf: dict[str, str], topic: str) -> tuple[list[bytes], str | None]:
    """Fetch partition 0 from offset 0 without the group protocol: the values read and the first error."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": "app-assigned", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    error: str | None = None
    deadline = time.monotonic() + 10
    try:
        while not got and error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                error = msg.error().name()
            else:
                got.append(msg.value())
    finally:
        consumer.close()
    return got, error


def end_offset(pki: Pki, broker: SecureBroker, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**_admin_conf(pki, broker), "group.id": "admin-probe"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)[1])
    finally:
        c.close()


def test_acls_decide_with_deny_over_allow_prefixes_and_super_users(acl_broker: SecureBroker, pki: Pki) -> None:
    broker = acl_broker
    alice = _conf(pki, broker, "alice", "alice-pw")
    # Prefixed ALLOW ALL on app-*: alice produces and consumes in a group app-*.
    assert produce(alice, "app-orders", [b"a1", b"a2"]) == ["ok", "ok"]
    got, error = consume(alice, "app-orders", "app-readers", 2)
    assert (sorted(got), error) == ([b"a1", b"a2"], None)
    # DENY READ for User:* on app-secret wins over alice's ALLOW ALL; her WRITE there is still allowed.
    got, error = consume(alice, "app-secret", "app-s", 1)
    assert (got, error) == ([], "TOPIC_AUTHORIZATION_FAILED")
    # A group outside her prefix: GROUP_AUTHORIZATION_FAILED.
    got, error = consume(alice, "app-orders", "not-hers", 1)
    assert (got, error) == ([], "GROUP_AUTHORIZATION_FAILED")
    # The super user reads what User:* is denied.
    got, error = consume(_admin_conf(pki, broker), "app-secret", "admin-g", 1)
    assert (got, error) == ([b"classified"], None)


def test_metadata_shows_only_describable_topics(acl_broker: SecureBroker, pki: Pki) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    eve = AdminClient(_conf(pki, acl_broker, "eve", "eve-pw"))
    assert set(eve.list_topics(timeout=TIMEOUT_S).topics) == set()
    named = eve.list_topics("app-orders", timeout=TIMEOUT_S).topics["app-orders"]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice = AdminClient(_conf(pki, acl_broker, "alice", "alice-pw"))
    assert set(alice.list_topics(timeout=TIMEOUT_S).topics) == {"app-orders", "app-secret"}
    bob = AdminClient(_conf(pki, acl_broker, "bob", "bob-pw"))
    assert set(bob.list_topics(timeout=TIMEOUT_S).topics) == {"app-orders"}  # WRITE implies DESCRIBE


def test_acl_admin_apis_and_restart(acl_broker: SecureBroker, pki: Pki) -> None:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    admin = AdminClient(_admin_conf(pki, acl_broker))
    assert sorted(map(str, admin.describe_acls(everything).result(TIMEOUT_S))) == sorted(map(str, _bindings()))
    # eve may not list ACLs. (kafka-python here: librdkafka 2.x drops DescribeAcls' top-level
    # CLUSTER_AUTHORIZATION_FAILED and returns an empty list.)
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    eve = KafkaAdminClient(bootstrap_servers=acl_broker.address("SASL_SSL"), security_protocol="SASL_SSL",
                           ssl_cafile=str(pki.ca_file), sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="eve",
                           sasl_plain_password="eve-pw")
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            eve.describe_acls(ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, ResourcePatternFilter(
                KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        eve.close()
    # MATCH: every ACL that applies to the topic app-orders.
    match = AclBindingFilter(ResourceType.TOPIC, "app-orders", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert {b.principal for b in admin.describe_acls(match).result(TIMEOUT_S)} == {"User:alice", "User:bob"}

    # ACLs are in the metadata log: after a restart they still decide.
    acl_broker.restart()
    admin = AdminClient(_admin_conf(pki, acl_broker))
    assert len(admin.describe_acls(everything).result(TIMEOUT_S)) == len(_bindings())
    bob = _conf(pki, acl_broker, "bob", "bob-pw")
    assert produce(bob, "app-orders", [b"b1"]) == ["ok"]
    assert produce(_conf(pki, acl_broker, "eve", "eve-pw"), "app-orders", [b"e1"]) == ["TOPIC_AUTHORIZATION_FAILED"]

    # Deleting bob's ACL takes his WRITE away.
    bob_filter = AclBindingFilter(ResourceType.TOPIC, "app-orders", ResourcePatternType.LITERAL, "User:bob", None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([bob_filter])[bob_filter].result(TIMEOUT_S)
    assert [b.principal for b in deleted] == ["User:bob"]
    assert produce(bob, "app-orders", [b"b2"]) == ["TOPIC_AUTHORIZATION_FAILED"]


def test_kafka_python_over_scram_with_acls(acl_broker: SecureBroker, pki: Pki) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    from tests.helpers.kafka_python import group_consumer

    def kw(user: str) -> dict[str, Any]:
        return {"bootstrap_servers": acl_broker.address("SASL_SSL"), "security_protocol": "SASL_SSL",
                "ssl_cafile": str(pki.ca_file), "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": user,
                "sasl_plain_password": SCRAM_USERS[user]}

    producer = KafkaProducer(**kw("alice"))
    producer.send("app-orders", b"kp1").get(TIMEOUT_S)
    producer.close()
    consumer = group_consumer("app-orders", group_id="app-kp", auto_offset_reset="earliest",
                              consumer_timeout_ms=int(TIMEOUT_S * 1000), **kw("alice"))
    got: list[bytes] = []
    try:
        # Stops at kp1: iterating to the end would wait out consumer_timeout_ms (30 s) for nothing.
        for m in consumer:
            got.append(m.value)
            if m.value == b"kp1":
                break
        assert b"kp1" in got
    finally:
        consumer.close()
    before = end_offset(pki, acl_broker, "app-orders")
    eve = KafkaProducer(**kw("eve"), max_block_ms=10000, retries=0)
    with pytest.raises(TopicAuthorizationFailedError):
        eve.send("app-orders", b"e").get(TIMEOUT_S)
    eve.close()
    assert end_offset(pki, acl_broker, "app-orders") == before


def test_attack_suite_finds_no_unauthorized_read_or_write(acl_broker: SecureBroker, pki: Pki) -> None:
    """Each attempt is something the principal must not be able to do; it prints what came back."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    broker = acl_broker
    eve = _conf(pki, broker, "eve", "eve-pw")
    alice = _conf(pki, broker, "alice", "alice-pw")
    anonymous = {"bootstrap.servers": broker.address("PLAINTEXT")}
    breaches: list[str] = []

    def attempt(what: str, action: Callable[[], object], succeeded: Callable[[object], bool]) -> None:
        try:
            outcome: object = action()
        except Exception as e:  # the refusal, as the client reports it
            outcome = f"{type(e).__name__}: {e}"
        ok = succeeded(outcome)
        print(f"{'BREACH' if ok else 'refused'}: {what} -> {outcome}")
        if ok:
            breaches.append(what)

    secret_end = end_offset(pki, broker, "app-secret")
    orders_end = end_offset(pki, broker, "app-orders")
    attempt("eve produces to app-orders", lambda: produce(eve, "app-orders", [b"x"]), lambda o: o == ["ok"])
    attempt("eve produces to other", lambda: produce(eve, "other", [b"x"]), lambda o: o == ["ok"])
    attempt("eve reads app-secret", lambda: consume(eve, "app-secret", "app-eve", 1),
            lambda o: isinstance(o, tuple) and bool(o[0]))
    attempt("eve fetches app-secret by assignment (no group)", lambda: read_assigned(eve, "app-secret"),
            lambda o: isinstance(o, tuple) and bool(o[0]))
    attempt("alice fetches app-secret by assignment (DENY over ALLOW)", lambda: read_assigned(alice, "app-secret"),
            lambda o: isinstance(o, tuple) and bool(o[0]))
    attempt("alice reads app-secret (DENY over ALLOW)", lambda: consume(alice, "app-secret", "app-a2", 1),
            lambda o: isinstance(o, tuple) and bool(o[0]))
    attempt("anonymous (PLAINTEXT) reads app-secret", lambda: consume(anonymous, "app-secret", "app-anon", 1),
            lambda o: isinstance(o, tuple) and bool(o[0]))
    attempt("anonymous (PLAINTEXT) produces to app-orders", lambda: produce(anonymous, "app-orders", [b"x"]),
            lambda o: o == ["ok"])

    def admin_call(conf: dict[str, str], call: Callable[[AdminClient], dict[Any, Any]]) -> list[str]:
        admin = AdminClient(conf)  # kept alive until every answer is in
        futures = call(admin)
        out = []
        for f in futures.values():
            try:
                f.result(TIMEOUT_S)
                out.append("ok")
            except Exception as e:
                out.append(str(e))
        return out

    attempt("anonymous sets a SCRAM password for alice", lambda: admin_call(anonymous, lambda a: (
        a.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"stolen")]))), lambda o: o == ["ok"])
    attempt("eve sets a SCRAM password for alice", lambda: admin_call(eve, lambda a: (
        a.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"stolen")]))), lambda o: o == ["ok"])
    attempt("eve grants herself ALL on every topic", lambda: admin_call(eve, lambda a: a.create_acls([AclBinding(
        ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:eve", "*", AclOperation.ALL,
        AclPermissionType.ALLOW)])), lambda o: o == ["ok"])
    attempt("eve deletes app-orders", lambda: admin_call(eve, lambda a: a.delete_topics(["app-orders"])),
            lambda o: o == ["ok"])
    attempt("eve creates a topic", lambda: admin_call(eve, lambda a: a.create_topics([NewTopic("eve-topic", 1)])),
            lambda o: o == ["ok"])
    attempt("alice creates a topic outside app-", lambda: admin_call(alice, lambda a: a.create_topics(
        [NewTopic("not-app", 1)])), lambda o: o == ["ok"])

    from tests.helpers.cli import cli

    def quota_cli(*args: str) -> str:
        done = cli("quotas", *args, "--bootstrap-server", broker.address("PLAINTEXT"))
        return f"exit {done.returncode}: {(done.stdout + done.stderr).strip()}"

    attempt("anonymous sets alice's produce quota", lambda: quota_cli(
        "alter", "--user", "alice", "--add-config", "producer_byte_rate=1"), lambda o: str(o).startswith("exit 0"))
    attempt("anonymous describes the quotas", lambda: quota_cli("describe"), lambda o: str(o).startswith("exit 0"))

    # The log agrees: nothing was written where it must not be, the password still works.
    assert end_offset(pki, broker, "app-secret") == secret_end
    assert end_offset(pki, broker, "app-orders") == orders_end
    assert produce(alice, "app-orders", [b"still-me"]) == ["ok"]
    topics = set(AdminClient(_admin_conf(pki, broker)).list_topics(timeout=TIMEOUT_S).topics)
    assert {"app-orders"} <= topics and not {"eve-topic", "not-app"} & topics
    print(f"{len(breaches)} unauthorized reads or writes")
    assert breaches == []


def test_without_an_authorizer_acl_apis_answer_security_disabled(secure_broker_factory: type, pki: Pki) -> None:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import SecurityDisabledError

    broker: SecureBroker = secure_broker_factory.start({"listeners": "PLAINTEXT://127.0.0.1:0"})
    # kafka-python: librdkafka 2.x does not always surface DescribeAcls' top-level error.
    kp = KafkaAdminClient(bootstrap_servers=broker.address("PLAINTEXT"))
    try:
        with pytest.raises(SecurityDisabledError):
            kp.describe_acls(ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, ResourcePatternFilter(
                KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        kp.close()
    admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})
    # Every operation when no authorizer is configured: 7 for the cluster, 8 for a topic (Kafka's AclEntry).
    cluster = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert len(cluster.authorized_operations) == 7
    name = f"t-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 1)])[name].result(TIMEOUT_S)
    described = admin.describe_topics(TopicCollection([name]), include_authorized_operations=True)[name].result(
        TIMEOUT_S)
    assert len(described.authorized_operations) == 8


def test_tierlog_acls_cli_over_sasl_ssl(acl_broker: SecureBroker, pki: Pki) -> None:
    from tests.helpers.cli import ok

    conn = ["--bootstrap-server", acl_broker.address("SASL_SSL"), "--timeout", "30",
            "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={pki.ca_file}",
            "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=admin", "-X", "sasl.password=admin-secret"]
    eve = _conf(pki, acl_broker, "eve", "eve-pw")
    assert produce(eve, "other", [b"x"]) == ["TOPIC_AUTHORIZATION_FAILED"]
    added = ok("acls", "add", *conn, "--allow-principal", "User:eve", "--operation", "Write", "--operation",
               "Describe", "--topic", "oth", "--resource-pattern-type", "prefixed")
    print(added)
    assert "ResourcePattern(resourceType=TOPIC, name=oth, patternType=PREFIXED)" in added
    assert produce(eve, "other", [b"x"]) == ["ok"]
    listed = ok("acls", "list", *conn, "--principal", "User:eve")
    assert "(principal=User:eve, host=*, operation=WRITE, permissionType=ALLOW)" in listed
    assert "User:alice" not in listed
    removed = ok("acls", "remove", *conn, "--topic", "oth", "--resource-pattern-type", "prefixed",
                 "--allow-principal", "User:eve", "--operation", "Write")
    assert "Removed 1 ACL(s)" in removed
    assert produce(eve, "other", [b"y"]) == ["TOPIC_AUTHORIZATION_FAILED"]


def test_transactions_need_write_on_the_transactional_id(acl_broker: SecureBroker, pki: Pki) -> None:
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    eve = Producer({**_conf(pki, acl_broker, "eve", "eve-pw"), "transactional.id": "app-tx-eve"})
    with pytest.raises(KafkaException, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        eve.init_transactions(TIMEOUT_S)
    admin = AdminClient(_admin_conf(pki, acl_broker))
    for f in admin.create_acls([AclBinding(ResourceType.TRANSACTIONAL_ID, "app-tx-", ResourcePatternType.PREFIXED,
                                           "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)]).values():
        f.result(TIMEOUT_S)
    alice = Producer({**_conf(pki, acl_broker, "alice", "alice-pw"), "transactional.id": "app-tx-1"})
    alice.init_transactions(TIMEOUT_S)
    alice.begin_transaction()
    alice.produce("app-orders", b"in-a-transaction")
    alice.commit_transaction(TIMEOUT_S)
    got, error = consume({**_conf(pki, acl_broker, "alice", "alice-pw"), "isolation.level": "read_committed"},
                         "app-orders", "app-txn-reader", 1)
    assert (got, error) == ([b"in-a-transaction"], None)
    # alice's transactional id does not cover eve's.
    alice_as_eve = Producer({**_conf(pki, acl_broker, "alice", "alice-pw"), "transactional.id": "other-tx"})
    with pytest.raises(KafkaException, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        alice_as_eve.init_transactions(TIMEOUT_S)


def test_admin_requests_are_checked_with_kafkas_errors(acl_broker: SecureBroker, pki: Pki) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, OffsetSpec

    alice_conf = _conf(pki, acl_broker, "alice", "alice-pw")
    assert produce(alice_conf, "app-orders", [b"o1"]) == ["ok"]
    assert consume(alice_conf, "app-orders", "app-g1", 1) == ([b"o1"], None)
    eve, alice = AdminClient(_conf(pki, acl_broker, "eve", "eve-pw")), AdminClient(alice_conf)
    bob = AdminClient(_conf(pki, acl_broker, "bob", "bob-pw"))
    admin = AdminClient(_admin_conf(pki, acl_broker))

    def error_of(future: Any) -> str:
        try:
            future.result(TIMEOUT_S)
            return "ok"
        except Exception as e:
            code = e.args[0] if e.args else e
            return code.name() if hasattr(code, "name") else str(e)

    def groups(client: AdminClient) -> set[str]:
        return {g.group_id for g in client.list_consumer_groups().result(TIMEOUT_S).valid}

    # ListGroups: DESCRIBE on the cluster lists all (the super user), else only describable groups.
    assert "app-g1" in groups(admin) and "app-g1" in groups(alice) and groups(eve) == set()
    checks = {
        "eve describes group app-g1": (error_of(eve.describe_consumer_groups(["app-g1"])["app-g1"]),
                                       "GROUP_AUTHORIZATION_FAILED"),
        "eve fetches app-g1's offsets": (error_of(eve.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("app-g1")])["app-g1"]), "GROUP_AUTHORIZATION_FAILED"),
        "eve deletes group app-g1": (error_of(eve.delete_consumer_groups(["app-g1"])["app-g1"]),
                                     "GROUP_AUTHORIZATION_FAILED"),
        "eve describes app-orders' configs": (error_of(next(iter(eve.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, "app-orders")]).values()))), "TOPIC_AUTHORIZATION_FAILED"),
        "eve describes the broker's configs": (error_of(next(iter(eve.describe_configs(
            [ConfigResource(ConfigResource.Type.BROKER, "1")]).values()))), "CLUSTER_AUTHORIZATION_FAILED"),
        "alice describes app-orders' configs": (error_of(next(iter(alice.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, "app-orders")]).values()))), "ok"),
        "bob adds partitions to app-orders": (error_of(bob.create_partitions(
            [NewPartitions("app-orders", 2)])["app-orders"]), "TOPIC_AUTHORIZATION_FAILED"),
        # bob may describe app-orders (WRITE implies DESCRIBE) but not DELETE in it.
        "bob deletes records of app-orders": (error_of(next(iter(bob.delete_records(
            [TopicPartition("app-orders", 0, 1)]).values()))), "TOPIC_AUTHORIZATION_FAILED"),
        "bob lists app-orders' offsets": (error_of(next(iter(bob.list_offsets(
            {TopicPartition("app-orders", 0): OffsetSpec.latest()}).values()))), "ok"),
        # eve may not describe it: librdkafka learns so from Metadata (TOPIC_AUTHORIZATION_FAILED) and
        # reports the partition as unknown without sending ListOffsets.
        "eve lists app-orders' offsets": (error_of(next(iter(eve.list_offsets(
            {TopicPartition("app-orders", 0): OffsetSpec.latest()}).values()))), "_NOENT"),
    }
    for what, (got, expected) in checks.items():
        print(f"{what}: {got} (expected: {expected})")
    assert {what: got for what, (got, _) in checks.items()} == {what: want for what, (_, want) in checks.items()}
    assert "app-g1" in groups(admin)  # nothing was deleted
