#!/usr/bin/env bash
# Package the compaction library and submit jobs/compact.py with spark-submit, locally or to a cluster.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/spark-submit.sh [OPTIONS] -- STORE [JOB OPTIONS]

Packages the `compaction` library as a zip for --py-files, ships the configuration file, and submits
jobs/compact.py with spark-submit. The same script runs in local mode and on a cluster. Everything after
`--` goes to the job, which takes the flags of `compaction run` (for example `--now`, `--report`,
`--topics`, `--gc`, `--dry-run`, `--set NAME=VALUE`; see `compaction run --help`) and wins over this
script's own: a `--conf FILE` there is the configuration shipped and used. A `--now` in the future is
refused (exit code 4) unless `--allow-future-now` is given too.

A configuration is required (production runs need an explicit one; conf/local.toml, which compacts every
topic, is only the demo's). It is checked with the job's own loader before anything is submitted: an
invalid one (or invalid job flags such as a future --now) ends the script with exit code 4.

Options (each also settable through the environment variable in brackets):
  --master URL            local[*], local[N], local[N,F], local-cluster[N,C,M], spark://HOST:PORT, yarn or
                          k8s://https://HOST:PORT [SPARK_MASTER; default local[*]]. A spark:// master is
                          checked for a listening port first, so a wrong URL fails at once instead of after
                          Spark's retries.
  --deploy-mode MODE      client or cluster [SPARK_DEPLOY_MODE; default client]. Python applications on a
                          standalone cluster only run in client mode.
  --config FILE           the configuration (TOML, or Kafka's server.properties), shipped with --files
                          [COMPACTION_CONFIG_FILE; required]. In cluster mode the job reads the shipped copy.
  --conf FILE             the same as --config
  --conf KEY=VALUE        a Spark property (spark.executor.memory=4g), as spark-submit takes it
  --driver-memory SIZE    e.g. 2g [SPARK_DRIVER_MEMORY]
  --executor-memory SIZE  e.g. 4g [SPARK_EXECUTOR_MEMORY]
  --executor-cores N      cores per executor [SPARK_EXECUTOR_CORES]
  --num-executors N       executors on YARN / Kubernetes [SPARK_NUM_EXECUTORS]
  --total-executor-cores N  cores for the whole application on a standalone cluster [SPARK_TOTAL_EXECUTOR_CORES]
  --python PATH           the Python executors run (must have the project's dependencies: pyarrow, fsspec,
                          s3fs, pydantic...) [PYSPARK_PYTHON; default this project's .venv/bin/python]
  --python-env ARCHIVE    a packed environment (venv-pack or conda-pack .tar.gz) shipped with --archives;
                          executors then run ./environment/bin/python from it (overrides --python)
  --spark-conf KEY=VALUE  any Spark setting, repeatable (passed as --conf KEY=VALUE; so is --conf spark.*)
  --print                 print the spark-submit command instead of running it
  -h, --help              this text

Object-store credentials are never passed on the command line: executors take them from their own
environment (instance profile, IRSA / workload identity, AWS_* variables set on the nodes); non-secret
settings such as the endpoint belong in the configuration's [store] options.

Exit codes are the job's: 0 all selected partitions cleaned, 3 some failed (the others committed),
4 invalid configuration or input; 2 for a bad option or an unreachable master.

Examples:
  scripts/spark-submit.sh --config conf/local.toml -- demo-store --now 2026-01-02T00:00:00Z --report out/run.json
  scripts/spark-submit.sh --master spark://10.0.0.5:7077 --config conf/production.toml \
      --executor-memory 4g --total-executor-cores 16 -- s3://bucket/topics --now "$LOGICAL_TIME"
EOF
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
master=${SPARK_MASTER:-local[*]}
deploy_mode=${SPARK_DEPLOY_MODE:-client}
config=${COMPACTION_CONFIG_FILE:-}
driver_memory=${SPARK_DRIVER_MEMORY:-}
executor_memory=${SPARK_EXECUTOR_MEMORY:-}
executor_cores=${SPARK_EXECUTOR_CORES:-}
num_executors=${SPARK_NUM_EXECUTORS:-}
total_cores=${SPARK_TOTAL_EXECUTOR_CORES:-}
python=${PYSPARK_PYTHON:-$root/.venv/bin/python}
python_env=""
print_only=false
spark_confs=()

fail() { echo "spark-submit.sh: $*" >&2; exit 2; }
need() { [ $# -ge 2 ] && [ -n "$2" ] || fail "option $1 needs a value (see --help)"; }
# --conf as the job and spark-submit take it: a Spark property spark.KEY=VALUE, else the configuration file.
is_spark_property() { [[ "$1" == spark.*=* ]]; }

while [ $# -gt 0 ]; do
  case "$1" in
    --master) need "$@"; master=$2; shift 2 ;;
    --deploy-mode) need "$@"; deploy_mode=$2; shift 2 ;;
    --config) need "$@"; config=$2; shift 2 ;;
    --conf) need "$@"; if is_spark_property "$2"; then spark_confs+=(--conf "$2"); else config=$2; fi; shift 2 ;;
    --conf=*) value=${1#--conf=}; if is_spark_property "$value"; then spark_confs+=(--conf "$value"); else config=$value; fi
      shift ;;
    --driver-memory) need "$@"; driver_memory=$2; shift 2 ;;
    --executor-memory) need "$@"; executor_memory=$2; shift 2 ;;
    --executor-cores) need "$@"; executor_cores=$2; shift 2 ;;
    --num-executors) need "$@"; num_executors=$2; shift 2 ;;
    --total-executor-cores) need "$@"; total_cores=$2; shift 2 ;;
    --python) need "$@"; python=$2; shift 2 ;;
    --python-env) need "$@"; python_env=$2; shift 2 ;;
    --spark-conf) need "$@"; spark_confs+=(--conf "$2"); shift 2 ;;
    --print) print_only=true; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) fail "unknown option $1 (job options go after --; see --help)" ;;
  esac
