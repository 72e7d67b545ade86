# Sourced by scripts/*: makes a virtualenv in .venv with tierlog and its test tools installed,
# and the system packages the tests drive (kcat; Java 17 for Spark) present.
set -euo pipefail
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Reinstall only when pyproject.toml, setup.py or the C record walk changed since the last install
# (the install compiles the C walk in place, src/tierlog/records/_cwalk.*.so; without a C compiler
# it goes on without it and the broker uses the numba walk).
stamp=.venv/.tierlog-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
    || [ src/tierlog/records/_cwalk.c -nt "$stamp" ]; then
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
# The web console's browser tests drive headless Chromium (Debian's chromium and chromium-driver).
if [ "${TIERLOG_NEED_CHROMIUM:-1}" = 1 ] && ! command -v chromedriver >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
      || echo "warning: could not install chromium with apt-get; the console's browser tests will say so" >&2
  fi
fi
# The power-loss harness (tests/reliability/lazyfs.py) is a FUSE filesystem: libfuse3 and fusermount3.
if [ "${TIERLOG_NEED_FUSE:-1}" = 1 ] && ! command -v fusermount3 >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3) >/dev/null 2>&1 \
      || echo "warning: could not install fuse3 with apt-get; the power-loss tests will say so" >&2
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
# Apache Kafka's jars (and Spark's Kafka source), for the tests that hold tierlog against Kafka itself
# (tests/jvm/, marker `jvm`) and bench/vs_kafka.py. Fetched once into build/ (ignored by git, kept between
# runs); Maven's own cache (~/.m2) makes a refetch cheap. TIERLOG_NEED_KAFKA_JARS=0 skips it.
if [ "${TIERLOG_NEED_KAFKA_JARS:-1}" = 1 ] && command -v java >/dev/null 2>&1; then
  # The Java test programs in tests/jvm/java/ are compiled at test time: they need a JDK's javac.
  if ! command -v javac >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless) >/dev/null 2>&1 \
      || echo "warning: could not install a JDK with apt-get; the jvm tests that compile Java will say so" >&2
  fi
  if ! command -v mvn >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven) >/dev/null 2>&1 \
      || echo "warning: could not install maven with apt-get; the jvm tests will say so" >&2
  fi
  mkdir -p build
  for pom in tests/jvm/pom.xml tests/jvm/spark/pom.xml; do
    out=$(sed -n 's#.*<outputDirectory>${project.basedir}/[./]*/\(build/[a-z-]*\)</outputDirectory>.*#\1#p' "$pom")
    stamp_jars="$out/.fetched"
    if [ ! -f "$stamp_jars" ] || [ "$pom" -nt "$stamp_jars" ]; then
      if command -v mvn >/dev/null 2>&1 && rm -rf "$out" \
          && mvn -q -B -f "$pom" dependency:copy-dependencies >/dev/null 2>build/mvn-fetch.log; then
        touch "$stamp_jars"
      else
        echo "warning: could not fetch the jars of $pom (see build/mvn-fetch.log); the jvm tests will say so" >&2
      fi
    fi
  done
fi
# The JVM reader of the Spark pipeline (jvm/spark-reader, tierlog.pipeline.read): built into
# build/spark-reader/ when its sources' hash changed. Runs after the JDK and mvn installs above; without them it says so; the reader
# then falls back to the Python one and its tests skip naming the missing jar. TIERLOG_NEED_SPARK_READER=0
# skips it.
if [ "${TIERLOG_NEED_SPARK_READER:-1}" = 1 ] && command -v java >/dev/null 2>&1; then
  scripts/build-spark-reader || true
fi
