#!/usr/bin/env bash
# make bench-peers: kstate against its peers (Kafka Streams, Flink, a raw
# franz-go pipe, ...) on the shared harness's "stateful count" workload, one
# real Kafka broker, interleaved runs; prints a summary table with ratios to
# Kafka Streams and to the raw pipe. See docs/BENCHMARKS.md ("Method", "How to reproduce").
#
#   internal/tools/benchpeers/bench-peers.sh            # REPEATS=3 N=3000000, kstate kstreams-eos flink-eos rawpipe-eos
#   PEERS="kstate kstreams-eos" REPEATS=1 N=1000000 internal/tools/benchpeers/bench-peers.sh
#   RATE=5000 PEERS="kstate kstreams-eos" internal/tools/benchpeers/bench-peers.sh   # latency mode (N defaults to 150000)
#   KSTATE_ARGS="-batch 20000 -backend pebble -set MaxBatchWait=50ms" ...           # kstate-count flags
#   PEERS="kstate kstate-pebble kstreams-eos" KSTATE_ARGS_pebble="-backend pebble" ... # kstate variants, interleaved
#   PEERS="kstate kstate-before kstreams-eos" KSTATE_REV_before=0fa8b34 ...            # this tree against an older commit
#   SUMMARY=results.tsv internal/tools/benchpeers/bench-peers.sh                      # only print the table of a past run
#   RESTORE=1 internal/tools/benchpeers/bench-peers.sh   # restore.sh kstate and kstreams: N=1000000 processed, local state deleted, time to restored
#   WORKLOAD=heavy internal/tools/benchpeers/bench-peers.sh   # the heavy workload: REPEATS=3 N=1000000, kstate-heavy-2 kstreams-heavy-2 flink-heavy-2
#   WORKLOAD=heavy PEERS="kstate-heavy-1 kstreams-heavy-1 flink-heavy-1 kstate-heavy-2 kstreams-heavy-2 flink-heavy-2" ...
#   WORKLOAD=big internal/tools/benchpeers/bench-peers.sh   # state larger than memory: REPEATS=1 N=K=10000000, kstate-big kstate-big-pebble kstreams-big, + restore
#   WORKLOAD=big PEERS="kstate-big kstate-big-before kstreams-big" KSTATE_REV_before=4e38e45 ...   # a default change, before/after
#   PARTITIONS=256 K=1000000 N=1000000 KSTREAMS_THREADS=2 PEERS="kstate kstreams-eos" ...  # many partitions (issue #29 item 3)
#   RATES="5000 20000 50000" PEERS="kstate rawpipe-eos kstreams-eos flink-eos" ...   # one interleaved latency run per rate
#
# Many partitions: PARTITIONS (the harness's P, default 4) input partitions.
# Every run also samples each peer's open files (/proc/PID/fd) and OS threads
# once a second and prints, after the summary, a per-run table with peak RSS,
# peak open files and threads, and start-up (peer start to first visible
# output: seconds_visible - out_span). RATES runs the latency mode once per
# rate (RATE=each), the peers interleaved within each rate.
#
# The heavy workload (peers <x>-heavy-<threads>, in any run): per key a list
# of the last 5 values, a map of count/sum/min/max and a processing-time
# timer at now + 1 h moved on every record, with count's output, so the
# harness verifies it like count. kstate-heavy-N is cmd/kstate-count
# -processor heavy with Batching.Pipelines=N; kstreams-heavy-N (Kafka
# Streams, N stream threads) and flink-heavy-N (Flink, parallelism N) are
# the Maven projects in internal/tools/benchpeers/heavy, copied next to the
# harness's own in CACHE and built there with mvn (~1 min once, again when
# their sources change).
#
# The big workload (WORKLOAD=big, state larger than memory; big_* below):
# count over K keys (default 10,000,000) whose state is a VALUE_BYTES
# (default 200) value per key that does not compress, so that the stores
# and changelogs hold several GB, more than the block cache. Peers
# kstate-big (cmd/kstate-count -processor big, RocksDB), kstate-big-<x>
# (plus KSTATE_ARGS_<x> and/or KSTATE_REV_<x>; kstate-big-pebble defaults
# to -backend pebble) and kstreams-big (the heavy Kafka Streams project's
# --workload=big). Each run is followed by a restore of the same application
# on an empty state directory, timed to its last restored partition
# (<results>.restore.tsv). Disk: about 8 GB per run at the defaults; every
# run refuses to start below BIG_MIN_FREE_GB (default 12) free.
#
# The harness (HARNESS, default ../shared/bench-peers next to the repository)
# is copied to CACHE (default ~/.cache/kstate/bench-peers/harness) and run
# there; its Go binaries and the Kafka Streams / Flink jars (mvn, ~1 min once)
# stay cached there, rebuilt when the harness's sources change. kstate's peer,
# cmd/kstate-count, is rebuilt from the working tree on every call. Without
# BROKERS, the harness's broker.sh starts Apache Kafka 4.1.1 (full JIT,
# group.initial.rebalance.delay.ms=0) on 127.0.0.1:$BENCH_PORT (default 19092,
# away from make kafka-up's 9092) from the jars the tests cache, and stops it
# at the end. Results: $CACHE/results/<time>-<commit>.tsv (+ .load, logs/).
set -euo pipefail
# The whole script is one block, parsed before it runs: editing this file
# during a run (bash otherwise reads a script as it goes) cannot break it.
{

ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
HARNESS=${HARNESS:-$ROOT/../shared/bench-peers}
CACHE=${CACHE:-${KSTATE_CACHE_DIR:-$HOME/.cache/kstate}/bench-peers}
H=$CACHE/harness
WORKLOAD=${WORKLOAD:-count}
case $WORKLOAD in
  count) PEERS=${PEERS:-kstate kstreams-eos flink-eos rawpipe-eos}; backlog_n=3000000 ;;
  heavy) PEERS=${PEERS:-kstate-heavy-2 kstreams-heavy-2 flink-heavy-2}; backlog_n=1000000 ;;
  big) PEERS=${PEERS:-kstate-big kstate-big-pebble kstreams-big}; backlog_n=10000000; REPEATS=${REPEATS:-1}
    export K=${K:-10000000} TIMEOUT=${TIMEOUT:-3600}; VALUE_BYTES=${VALUE_BYTES:-200} ;;
  *) echo "bench-peers: WORKLOAD=$WORKLOAD: want count, heavy or big" >&2; exit 1 ;;
