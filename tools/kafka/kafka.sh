#!/usr/bin/env bash
# kafka.sh fetches, configures and runs a real Apache Kafka (KRaft mode, no ZooKeeper, no Docker)
# on 127.0.0.1 for kdedup's tests. Every node is a combined broker and controller.
#
#   kafka.sh fetch   [-v VERSION]                 jars into the cache; prints their directory
#   kafka.sh init    DIR [-v VERSION] [-n NODES] [-l LISTENER]... [-p FILE] [-f FORMAT_ARG]...
#                                                 free ports, DIR/node-<id>/server.properties,
#                                                 formatted storage, DIR/bootstrap, DIR/ports
#   kafka.sh run     DIR NODE                     one node in the foreground (exec java)
#   kafka.sh start   DIR [init options]           init, every node in the background, wait
#   kafka.sh stop    DIR [NODE]                   SIGTERM (then SIGKILL) the node(s) started by start
#
# VERSION defaults to $KDEDUP_KAFKA_VERSION, else 4.4.0 (any Kafka 4.x on Maven Central).
# The jars go to $KDEDUP_KAFKA_CACHE/<version>/libs (default ~/.cache/kdedup-kafka), fetched once
# with Maven and tools/kafka/pom.xml; Maven keeps its own cache in ~/.m2 too.
# -l adds a listener, by security protocol (SASL_SSL, SASL_PLAINTEXT, SSL), on a port of its own
# beside PLAINTEXT (which the brokers use among themselves); -p appends a properties file to every
# node's configuration (later keys win); -f passes an argument to the storage format step (for
# example -f --add-scram -f 'SCRAM-SHA-512=[name=alice,password=alice-secret]').
# JVM options: $KDEDUP_KAFKA_HEAP (default -Xmx512m -Xms128m) and $KDEDUP_KAFKA_JVM_OPTS (default
# -XX:+UseSerialGC -XX:TieredStopAtLevel=1, a lean JVM for a shared 2-core machine).
# Each node logs to DIR/node-<id>/server.log.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=${KDEDUP_KAFKA_VERSION:-4.4.0}
cache=${KDEDUP_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kdedup-kafka}

die() { echo "kafka.sh: $*" >&2; exit 1; }

libs_dir() { echo "$cache/$version/libs"; }

# fetch copies kafka_2.13:$version and its runtime dependencies into the cache, once; concurrent
# callers wait for each other.
fetch() {
  local libs; libs=$(libs_dir)
  [ -f "$libs/.complete" ] && { echo "$libs"; return; }
  command -v java >/dev/null || die "java is not on PATH (Kafka needs Java 17 or later)"
  command -v mvn >/dev/null || die "mvn is not on PATH (Maven fetches Kafka's jars)"
  mkdir -p "$cache/$version"
  exec 9>"$cache/$version/.lock"
  flock 9
  if [ ! -f "$libs/.complete" ]; then
    rm -rf "$libs"
    mvn -B -q -f "$here/pom.xml" -Dkafka.version="$version" -Dkafka.libs="$libs" \
      dependency:copy-dependencies >"$cache/$version/mvn.log" 2>&1 ||
      { cat "$cache/$version/mvn.log" >&2; die "maven could not fetch kafka $version"; }
    ls "$libs"/kafka_2.13-"$version".jar >/dev/null || die "no kafka_2.13-$version.jar in $libs"
    touch "$libs/.complete"
  fi
  flock -u 9
  echo "$libs"
}

# free_ports prints N ports that were free on 127.0.0.1 a moment ago (all held at once, so they
# differ).
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

