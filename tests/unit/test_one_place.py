"""Guards for "each fact in one place" (#23): an AST scan of src/ fails when a module writes again a
fact that has its one home -- a Kafka error code as a bare constant or a second error-code enum
(home: ``tierlog.errors.ErrorCode``), a ``TopicPartition`` or ``TopicIdPartition`` definition
(home: ``tierlog.ids``), a direct read of the time (home: the injected ``tierlog.clock.Clock``), a
settings field's key read again by name (home: the field's ``setting("key")``).

Each check is a function of a module's source, so the tests below also prove on made-up modules that
it finds what it is meant to find (a guard that can never fail guards nothing).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tierlog.errors import ErrorCode

SRC = Path(__file__).resolve().parents[2] / "src" / "tierlog"
KAFKA_ERROR_NAMES = frozenset(ErrorCode.__members__)
#: Affixes a copied code's name may carry (``UNKNOWN_TOPIC_ID_CODE``, ``ERR_INVALID_REQUEST``).
_AFFIXES = ("_ERROR_CODE", "_CODE", "_ERROR")


def _modules() -> Iterator[tuple[str, str]]:
    for path in sorted(SRC.rglob("*.py")):
        yield str(path.relative_to(SRC.parent)), path.read_text(encoding="utf-8")


def _is_int_literal(node: ast.expr | None) -> bool:
    """``42``, ``-1``, or ``int(...)`` (a copy of another enum's value)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int"


def _assigned_ints(body: list[ast.stmt]) -> Iterator[tuple[str, int]]:
    for stmt in body:
        if isinstance(stmt, ast.Assign) and _is_int_literal(stmt.value):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    yield target.id, stmt.lineno
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and _is_int_literal(stmt.value):
            yield stmt.target.id, stmt.lineno


def _error_code_name(name: str) -> bool:
    upper = name.upper()
    if upper.startswith("ERR_"):
        upper = upper[4:]
    for affix in _AFFIXES:
        if upper.endswith(affix) and upper[: -len(affix)] in KAFKA_ERROR_NAMES:
            return True
    return upper in KAFKA_ERROR_NAMES and name.isupper()


def error_code_copies(source: str) -> list[str]:
    """Module-level int constants named like a Kafka error code, and classes that hold two or more
    of them (a second error-code enum: ``class SecurityErrorCode(IntEnum): NONE = 0; ...``)."""
    tree = ast.parse(source)
    found = [f"{name} (line {line})" for name, line in _assigned_ints(tree.body) if _error_code_name(name)]
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            members = [name for name, _ in _assigned_ints(node.body) if name in KAFKA_ERROR_NAMES]
            if len(members) >= 2 or (members and "error" in node.name.lower()):
                found.append(f"class {node.name} (line {node.lineno}): {', '.join(members)}")
    return found


def test_the_error_code_scan_finds_copies() -> None:
    assert error_code_copies("INVALID_REQUEST = 42\nX = 1\n") == ["INVALID_REQUEST (line 1)"]
    assert error_code_copies("UNKNOWN_TOPIC_ID_CODE: int = 100\n") == ["UNKNOWN_TOPIC_ID_CODE (line 1)"]
    assert error_code_copies("NONE = int(kio.ErrorCode.none)\n") == ["NONE (line 1)"]
    enum_copy = "class SecurityErrorCode(IntEnum):\n    NONE = 0\n    SASL_AUTHENTICATION_FAILED = 58\n"
    assert error_code_copies(enum_copy) == ["class SecurityErrorCode (line 1): NONE, SASL_AUTHENTICATION_FAILED"]
    # Not copies: another enum with a NONE member, names that only share a word, the enum itself used.
    assert error_code_copies("class CompressionType(IntEnum):\n    NONE = 0\n    GZIP = 1\n") == []
    assert error_code_copies("MAX_EPOCH = 32767\nERROR_EXIT = 1\nCODE = ErrorCode.NONE\n") == []


def test_no_module_copies_a_kafka_error_code() -> None:
    copies = {
        name: found
        for name, source in _modules()
        if name != "tierlog/errors.py" and (found := error_code_copies(source))
    }
    assert copies == {}, "Kafka's error codes live in tierlog.errors.ErrorCode only"



#: The shared ids whose one definition is in tierlog.ids.
SHARED_IDS = frozenset({"TopicPartition", "TopicIdPartition"})


def shared_id_definitions(source: str) -> list[str]:
    """Definitions of a shared id: an alias (``TopicPartition = tuple[str, int]``, annotated or a
    ``type`` statement) or a class of that name, anywhere in the module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names = [node.target.id]
        elif isinstance(node, ast.ClassDef):
            names = [node.name]
        elif type(node).__name__ == "TypeAlias":  # ``type TopicPartition = ...`` (Python 3.12)
            names = [ast.unparse(node.name)]  # type: ignore[attr-defined]
        found += [f"{name} (line {node.lineno})" for name in names if name in SHARED_IDS]
    return found


def test_the_shared_id_scan_finds_copies() -> None:
    assert shared_id_definitions("TopicPartition = tuple[str, int]\n") == ["TopicPartition (line 1)"]
    assert shared_id_definitions("TopicPartition: TypeAlias = tuple[str, int]\n") == ["TopicPartition (line 1)"]
    assert shared_id_definitions("class TopicIdPartition:\n    pass\n") == ["TopicIdPartition (line 1)"]
    assert shared_id_definitions("from tierlog.ids import TopicPartition\nTP = TopicPartition\n") == []


def test_no_module_redefines_a_shared_id() -> None:
    copies = {
        name: found
        for name, source in _modules()
        if name != "tierlog/ids.py" and (found := shared_id_definitions(source))
    }
    assert copies == {}, "TopicPartition and TopicIdPartition are defined in tierlog.ids only"


#: The readings of the time module that only tierlog.clock makes (sleeping is not reading the clock).
CLOCK_READINGS = frozenset({"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
                            "process_time", "process_time_ns"})


def direct_clock_reads(source: str) -> list[str]:
    """``time.monotonic()`` and the like, called or passed on (``now_s=time.monotonic``), and the same
    names imported from the time module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr in CLOCK_READINGS and isinstance(node.value, ast.Name)
                and node.value.id == "time"):
            found.append(f"time.{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [f"from time import {a.name} (line {node.lineno})" for a in node.names if a.name in CLOCK_READINGS]
    return found


def test_the_clock_scan_finds_direct_reads() -> None:
    assert direct_clock_reads("import time\nstarted = time.monotonic()\n") == ["time.monotonic (line 2)"]
    assert direct_clock_reads("def f(now_s=time.perf_counter): ...\n") == ["time.perf_counter (line 1)"]
    assert direct_clock_reads("from time import time_ns\n") == ["from time import time_ns (line 1)"]
    assert direct_clock_reads("import time\ntime.sleep(1)\nclock.monotonic_ns()\n") == []


def test_only_the_clock_reads_the_time() -> None:
    reads = {
        name: found
        for name, source in _modules()
        # tierlog.testing holds fakes and fault plugins that sleep and stamp real time on purpose.
        if name != "tierlog/clock.py" and not name.startswith("tierlog/testing/")
        and (found := direct_clock_reads(source))
    }
    assert reads == {}, "read the time through the injected tierlog.clock.Clock"


#: The BrokerConfig getters that read a key by name.
CONFIG_GETTERS = frozenset({"get", "get_int", "get_bool", "get_str", "get_float", "get_list", "get_optional_str",
                            "is_set"})


def setting_keys_declared(source: str) -> set[str]:
    """The keys a module's settings fields are read from: ``x: int = setting("key")``."""
    return {node.args[0].value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setting"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)}


def config_reads_of(source: str, keys: set[str]) -> list[str]:
    """``config.get_int("key")`` and the like for a key of ``keys``."""
    return [f"{node.func.attr}({node.args[0].value!r}) (line {node.lineno})" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CONFIG_GETTERS
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys]


def test_the_settings_scan_finds_a_key_read_again() -> None:
    declared = setting_keys_declared('class S:\n    threads: int = setting("log.cleaner.threads")\n')
    assert declared == {"log.cleaner.threads"}
    assert config_reads_of('n = config.get_int("log.cleaner.threads")\n', declared) == [
        "get_int('log.cleaner.threads') (line 1)"]
    assert config_reads_of('n = config.get_int("log.cleaner.enable")\nconfig.node_id\n', declared) == []


def test_no_module_reads_a_settings_key_by_name() -> None:
    """A key a settings field is declared with is read through that field (``build_settings``), never
    again as ``config.get_*("key")`` in a builder or elsewhere (the config layer itself aside)."""
    modules = list(_modules())
    declared = set().union(*(setting_keys_declared(source) for _, source in modules))
    assert len(declared) > 40  # the scan sees the settings classes
    reads = {name: found for name, source in modules
             if not name.startswith("tierlog/config/") and (found := config_reads_of(source, declared))}
    assert reads == {}, "read a settings key through its settings class, built by tierlog.server.settings"


#: Modules stay at a few hundred lines; a longer one says why in its docstring (the project guide).
MAX_LINES = 600


def test_long_modules_say_why() -> None:
    unexplained = {
        name: source.count("\n")
        for name, source in _modules()
        if source.count("\n") > MAX_LINES
        and "Longer than most modules" not in (ast.get_docstring(ast.parse(source)) or "")
    }
    assert unexplained == {}, f"over {MAX_LINES} lines without 'Longer than most modules ... because' in the docstring"