esac
RATE=${RATE:-0}
N_GIVEN=${N:-}   # RATES below sizes each rate itself unless N was given
if [ -n "${PARTITIONS:-}" ]; then export P=$PARTITIONS; fi
if [ "$RATE" != 0 ]; then N=${N:-150000}; REPEATS=${REPEATS:-2}; else N=${N:-$backlog_n}; REPEATS=${REPEATS:-3}; fi
KSTATE_ARGS=${KSTATE_ARGS:-}
BENCH_PORT=${BENCH_PORT:-19092}
GO=${GO:-go}

log() { echo "[bench-peers $(date -u +%H:%M:%S)] $*" >&2; }

summary() {  # $1 = results.tsv
  (cd "$ROOT" && $GO run ./internal/tools/benchpeers -results "$1")
}

# Many partitions (issue #29 item 3). fd_sampler: once a second, for every
# process whose command line holds a harness app id (bench-<peer>-<epoch>-<n>),
# the number of open files and of OS threads; fd_table: their peaks per run
# with peak RSS and start-up from the results.
fd_sampler() {  # $1 = output file: "app_id fds threads" lines
  local pid app fds thr
  while sleep 1; do
    for pid in $(pgrep -f 'bench-[a-z0-9.-]+-[0-9]{10}-[0-9]+' 2>/dev/null); do
      app=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -oE 'bench-[a-z0-9.-]+-[0-9]{10}-[0-9]+' | head -1) || continue
      [ -n "$app" ] || continue
      fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
      thr=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
      echo "$app $fds ${thr:-0}"
    done
  done >>"$1"
}
fd_table() {  # $1 = results.tsv, $2 = fd samples
  echo
  echo "per run: partitions, peak RSS, peak open files (/proc/PID/fd) and OS threads, start-up (peer start to first visible output)"
  awk -F'\t' 'FNR==NR { split($0, f, " "); if (f[2]+0 > fd[f[1]]) fd[f[1]] = f[2]+0; if (f[3]+0 > th[f[1]]) th[f[1]] = f[3]+0; next }
    $1 == "peer" || $1 ~ /^#/ { next }
    { startup = ($16 != "" && $15 != "") ? sprintf("%.2f", $16 - $15) : "NA"
      printf "%-18s P=%-4s rep=%-2s ok=%-5s rec/s=%-8s rss_mb=%-6s fds=%-5s threads=%-4s startup_s=%s cpu_s=%s\n", $1, $5, $23, $13, $7, $12, ($24 in fd) ? fd[$24] : "NA", ($24 in th) ? th[$24] : "NA", startup, $14 }' \
    "$2" "$1"
}

