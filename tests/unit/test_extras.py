"""The broker installs without the Spark and S3 extras; code behind an extra says which one is
missing in one line instead of failing with a traceback deep in an import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tierlog._util.extras import MissingExtraError, require_extra

_HIDE = ("import importlib.util as u, sys; real = u.find_spec; "
         "u.find_spec = lambda name, *a: None if name.split('.')[0] in {hidden!r} else real(name, *a); ")


def test_a_missing_extra_is_named_in_one_line() -> None:
    with pytest.raises(MissingExtraError) as e:
        require_extra("spark", "the Spark pipeline", "json", "tierlog_no_such_module")
    assert str(e.value) == ("the Spark pipeline needs tierlog_no_such_module: install it with "
                            "pip install 'tierlog[spark]'")
    require_extra("spark", "the Spark pipeline", "json")  # present: nothing happens


@pytest.mark.integration  # a fresh interpreter each: the import must not have happened yet
@pytest.mark.parametrize("hidden", [{"pyspark"}, {"pyarrow"}])
def test_the_pipeline_without_its_extra_fails_with_one_line(hidden: set[str]) -> None:
    code = _HIDE.format(hidden=hidden) + "import tierlog.pipeline.options"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tierlog._util.extras.MissingExtraError: the Spark pipeline needs "), last
    assert last.endswith("pip install 'tierlog[spark]'"), last


@pytest.mark.integration
def test_the_broker_imports_without_the_extras() -> None:
    code = (_HIDE.format(hidden={"pyspark", "pyarrow", "obstore"})
            + "import tierlog.server.broker, tierlog.cli.main, tierlog.tiered.backends.s3; "
            + "assert not {'pyspark', 'pyarrow', 'obstore'} & set(sys.modules), sorted(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.integration
def test_the_s3_backend_without_its_extra_fails_with_one_line() -> None:
    code = (_HIDE.format(hidden={"obstore"})
            + "from tierlog.tiered.backends.s3 import S3RemoteStorageManager; "
            + "S3RemoteStorageManager().configure({'s3.bucket': 'b'})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].endswith(
        "the S3 remote storage needs obstore: install it with pip install 'tierlog[s3]'"), done.stderr
