#!/bin/bash
# The whole default-model pipeline: corpus -> tokenizer -> training -> export
# -> fixtures -> samples. Needs Debian's python3-torch and python3-numpy for
# /usr/bin/python3 (see README.md).
#
#   tools/train-default/pipeline.sh [--minutes M | --steps N] [--work DIR] [--install]
#
# --install copies model.bin and tokenizer.bin into plugins/torchlike/default/,
# regenerates the fixtures in tests/default_model/ and both SHA256SUMS files.
# Without it the repository is left untouched (reproduction runs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${TMPDIR:-/tmp}/inferlab-train-default
minutes=32
steps=0
install=0
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --install) install=1; shift ;;
    *) echo "usage: $0 [--minutes M | --steps N] [--work DIR] [--install]" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1  # keep the source tree clean
"$py" -c 'import torch, numpy' 2>/dev/null || {
  echo "$py cannot import torch and numpy: apt-get install python3-torch python3-numpy" >&2
  exit 1
}
mkdir -p "$work"
cd "$here"
"$py" extract_corpus.py --work "$work"
"$py" train_bpe.py --train "$work/train.txt" --out "$work/tokenizer.bin"
nice -n 10 "$py" train.py --work "$work" --minutes "$minutes" --steps "$steps" | tee "$work/train.log"
"$py" export.py --ckpt "$work/ckpt.pt" --out "$work/model.bin"
"$py" sample.py --model "$work/model.bin" --tokenizer "$work/tokenizer.bin" -n 3 \
  | tee "$work/samples.txt"

if [ "$install" = 1 ]; then
  dest=$repo/plugins/torchlike/default
  fixtures=$repo/tests/default_model
  mkdir -p "$dest"
  cp "$work/model.bin" "$work/tokenizer.bin" "$dest/"
  "$py" make_fixtures.py --model "$dest/model.bin" --tokenizer "$dest/tokenizer.bin" \
    --val "$work/val.txt" --out-dir "$fixtures"
  (cd "$dest" && sha256sum model.bin tokenizer.bin > SHA256SUMS)
  (cd "$fixtures" && sha256sum encode_expected.txt logits_expected.bin > SHA256SUMS)
  echo "installed into $dest and $fixtures"
fi