if [ -n "${SUMMARY:-}" ]; then summary "$SUMMARY"; [ ! -f "$SUMMARY.fds" ] || fd_table "$SUMMARY" "$SUMMARY.fds"; exit 0; fi

# 1. The harness, copied (it is read-only where it is mounted) and cached.
[ -f "$HARNESS/run.sh" ] || { log "no harness at $HARNESS (set HARNESS=/path/to/bench-peers)"; exit 1; }
src_sum=$(cd "$HARNESS" && find . -type f -not -path './results/*' -not -path '*/target/*' -not -path './bin/*' -print0 |
  sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
if [ "$(cat "$H/.source-sum" 2>/dev/null)" != "$src_sum" ]; then
  log "copying the harness from $HARNESS to $H"
  rm -rf "$H"; mkdir -p "$(dirname "$H")"
  cp -r "$HARNESS" "$H"; chmod -R u+w "$H"; rm -rf "$H/results" "$H/bin"
  echo "$src_sum" >"$H/.source-sum"
fi

# The heavy workload's Kafka Streams and Flink peers: this tree's Maven
# projects, copied beside the harness's own (again when their sources
# change) and built there once.
heavy_jar() {  # $1 = kstreams or flink; prints the jar's path
  local m=$1 src=$ROOT/internal/tools/benchpeers/heavy/$1 dst=$H/$1-heavy sum
  sum=$(cd "$src" && find . -type f -not -path '*/target/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  if [ "$(cat "$dst/.source-sum" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$dst"; cp -r "$src" "$dst"; rm -rf "$dst/target"; echo "$sum" >"$dst/.source-sum"
  fi
  if [ ! -f "$dst/target/$m-heavy.jar" ]; then
    log "building the heavy workload's $m peer (mvn package in $dst)"
    (cd "$dst" && mvn -q -B package -DskipTests) >&2 || { log "mvn package in $dst failed"; exit 1; }
  fi
  echo "$dst/target/$m-heavy.jar"
}

# 2. kstate's peer, from this working tree.
commit=$(cd "$ROOT" && git rev-parse --short HEAD)
dirty=""
[ -z "$(cd "$ROOT" && git status --porcelain --untracked-files=no)" ] || dirty=+dirty
log "building cmd/kstate-count at $commit$dirty"
mkdir -p "$H/bin"
(cd "$ROOT" && $GO build -o "$H/bin/kstate-count" ./cmd/kstate-count)
for peer in $PEERS; do  # the heavy workload's jars, before a broker starts
  case $peer in
    kstreams-heavy-*|kstreams-big) heavy_jar kstreams >/dev/null ;;
    flink-heavy-*) heavy_jar flink >/dev/null ;;
  esac
done

