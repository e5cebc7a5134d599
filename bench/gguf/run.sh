#!/bin/sh
# bench/gguf: torchlike against llama.cpp on the same GGUF files (issue 26 item 5).
#   LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin GGUF_PY=/path/to/llama.cpp/gguf-py \
#   BENCH_GGUF=build/bench/gguf/bench_gguf [TYPES="Q8_0 Q4_K_M"] bench/gguf/run.sh [WORKDIR] [ROUNDS]
# Makes the 110M-class random llama model (make_model.py), quantises it with
# llama-quantize to F32, Q8_0, Q4_K_M, Q6_K, then per type and 1 and 2 threads
# runs ROUNDS paired rounds (torchlike decode 128, llama-bench -p 0 -n 128,
# torchlike prefill 512, llama-bench -p 512 -n 0) and prints medians, ratios,
# the load average and the bytes-read limit.
set -eu
: "${LLAMA_CPP_BIN:?set LLAMA_CPP_BIN to llama.cpp's build/bin}"
: "${GGUF_PY:?set GGUF_PY to llama.cpp's gguf-py directory}"
BENCH_GGUF=${BENCH_GGUF:-build/bench/gguf/bench_gguf}
DIR=${1:-${TMPDIR:-/tmp}/bench-gguf}
ROUNDS=${2:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DIR"
[ -f "$DIR/F32.gguf" ] || PYTHONPATH="$GGUF_PY" python3 "$HERE/make_model.py" "$DIR/F32.gguf"
for t in Q8_0 Q4_K_M Q6_K; do
  [ -f "$DIR/$t.gguf" ] || "$LLAMA_CPP_BIN/llama-quantize" "$DIR/F32.gguf" "$DIR/$t.gguf" $t >/dev/null 2>&1
done
lb() { "$LLAMA_CPP_BIN/llama-bench" -m "$1" -t "$2" $3 -r 1 -o csv 2>/dev/null | tail -1 | awk -F'","' '{print $(NF-1)}'; }
med() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| type | threads | torchlike decode | llama.cpp decode | ratio | torchlike prefill | llama.cpp prefill | ratio | bytes/token | limit tok/s |\n|---|---|---|---|---|---|---|---|---|---|\n'
for t in ${TYPES:-F32 Q8_0 Q4_K_M Q6_K}; do
  f="$DIR/$t.gguf"
  for th in 1 2; do
    : > "$DIR/r"
    for r in $(seq "$ROUNDS"); do
      a=$("$BENCH_GGUF" "$f" --threads $th --decode 128 --reps 1 | awk '/decode_tps/ {print $2}')
      b=$(lb "$f" $th "-p 0 -n 128")
      c=$("$BENCH_GGUF" "$f" --threads $th --decode 0 --prefill 512 --reps 1 | awk '/prefill_tps/ {print $2}')
      d=$(lb "$f" $th "-p 512 -n 0")
      echo "$a $b $c $d" >> "$DIR/r"
    done
    p=$("$BENCH_GGUF" "$f" --threads $th --decode 0 --probe)
    wb=$(echo "$p" | awk '/weight_bytes/ {print $2}'); gbs=$(echo "$p" | awk '/read_gbs/ {print $2}')
    A=$(cut -d' ' -f1 "$DIR/r" | med); B=$(cut -d' ' -f2 "$DIR/r" | med)
    C=$(cut -d' ' -f3 "$DIR/r" | med); D=$(cut -d' ' -f4 "$DIR/r" | med)
    awk -v t=$t -v th=$th -v A=$A -v B=$B -v C=$C -v D=$D -v wb=$wb -v g=$gbs 'BEGIN {
      printf "| %s | %d | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %.0f MB | %.0f |\n",
             t, th, A, B, A / B, C, D, C / D, wb / 1e6, g * 1e9 / wb }'
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