java_cmd() { # java_cmd DIR NODE MAINCLASS ARGS...: the java command line for one node
  local dir=$1 node=$2 main=$3; shift 3
  local libs; libs=$(cat "$dir/libs")
  # shellcheck disable=SC2086
  echo java ${KDEDUP_KAFKA_HEAP:--Xmx512m -Xms128m} ${KDEDUP_KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -Dkafka.logs.dir="$dir/node-$node" -cp "'$libs/*'" "$main" "$@"
}

init() {
  local dir=$1; shift
  local nodes=1 listeners=() props=() fmt=()
  while [ $# -gt 0 ]; do
    case $1 in
      -v) version=$2; shift 2 ;;
      -n) nodes=$2; shift 2 ;;
      -l) listeners+=("$2"); shift 2 ;;
      -p) props+=("$2"); shift 2 ;;
      -f) fmt+=("$2"); shift 2 ;;
      *) die "init: unknown option $1" ;;
    esac
  done
  [ -e "$dir/bootstrap" ] && die "$dir already holds a cluster"
  local libs; libs=$(fetch)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  echo "$libs" >"$dir/libs"
  cat >"$dir/log4j2.properties" <<'EOF'
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
EOF
  local per=$((2 + ${#listeners[@]}))
  local ports; read -r -a ports <<<"$(free_ports $((nodes * per)))"
  local voters="" bootstrap="" i
  for ((i = 1; i <= nodes; i++)); do
    local base=$(((i - 1) * per))
    voters+="${voters:+,}$i@127.0.0.1:${ports[base + 1]}"
    bootstrap+="${bootstrap:+,}127.0.0.1:${ports[base]}"
  done
  local rf=$((nodes < 3 ? nodes : 3)) minisr=$((nodes < 3 ? 1 : 2))
  : >"$dir/ports"
  for ((i = 1; i <= nodes; i++)); do
    local base=$(((i - 1) * per)) nd="$dir/node-$i"
    mkdir -p "$nd/data"
    local lst="PLAINTEXT://127.0.0.1:${ports[base]}" adv="PLAINTEXT://127.0.0.1:${ports[base]}"
    local map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" j=2 l
    echo "$i PLAINTEXT ${ports[base]}" >>"$dir/ports"
    echo "$i CONTROLLER ${ports[base + 1]}" >>"$dir/ports"
    for l in "${listeners[@]}"; do
      lst+=",$l://127.0.0.1:${ports[base + j]}"
      adv+=",$l://127.0.0.1:${ports[base + j]}"
      map+=",$l:$l"
      echo "$i $l ${ports[base + j]}" >>"$dir/ports"
      j=$((j + 1))
    done
    lst+=",CONTROLLER://127.0.0.1:${ports[base + 1]}"
    {
      echo "process.roles=broker,controller"
      echo "node.id=$i"
      if [ "$nodes" = 1 ]; then
        echo "controller.quorum.bootstrap.servers=127.0.0.1:${ports[base + 1]}"
      else
        echo "controller.quorum.voters=$voters"
      fi
      echo "listeners=$lst"
      echo "advertised.listeners=$adv"
      echo "listener.security.protocol.map=$map"
      echo "controller.listener.names=CONTROLLER"
      echo "inter.broker.listener.name=PLAINTEXT"
      echo "log.dirs=$nd/data"
      echo "num.partitions=1"
      echo "default.replication.factor=$rf"
      echo "auto.create.topics.enable=false"
      echo "offsets.topic.replication.factor=$rf"
      echo "offsets.topic.num.partitions=4"
      echo "transaction.state.log.replication.factor=$rf"
      echo "transaction.state.log.min.isr=$minisr"
      echo "transaction.state.log.num.partitions=4"
      echo "share.coordinator.state.topic.replication.factor=$rf"
      echo "share.coordinator.state.topic.min.isr=$minisr"
      echo "group.initial.rebalance.delay.ms=0"
      echo "group.min.session.timeout.ms=100"
      echo "num.network.threads=2"
      echo "num.io.threads=2"
      echo "num.recovery.threads.per.data.dir=1"
      echo "log.flush.offset.checkpoint.interval.ms=1000"
      echo "controlled.shutdown.enable=true"
      echo "log.cleaner.backoff.ms=200"          # the cleaner looks for work every 200ms, not 15s
      local p
      for p in "${props[@]}"; do cat "$p"; echo; done
    } >"$nd/server.properties"
  done
  # A cluster id is 16 random bytes in URL-safe base64; one that starts with '-' would be read as an
  # option by the format step ("--cluster-id expected one argument"), so draw again, as Kafka's
  # Uuid.randomUuid does.
  local id=-
  while [[ $id == -* ]]; do id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=' | head -c 22); done
  for ((i = 1; i <= nodes; i++)); do
    local args=(format -t "$id" -c "$dir/node-$i/server.properties" --ignore-formatted)
    [ "$nodes" = 1 ] && args+=(--standalone)
    eval "$(java_cmd "$dir" "$i" kafka.tools.StorageTool)" '"${args[@]}"' '"${fmt[@]}"' \
      >"$dir/node-$i/format.log" 2>&1 || { cat "$dir/node-$i/format.log" >&2; die "format of node $i failed"; }
  done
  echo "$nodes" >"$dir/nodes"
  echo "$bootstrap" >"$dir/bootstrap"
}

run() {
  local dir=$1 node=$2
  [ -f "$dir/node-$node/server.properties" ] || die "no node $node in $dir (run init first)"
  eval exec "$(java_cmd "$dir" "$node" kafka.Kafka)" "$dir/node-$node/server.properties" \
    '>>' "$dir/node-$node/stdout.log" '2>&1'
}

# started NODE_DIR LOG_OFFSET: whether the node logged that it started after that offset.
started() { tail -c +"$(($2 + 1))" "$1/server.log" 2>/dev/null | grep -q 'Kafka Server started'; }

start() {
  local dir=$1; shift
  [ -e "$dir/bootstrap" ] || init "$dir" "$@"
  dir=$(cd "$dir" && pwd)
  local nodes i; nodes=$(cat "$dir/nodes")
  for ((i = 1; i <= nodes; i++)); do
    local nd="$dir/node-$i" from=0
    [ -f "$nd/server.log" ] && from=$(stat -c %s "$nd/server.log")
    echo "$from" >"$nd/log.offset"
    setsid "$0" run "$dir" "$i" </dev/null >/dev/null 2>&1 &
    echo $! >"$nd/pid"
  done
  for ((i = 1; i <= nodes; i++)); do
    local nd="$dir/node-$i" waited=0
    until started "$nd" "$(cat "$nd/log.offset")"; do
      kill -0 "$(cat "$nd/pid")" 2>/dev/null || { tail -50 "$nd/server.log" "$nd/stdout.log" >&2; die "node $i exited"; }
      [ $waited -ge 1200 ] && die "node $i did not start within 120s (see $nd/server.log)"
      sleep 0.1; waited=$((waited + 1))
    done
  done
  cat "$dir/bootstrap"
}

stop() {
  local dir=$1 node=${2:-} i
  local list=("$node"); [ -z "$node" ] && mapfile -t list < <(seq 1 "$(cat "$dir/nodes")")
  for i in "${list[@]}"; do
    local pidf="$dir/node-$i/pid"
    [ -f "$pidf" ] || continue
    local pid; pid=$(cat "$pidf")
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$pidf"
  done
}

cmd=${1:-}; [ $# -gt 0 ] && shift
case $cmd in
  fetch)
    [ "${1:-}" = -v ] && version=$2
    fetch ;;
  init) [ $# -ge 1 ] || die "usage: kafka.sh init DIR [options]"; init "$@" ;;
  run) [ $# -eq 2 ] || die "usage: kafka.sh run DIR NODE"; run "$@" ;;
  start) [ $# -ge 1 ] || die "usage: kafka.sh start DIR [options]"; start "$@" ;;
  stop) [ $# -ge 1 ] || die "usage: kafka.sh stop DIR [NODE]"; stop "$@" ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; [ -z "$cmd" ] || exit 2 ;;
esac