# build_at REV: kstate-count built against the library at commit REV (the
# program's source is this tree's cmd/kstate-count, which uses only the public
# API), for before/after comparisons in one interleaved run; prints its path.
build_at() {
  local c src out
  c=$(cd "$ROOT" && git rev-parse --short "$1^{commit}") || { log "KSTATE_REV $1: no such commit"; exit 1; }
  out=$H/bin/kstate-count-$c-$(cat "$ROOT"/cmd/kstate-count/*.go | sha256sum | cut -c1-8)  # the program's source too
  if [ ! -x "$out" ]; then
    src=$CACHE/src-$c; rm -rf "$src"; mkdir -p "$src"
    (cd "$ROOT" && git archive "$c" | tar -x -C "$src")
    rm -rf "$src/cmd/kstate-count"; cp -r "$ROOT/cmd/kstate-count" "$src/cmd/kstate-count"
    log "building cmd/kstate-count against the library at $c"
    (cd "$src" && $GO build -o "$out" ./cmd/kstate-count) >&2 || { log "build at $c failed"; exit 1; }
    rm -rf "$src"
  fi
  echo "$out"
}

# The big workload's peers (WORKLOAD=big). big_kstate_args PEER sets args
# and rev for kstate-big[-<x>]: -processor big -value-bytes VALUE_BYTES, then
# KSTATE_ARGS (all kstate-big peers) and KSTATE_ARGS_<x> (kstate-big-pebble:
# -backend pebble unless set); rev is KSTATE_REV_<x>.
big_kstate_args() {
  local x="" xa xr
  [ "$1" = kstate-big ] || { x=${1#kstate-big-}; x=${x//-/_}; x=${x//./_}; }
  eval "xa=\${KSTATE_ARGS_$x:-}"; eval "xr=\${KSTATE_REV_$x:-}"
  [ -n "$x" ] || { xa=""; xr=""; }
  if [ "$x" = pebble ] && [ -z "$xa" ]; then xa="-backend pebble"; fi
  if [ -n "$x" ] && [ -z "$xa$xr" ]; then
    log "peer $1: set KSTATE_ARGS_$x (its kstate-count flags) and/or KSTATE_REV_$x (a commit)"; return 1
  fi
  args="-processor big -value-bytes ${VALUE_BYTES:-200} $KSTATE_ARGS $xa"; rev=$xr
}

# big_kstreams_cmd JAR exports kstreams-big's command: one stream thread
# (KSTREAMS_THREADS), exactly_once_v2, RocksDB stores; it leaves the group on
# close, so that the restore run after it measures the restore and not the
# old member's session timeout.
big_kstreams_cmd() {
  local c="java ${KSTREAMS_JAVA_OPTS:--Xmx1g} -jar $1 --workload=big --value-bytes=${VALUE_BYTES:-200} --brokers=\$BROKERS --app-id=\$APP_ID"
  c="$c --guarantee=exactly_once_v2 --state-dir=\$STATE_DIR --threads=${KSTREAMS_THREADS:-1} --X.internal.leave.group.on.close=true"
  [ -z "${KSTREAMS_COMMIT_MS:-}" ] || c="$c --commit-ms=$KSTREAMS_COMMIT_MS"
  export "PEER_CMD_kstreams_big=$c ${KSTREAMS_ARGS:-}" "PEER_GUARANTEE_kstreams_big=eos"
}

# big_restore PEER APP LOG appends one line to $results.restore.tsv: the peer
# started again with application APP on an empty state directory, after the
# measured run (same changelogs, nothing left to process), timed from its
# start to its last restored partition (kstate: "partition P ready", Kafka
# Streams: the restore listener's "restored ... partition"), with its peak
# RSS and CPU meanwhile.
big_restore() {
  local peer=$1 app=$2 rlog=$3 v cmd pat want pid t0 t1 hwm=0 h cpu=NA c n=0 ok=false
  v=${peer//-/_}; v=${v//./_}
  eval "cmd=\${PEER_CMD_$v}"
  case $peer in
    kstreams-*) pat='kstreams-heavy: restored ' ;;
    *) pat='kstate-count: partition [0-9]* ready in' ;;
  esac
  want=${P:-4}
  local state=$CACHE/work/restore-$app
  rm -rf "$state"; mkdir -p "$state"
  t0=$(date +%s.%N)
  APP_ID=$app STATE_DIR=$state TOPIC_IN=bench-in TOPIC_OUT=bench-out bash -c "exec $cmd" >"$rlog" 2>&1 &
  pid=$!
  for _ in $(seq 1 $((${BIG_RESTORE_TIMEOUT:-1200} * 5))); do
    kill -0 "$pid" 2>/dev/null || break
    h=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null); [ -n "$h" ] && [ "$h" -gt "$hwm" ] && hwm=$h
    c=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12+$13)/hz }' "/proc/$pid/stat" 2>/dev/null); [ -n "$c" ] && cpu=$c
    n=$(grep -c "$pat" "$rlog" || true)
    if [ "$n" -ge "$want" ]; then ok=true; break; fi
    sleep 0.2
  done
  t1=$(date +%s.%N)
  local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  local size; size=$(du -sm "$state" 2>/dev/null | cut -f1)
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  rm -rf "$state"
  [ -s "$results.restore.tsv" ] || printf 'peer\trep\tok\tpartitions\tseconds\tpeak_rss_mb\tcpu_s\tstate_mb\tload\tlog\n' >"$results.restore.tsv"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$peer" "$rep" "$ok" "$n/$want" "$secs" \
    "$((hwm / 1024))" "$cpu" "${size:-NA}" "$(cut -d' ' -f1 /proc/loadavg)" "$(basename "$rlog")" >>"$results.restore.tsv"
  log "restore of $peer: ok=$ok $n/$want partitions in $secs s, peak RSS $((hwm / 1024)) MB, state ${size:-NA} MB"
}

# big_runs: the big workload's interleaved runs, one run.sh call per peer
# and repeat (its rep column rewritten to the repeat), each followed by
# big_restore unless BIG_RESTORE=0; df -h / is logged before every run, and
# a run below BIG_MIN_FREE_GB free stops the loop. run.sh deletes the
# topics when it ends ("load reset -brokers B"); the restore needs them, so
# run.sh gets BIN=$CACHE/big-bin, whose load skips that one call and runs
# the harness's load for everything else (each run's own reset, with the
# workload's flags, still deletes the previous run's topics first).
big_runs() {
  local rep peer one app free bin=$CACHE/big-bin
  mkdir -p "$bin"
  [ -x "$H/bin/load" ] || (cd "$H/load" && $GO build -o "$H/bin/load" .)
  printf '#!/usr/bin/env bash\n# bench-peers.sh big_runs: the harness load, except run.sh'"'"'s final reset\n[ "$1 $2 $#" = "reset -brokers 3" ] && exit 0\nexec %q "$@"\n' "$H/bin/load" >"$bin/load"
  chmod +x "$bin/load"
  for rep in $(seq 1 "$REPEATS"); do
    for peer in $PEERS; do
      free=$(df -BG --output=avail / | tail -1 | tr -dc 0-9)
      log "df -h /: $(df -h --output=size,used,avail,pcent / | tail -1)"
      if [ "$free" -lt "${BIG_MIN_FREE_GB:-12}" ]; then
        log "only ${free} GB free (< BIG_MIN_FREE_GB=${BIG_MIN_FREE_GB:-12}): stopping before $peer repeat $rep"; return 0
      fi
      one=$results.one.tsv; rm -f "$one"
      BIN=$bin N=$N REPEATS=1 RATE=0 RESULTS=$one LOGDIR=$CACHE/results/logs "$H/run.sh" "$peer" || log "run.sh failed (rc $?)"
      [ -s "$one" ] || continue
      [ -s "$results" ] || head -1 "$one" >"$results"
      tail -n +2 "$one" | awk -F'\t' -v OFS='\t' -v r="$rep" '{ $23 = r; print }' >>"$results"
      app=$(tail -1 "$one" | cut -f24)
      if [ "${BIG_RESTORE:-1}" != 0 ] && [ -n "$app" ]; then
        big_restore "$peer" "$app" "$CACHE/results/logs/$(date -u +%Y%m%d-%H%M%S)-$peer-r$rep.restore.log"
      fi
    done
  done
  rm -f "$results.one.tsv"
  "$H/bin/load" reset -brokers "$BROKERS" >/dev/null 2>&1 || true
}

# 3. A real broker, unless BROKERS names one.
started_broker=""
if [ -z "${BROKERS:-}" ]; then
  libs=${KAFKA_LIBS:-${KSTATE_CACHE_DIR:-$HOME/.cache/kstate}/kafka-4.1.1/libs}
  if [ ! -f "$libs/kafka_2.13-4.1.1.jar" ]; then
    log "no Kafka jars in $libs: fetching them (go run ./integration/cmd/kafkabroker up/down)"
    (cd "$ROOT" && $GO run ./integration/cmd/kafkabroker -port "$BENCH_PORT" up && $GO run ./integration/cmd/kafkabroker down)
  fi
  export PORT=$BENCH_PORT CPORT=$((BENCH_PORT + 1)) BROKER_DIR=$CACHE/broker KAFKA_LIBS=$libs
  "$H/broker.sh" up >&2
  started_broker=1
  BENCH_BROKER_PID=$(cat "$CACHE/broker/broker.pid")
  export BENCH_BROKER_PID  # for the warm-up of a RATES run's own calls
  trap '"$H/broker.sh" down >&2' EXIT
  BROKERS=127.0.0.1:$BENCH_PORT
fi
export BROKERS

# Higher rates (issue #29 item 4): RATES="5000 20000 50000" runs this script
# once per rate against this broker (RATE=each; N defaults to 10 s of load,
# at least 150000), the peers interleaved within each rate; the broker
# warm-up runs before the first rate only.
if [ -n "${RATES:-}" ]; then
  warm=1
  for r in $RATES; do
    n=${N_GIVEN:-$((r * 10 > 150000 ? r * 10 : 150000))}
    log "RATES: rate $r, N=$n"
    RATES="" RATE=$r N=$n BROKER_WARMUP=$warm "$0" || log "rate $r failed (rc $?)"
    warm=""
  done
  exit 0
fi

# Restore mode: the harness's restore.sh for kstate and Kafka Streams (whose
# first run leaves the group on close, so that the restart measures the
# restore and not the old member's session timeout).
if [ -n "${RESTORE:-}" ]; then
  [ -x "$H/bin/load" ] || (cd "$H/load" && $GO build -o "$H/bin/load" .)
  [ -f "$H/kstreams/target/kstreams-bench.jar" ] || (cd "$H/kstreams" && mvn -q -B package -DskipTests)
  out=$CACHE/results/$(date -u +%Y%m%d-%H%M%S)-$commit$dirty-restore.txt
  echo "# commit $commit$dirty, $(date -u +%FT%TZ), restore.sh N=${N_RESTORE:-1000000}, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out"
  for peer in ${RESTORE_PEERS:-kstate kstreams}; do
    N=${N_RESTORE:-1000000} KSTREAMS_ARGS="${KSTREAMS_ARGS:---X.internal.leave.group.on.close=true}" \
      WORKDIR=$CACHE/work "$H/restore.sh" "$peer" 2>&1 | tee -a "$out"
  done
  echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
  exit 0
fi

# 4. The runs, interleaved, with the load average sampled alongside.
mkdir -p "$CACHE/results"
stamp=$(date -u +%Y%m%d-%H%M%S)
mode=backlog; [ "$RATE" != 0 ] && mode=live@$RATE
results=$CACHE/results/$stamp-$commit$dirty-$mode.tsv
{
  echo "# commit $commit$dirty, $(date -u +%FT%TZ), WORKLOAD=$WORKLOAD PEERS=$PEERS REPEATS=$REPEATS N=$N RATE=$RATE KSTATE_ARGS=$KSTATE_ARGS"
  env | grep -E '^KSTATE_(ARGS|REV)_' | sed 's/^/# /' || true
  echo "# $(nproc) CPUs, $(uname -r), broker $BROKERS"
} >"$results.meta"
(while sleep 5; do echo "$(date -u +%s) $(cut -d' ' -f1 /proc/loadavg)"; done) >"$results.load" &
sampler=$!
: >"$results.fds"
fd_sampler "$results.fds" &
fdsampler=$!
cleanup() {
  kill "$sampler" "$fdsampler" 2>/dev/null || true
  if [ -n "$started_broker" ]; then "$H/broker.sh" down >&2; fi
}
trap cleanup EXIT
# kstate's peer, and any variant named kstate-<x> in PEERS with its own flags
# in KSTATE_ARGS_<x> (dashes and dots as underscores), e.g.
# PEERS="kstate kstate-pebble kstreams-eos" KSTATE_ARGS_pebble="-backend pebble".
rev=""
for peer in $PEERS; do
  v=${peer//-/_}; v=${v//./_}; rev=""
  case $peer in
    kstreams-heavy-[0-9]*|flink-heavy-[0-9]*)
      n=${peer##*-heavy-}
      [[ $n =~ ^[0-9]+$ ]] || { log "peer $peer: want <x>-heavy-<threads>"; exit 1; }
      if [[ $peer == kstreams-* ]]; then
        jar=$(heavy_jar kstreams) || exit 1
        c="java ${KSTREAMS_JAVA_OPTS:--Xmx1g} -jar $jar --brokers=\$BROKERS --app-id=\$APP_ID --guarantee=exactly_once_v2 --state-dir=\$STATE_DIR --threads=$n"
        [ -z "${KSTREAMS_COMMIT_MS:-}" ] || c="$c --commit-ms=$KSTREAMS_COMMIT_MS"
        c="$c ${KSTREAMS_ARGS:-}"
      else
        jar=$(heavy_jar flink) || exit 1
        c="java ${FLINK_JAVA_OPTS:--Xmx1g} -jar $jar --brokers=\$BROKERS --app-id=\$APP_ID --guarantee=exactly_once --state-dir=\$STATE_DIR --parallelism=$n"
        [ -z "${FLINK_CHECKPOINT_MS:-}" ] || c="$c --checkpoint-ms=$FLINK_CHECKPOINT_MS"
        c="$c ${FLINK_ARGS:-}"
      fi
      export "PEER_CMD_$v=$c" "PEER_GUARANTEE_$v=eos"
      continue ;;
    kstreams-big)
      big_kstreams_cmd "$(heavy_jar kstreams)" || exit 1
      continue ;;
    kstate-big|kstate-big-*)
      big_kstate_args "$peer" || exit 1 ;;
    kstate-heavy-[0-9]*)
      n=${peer#kstate-heavy-}
      [[ $n =~ ^[0-9]+$ ]] || { log "peer $peer: want kstate-heavy-<pipelines>"; exit 1; }
      args="-processor heavy -set Batching.Pipelines=$n $KSTATE_ARGS" ;;
    kstate) args=$KSTATE_ARGS ;;
    kstate-*) v=${peer#kstate-}; v=${v//-/_}; v=${v//./_}; eval "args=\${KSTATE_ARGS_$v:-}"; eval "rev=\${KSTATE_REV_$v:-}"
      [ -n "$args$rev" ] || { log "peer $peer: set KSTATE_ARGS_$v (its kstate-count flags) and/or KSTATE_REV_$v (a commit)"; exit 1; } ;;
    *) continue ;;
  esac
  bin=$H/bin/kstate-count
  if [ "$peer" != kstate ] && [ -n "$rev" ]; then bin=$(build_at "$rev"); fi
  v=${peer//-/_}; v=${v//./_}
  export "PEER_CMD_$v=$bin -brokers \$BROKERS -group \$APP_ID -state \$STATE_DIR $args"
  export "PEER_GUARANTEE_$v=eos"
done
# A warm-up of the broker the script just started: unreported runs of the
# peers in the measured mode (WARMUP_N records each, default 300000 for a
# backlog, 30 s of load at RATE (at least 100000); 0: none), so that the
# measured runs do not meet a cold broker JVM: a backlog warm-up leaves the
# paths a live rate takes (small produces, long polls woken by each record)
# cold. At 50000 rows/s a 2 s warm-up (100000) was not enough: every peer's
# p50 and p99 fell run after run for the first ~4 minutes (docs/BENCHMARKS.md,
# "Session 29"). One 30 s run was not enough either: the broker's C2 JIT
# compiler threads still took 10-35 % of the machine through the first two
# measured runs (docs/BENCHMARKS.md, "Session 43"). So the warm-up runs the
# peers in turn until, every peer having run once, a run adds less than
# WARMUP_JIT_QUIET seconds (default 1) to the broker JVM's compile time
# (jstat -compiler), or WARMUP_MAX runs (default 8) are done; without jstat, or with
# BROKERS given, one run of the first peer as before. The harness's own
# WARMUP warms the peer, not the broker. Results go to a .warmup.tsv beside
# the results, outside the summary, and each warm-up run's compile time to
# the log.
warmup_n=${WARMUP_N:-300000}; [ "$RATE" != 0 ] && warmup_n=${WARMUP_N:-$((RATE * 30 > 100000 ? RATE * 30 : 100000))}
if { [ -n "$started_broker" ] || [ -n "${BROKER_WARMUP:-}" ]; } && [ "$warmup_n" != 0 ]; then
  warm_peers=($PEERS) warm_i=0 warm_max=${WARMUP_MAX:-8} jit_before="" jit_after=""
  broker_pid=${BENCH_BROKER_PID:-}
  jit_seconds() {  # the broker JVM's total JIT compile time in s, or nothing
    [ -n "$broker_pid" ] && command -v jstat >/dev/null || return 0
    jstat -compiler "$broker_pid" 2>/dev/null | awk 'NR == 2 { print $4 }'
  }
  [ -n "$broker_pid" ] || warm_max=1
  while [ "$warm_i" -lt "$warm_max" ]; do
    warm_peer=${warm_peers[$((warm_i % ${#warm_peers[@]}))]}
    warm_i=$((warm_i + 1))
    jit_before=$(jit_seconds)
    log "warming the broker up ($warm_i): one $warm_peer run, N=$warmup_n RATE=$RATE, not reported"
    N=$warmup_n REPEATS=1 RATE=$RATE RESULTS=$results.warmup.tsv LOGDIR=$CACHE/results/logs \
      "$H/run.sh" "$warm_peer" >/dev/null 2>&1 || log "warm-up run failed (rc $?): going on"
    jit_after=$(jit_seconds)
    if [ -z "$jit_before" ] || [ -z "$jit_after" ]; then
      break
    fi
    added=$(awk -v a="$jit_after" -v b="$jit_before" 'BEGIN { printf "%.2f", a - b }')
    log "warm-up run $warm_i: the broker's JIT compiled for ${added} s (${jit_after} s in all)"
    if [ "$warm_i" -ge "${#warm_peers[@]}" ] && awk -v d="$added" -v q="${WARMUP_JIT_QUIET:-1}" 'BEGIN { exit !(d < q) }'; then
      break
    fi
  done
fi
log "running: PEERS=\"$PEERS\" REPEATS=$REPEATS N=$N RATE=$RATE (results: $results)"
if [ "$WORKLOAD" = big ]; then
  big_runs
  echo
  (cd "$ROOT" && $GO run ./internal/tools/benchpeers -results "$results" -kstreams kstreams-big)
  [ ! -s "$results.restore.tsv" ] || { echo; column -t -s $'\t' "$results.restore.tsv"; }
  exit 0
fi
# shellcheck disable=SC2086
N=$N REPEATS=$REPEATS RATE=$RATE RESULTS=$results LOGDIR=$CACHE/results/logs "$H/run.sh" $PEERS || log "run.sh failed (rc $?)"

echo
summary "$results"
fd_table "$results" "$results.fds"
exit 0
}
