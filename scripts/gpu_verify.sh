#!/usr/bin/env bash
# The GPU machine's checks and benchmarks, in parts that each fit one device call (<= 10 min):
#
#   scripts/gpu_verify.sh tests      # pytest -m gpu tests/gpu, batch-1 `bench ours`, the text-input benchmark
#   scripts/gpu_verify.sh load       # bench load: 0.6B at 1,128,256,512 streams, engine told 0 and 100 ms
#   scripts/gpu_verify.sh tokens     # bench load, streaming text (a word every 60 ms) and whole text at 1,64,128,256
#                                    # streams; fails unless every tokens level has no late stream and first audio
#                                    # P95 <= 150 ms (GATE_FIRST_P95_MS)
#   scripts/gpu_verify.sh peer       # the peer (faster-qwen3-tts) at 1, 2, 4 concurrent requests
#   BASE=base.tar.gz scripts/gpu_verify.sh loadcmp
#                                    # bench load, whole text, at LEVELS (1,128,256), engine told 0 and 100 ms, for
#                                    # this tree and then for a baseline engine (BASE: `git archive REV tts_engine`
#                                    # gzipped), on one machine in one call: "within noise" of a committed figure
#                                    # measured on another day or another GPU cannot be read otherwise
#
# Results go under $OUT (default ./out/gpu). Wheels the GPU image lacks (pytest, pytest-asyncio, the peer and its
# pure-Python dependencies; docs/benchmarks.md lists them) are installed from the ignored .whl/ folder, which the
# device tool must carry. Random-weight checkpoints are built in place under /tmp, once per machine.
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -euo pipefail
cd "$(dirname "$0")/.."

part=${1:?usage: scripts/gpu_verify.sh tests|load|tokens|peer|loadcmp}
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # loadcmp runs the baseline from its own folder
PY=${PYTHON:-python}

if [[ -d .whl ]] && compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2 || true
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

ckpt() {  # ckpt PRESET DIR: a random-weight checkpoint, built once
  [[ -f "$2/config.json" ]] || "$PY" -m tts_engine make-checkpoint --preset "$1" --out "$2"
}

{
  date -u +%FT%TZ
  git rev-parse HEAD 2>/dev/null || echo "no git"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
} >"$OUT/machine_$part.txt" 2>&1
cat "$OUT/machine_$part.txt"

case "$part" in
  tests)
    ckpt 0.6b /tmp/c06
    "$PY" -m pytest -m gpu tests/gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.txt"
    "$PY" -m tts_engine bench ours --model-dir /tmp/c06 --runs 30 --warmup 3 --json "$OUT/batch1_ours.json" \
      2>&1 | tail -25 | tee "$OUT/batch1_ours.txt"
    "$PY" -m lab.engine.text_input --model-dir /tmp/c06 --runs 30 --json "$OUT/text_input.json" \
      2>&1 | tail -25 | tee "$OUT/text_input.txt"
    ;;
  load)
    ckpt 0.6b /tmp/c06
    "$PY" -m tts_engine bench load --model-dir /tmp/c06 --levels "${LEVELS:-1,128,256,512}" \
      --client-buffer-ms 0,100 --profile-rows 1,128,256 --results-dir "$OUT" 2>&1 | tee "$OUT/load.txt" | tail -40
    ;;
  tokens)
    ckpt 0.6b /tmp/c06
    "$PY" -m tts_engine bench load --model-dir /tmp/c06 --levels "${LEVELS:-1,64,128,256}" --text-input tokens \
      --word-interval-ms 60 --client-buffer-ms 0 --profile-rows "" --results-dir "$OUT/tokens" \
      --gate-first-p95-ms "${GATE_FIRST_P95_MS:-150}" 2>&1 | tee "$OUT/tokens.txt" | grep -v Warning | tail -40
    ;;
  peer)
    ckpt 0.6b /tmp/c06
    "$PY" -m tts_engine bench load --model-dir /tmp/c06 --levels 1 --profile-rows "" --peer-levels 1,2,4 \
      --peer-runs "${PEER_RUNS:-5}" --results-dir "$OUT" 2>&1 | tee "$OUT/peer.txt" | tail -40
    ;;
  loadcmp)
    ckpt 0.6b /tmp/c06
    base=/tmp/base_engine
    rm -rf "$base" && mkdir -p "$base" && tar -C "$base" -xzf "${BASE:?BASE: a tar.gz of a baseline tts_engine}"
    for which in head base; do  # head first: its engine load fills torch's compile caches for both
      root=$PWD
      [[ $which == base ]] && root=$base
      (cd "$root" && "$PY" -m tts_engine bench load --model-dir /tmp/c06 --levels "${LEVELS:-1,128,256}" \
        --client-buffer-ms 0,100 --profile-rows "" --results-dir "$OUT/$which") 2>&1 | grep -v Warning |
        tail -14 | tee -a "$OUT/loadcmp.txt"
      rm -f "$OUT/$which"/*.png "$OUT/$which"/*.partial.json
    done
    ;;
  *)
    echo "unknown part '$part': use tests, load, tokens, peer or loadcmp" >&2
    exit 2
    ;;
esac
