# Sourced by scripts/*: makes a virtualenv in .venv with tierlog and its test tools installed,
# and the system packages the tests drive (kcat; Java 17 for Spark) present.
set -euo pipefail
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Reinstall only when pyproject.toml changed since the last install.
stamp=.venv/.tierlog-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev,spark,s3]"
  touch "$stamp"
fi
if [ "${TIERLOG_NEED_KCAT:-1}" = 1 ] && ! command -v kcat >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat) >/dev/null 2>&1 \
      || echo "warning: could not install kcat with apt-get; kcat tests will say so" >&2
  fi
fi
# The Spark pipeline runs on a JVM: Java 17 (pyspark 4 needs 17 or newer).
if [ "${TIERLOG_NEED_JAVA:-1}" = 1 ] && ! command -v java >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless) >/dev/null 2>&1 \
      || echo "warning: could not install Java 17 with apt-get; the Spark tests will say so" >&2
  fi
fi
export PATH="$PWD/.venv/bin:$PATH"
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