done
[ $# -ge 1 ] || fail "missing the store URL after -- (see --help)"

# The job's own options win: a configuration file given after -- is the one shipped and used.
job_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --conf) if [ $# -ge 2 ] && ! is_spark_property "$2"; then
        [ -n "$config" ] && [ "$config" != "$2" ] && echo "spark-submit.sh: the job's --conf $2 wins over $config" >&2
        config=$2; shift 2
      else job_args+=("$1"); shift; fi ;;
    --conf=*) if ! is_spark_property "${1#--conf=}"; then
        [ -n "$config" ] && [ "$config" != "${1#--conf=}" ] \
          && echo "spark-submit.sh: the job's $1 wins over $config" >&2
        config=${1#--conf=}
      else job_args+=("$1"); fi
      shift ;;
    *) job_args+=("$1"); shift ;;
  esac
done
# Required: a production run must never fall back to the demo's conf/local.toml, which compacts every topic.
[ -n "$config" ] || fail "no configuration: give --config FILE (e.g. conf/production.toml or your brokers' server.properties)"

local_master='^local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?$|^local-cluster\[[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*\]$'
case "$master" in
  local*) [[ "$master" =~ $local_master ]] \
      || fail "master $master is not local, local[N], local[*], local[N,F] or local-cluster[WORKERS,CORES,MEMORY_MB]" ;;
  yarn|k8s://*) ;;
  spark://*)
    hostport=${master#spark://}; host=${hostport%%:*}; port=${hostport##*:}
    [ "$port" != "$hostport" ] && [[ "$port" =~ ^[0-9]+$ ]] || fail "master $master must look like spark://HOST:PORT"
    if ! timeout 5 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
      fail "no Spark master is listening at $master (checked $host:$port)"
    fi ;;
  *) fail "master $master is not local[*], local[N], spark://HOST:PORT, yarn, k8s://... or local-cluster[N,C,M]" ;;
