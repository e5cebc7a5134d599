#!/bin/sh
# bench/gguf/busy.sh: torchlike's decode on a machine whose cores are busy
# with other work (issue 26 item 5), against the same decode quiet.
#   BENCH_GGUF=build/bench/gguf/bench_gguf bench/gguf/busy.sh ROUNDS FILE.gguf...
# Per file and 1 and 2 threads, ROUNDS paired rounds: decode 128 tokens
# quiet, then again with 2 x cores busy loops running beside it (load about
# 2x cores; the 1-minute load average lags, so the runnable count of the
# last busy round is printed). Prints the medians and their ratio.
set -eu
BENCH_GGUF=${BENCH_GGUF:-build/bench/gguf/bench_gguf}
ROUNDS=$1
shift
CORES=$(nproc)
med() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
dec() { "$BENCH_GGUF" "$1" --threads "$2" --decode 128 --reps 1 | awk '/decode_tps/ {print $2}'; }
busy_start() {
  PIDS=""
  for _ in $(seq $((2 * CORES))); do
    sh -c 'while :; do :; done' &
    PIDS="$PIDS $!"
  done
  sleep 2
}
busy_stop() { kill $PIDS 2>/dev/null || true; wait 2>/dev/null || true; }
trap busy_stop EXIT
echo "cores: $CORES; busy loops: $((2 * CORES)); load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| file | threads | quiet tok/s | busy tok/s | busy / quiet | runnable after the busy run |\n|---|---|---|---|---|---|\n'
for f in "$@"; do
  [ -f "$f" ] || { echo "busy.sh: no file $f" >&2; exit 1; }
done
for f in "$@"; do
  for th in 1 2; do
    : > /tmp/busy.q; : > /tmp/busy.b; load=""
    for _ in $(seq "$ROUNDS"); do
      dec "$f" $th >> /tmp/busy.q
      busy_start
      dec "$f" $th >> /tmp/busy.b
      load=$(cut -d' ' -f4 /proc/loadavg | cut -d/ -f1)
      busy_stop
    done
    Q=$(med < /tmp/busy.q); B=$(med < /tmp/busy.b)
    awk -v f="$(basename "$f")" -v th=$th -v Q="$Q" -v B="$B" -v l="$load" 'BEGIN {
      printf "| %s | %d | %.1f | %.1f | %.2f | %s |\n", f, th, Q, B, B / Q, l }'
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