esac
case "$deploy_mode" in client|cluster) ;; *) fail "deploy mode must be client or cluster, not $deploy_mode" ;; esac
[ -f "$config" ] || fail "configuration file $config does not exist"
config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")

# spark-submit: SPARK_HOME's, else the one shipped with the pyspark package of the project's environment.
if [ -n "${SPARK_HOME:-}" ] && [ -x "$SPARK_HOME/bin/spark-submit" ]; then
  submit=$SPARK_HOME/bin/spark-submit
else
  spark_home=$("$root/.venv/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null) \
    || fail "no SPARK_HOME and no pyspark in $root/.venv (run make setup)"
  submit=$spark_home/bin/spark-submit
fi

# The library travels as a zip on --py-files (built fresh, so the code submitted is the code checked out).
mkdir -p "$root/dist"
package=$root/dist/compaction.zip
"$root/.venv/bin/python" - "$root" "$package" <<'PY'
import sys, zipfile, pathlib
root, target = pathlib.Path(sys.argv[1]), sys.argv[2]
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
    for path in sorted((root / "compaction").rglob("*.py")):
        archive.write(path, path.relative_to(root))
PY

# The configuration and the job's flags are checked by the job's own code (the zip just built) before anything
# is submitted: an invalid configuration is exit code 4 here, not a failed application on the cluster.
driver_python=${PYSPARK_DRIVER_PYTHON:-$root/.venv/bin/python}
PYTHONPATH="$package${PYTHONPATH:+:$PYTHONPATH}" "$driver_python" "$root/jobs/compact.py" --check \
  "${job_args[@]}" --conf "$config" || exit $?

args=(--master "$master" --deploy-mode "$deploy_mode" --name compaction --py-files "$package" --files "$config")
[ -n "$driver_memory" ] && args+=(--driver-memory "$driver_memory")
[ -n "$executor_memory" ] && args+=(--executor-memory "$executor_memory")
[ -n "$executor_cores" ] && args+=(--executor-cores "$executor_cores")
[ -n "$num_executors" ] && args+=(--num-executors "$num_executors")
[ -n "$total_cores" ] && args+=(--total-executor-cores "$total_cores")
if [ -n "$python_env" ]; then
  args+=(--archives "$python_env#environment" --conf spark.pyspark.python=./environment/bin/python)
else
  args+=(--conf "spark.pyspark.python=$python")
fi
# Quiet by default, as `compaction run` is: a driver on this machine logs Spark's warnings only (a later
# --conf spark.driver.extraJavaOptions=... of the user's replaces this).
[ "$deploy_mode" = client ] \
  && args+=(--conf "spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:$root/compaction/engine/session/log4j2.properties")
# In cluster mode the driver runs elsewhere and finds the configuration among the shipped files.
job_config=$config
[ "$deploy_mode" = cluster ] && job_config=$(basename "$config")
# A local master talks only to itself (loopback, whatever the host name resolves to) and has no use for the web UI,
# whose port another Spark on the machine may hold; a --conf spark.ui.enabled=true given to the script wins.
case "$master" in local*) export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}; args+=(--conf spark.ui.enabled=false) ;; esac
export PYSPARK_PYTHON=$python PYSPARK_DRIVER_PYTHON=$driver_python

command=("$submit" "${args[@]}" "${spark_confs[@]}" "$root/jobs/compact.py" "${job_args[@]}" --conf "$job_config")
if $print_only; then
  printf '%q ' "${command[@]}"; echo
  exit 0
fi
# The JVM announces the incubator module Spark's launcher adds (jdk.incubator.vector) at every start, and no option
# stops it: its stderr passes through a filter that leaves out that one line and passes everything else.
jvm_notice='^WARNING: Using incubator modules: '
status=0
{ "${command[@]}" 2>&1 1>&3 3>&- | { grep --line-buffered -v -e "$jvm_notice" || true; } >&2 3>&-; } 3>&1 || status=$?
exit $status
