#!/usr/bin/env bash
# Fill ASSETS (default .carry_gpu, ignored by git) with what scripts/gpu_many.sh needs on the GPU machine, whose
# image has Python 3.12, torch, numpy, aiohttp and onnxruntime but none of the call stack:
#
#   scripts/gpu_many_assets.sh          # here, with network: pip download + xz; then carry ASSETS/big, ASSETS/rest
#
#   big/   livekit-local-inference (its wheel, 35 MB: the end-of-turn and VAD models inside) and av (its unpacked
#          wheel as tar.xz, 25 MB instead of 36): the first device call, with the repository, stays under 64 MiB
#   rest/  every other distribution the worker, token server, stand-in and callers import (cp312/abi3 manylinux
#          wheels, no dependencies resolved: the list below is what a worker process imports, measured with the
#          project's venv), livekit-server as xz (26 MB from 75), the many-calls script and its clips
#   bin/   a copy of scripts/gpu_many.sh (what the device command runs)
#   test/  pytest, hypothesis and their parts: scripts/gpu_properties.sh runs the duplex property test there
#
# Versions are the project venv's (VENV, default /work/main/.venv: installed from constraints.txt). Existing files
# are kept (the xz of the server takes a minute on 2 cores). The last lines print the sizes of big/ and rest/.
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ASSETS=${ASSETS:-$ROOT/.carry_gpu}
VENV=${VENV:-/work/main/.venv}
PY=$VENV/bin/python
LIVEKIT_BIN=${LIVEKIT_BIN:-$ROOT/.tools/livekit-server-1.13.5/livekit-server}
mkdir -p "$ASSETS/big" "$ASSETS/rest" "$ASSETS/test" "$ASSETS/bin" "$ASSETS/dl"

# what a worker, the token server, fake_openai and the callers import, less what the GPU image already has
# (torch, numpy, onnxruntime, safetensors, tqdm, setuptools); aiohttp and its parts travel so their versions are
# the pinned ones; jiter because the OpenAI client imports it only when it parses a stream (the STT's), after
# every import check has passed (without it every turn on the GPU host was an apology)
REST=(PyJWT aiofiles annotated-types anyio certifi charset-normalizer docstring_parser h11 httpcore2 httpx2 idna
  jiter json_repair livekit livekit-agents livekit-api livekit-blingfire livekit-plugins-openai livekit-plugins-silero
  livekit-protocol openai opentelemetry-api opentelemetry-exporter-http-transport opentelemetry-exporter-otlp-common
  opentelemetry-exporter-otlp-proto-common opentelemetry-exporter-otlp-proto-http opentelemetry-proto
  opentelemetry-sdk opentelemetry-semantic-conventions prometheus_client protobuf psutil pydantic pydantic_core
  requests sniffio truststore typing-inspection typing_extensions urllib3
  aiohttp aiohappyeyeballs aiosignal attrs frozenlist multidict propcache yarl)
BIG=(livekit-local-inference av)
TEST=(pytest pluggy iniconfig packaging pytest-asyncio pytest-timeout hypothesis sortedcontainers)

pinned() { "$PY" -c 'import sys, importlib.metadata as m; print(*(f"{n}=={m.version(n)}" for n in sys.argv[1:]))' "$@"; }
download() {  # download DIR SPEC...: cp312 (or abi3 / pure) manylinux x86_64 wheels, no dependencies
  local dir=$1
  shift
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir" "$@"
}

# shellcheck disable=SC2046
download "$ASSETS/rest" $(pinned "${REST[@]}")
# shellcheck disable=SC2046
download "$ASSETS/test" $(pinned "${TEST[@]}")
# shellcheck disable=SC2046
download "$ASSETS/dl" $(pinned "${BIG[@]}")
mv -f "$ASSETS"/dl/livekit_local_inference-*.whl "$ASSETS/big/" 2>/dev/null || true
if [ ! -f "$ASSETS/big/av.tar.xz" ]; then
  tmp=$(mktemp -d)
  "$PY" -m zipfile -e "$(ls "$ASSETS"/dl/av-*.whl)" "$tmp"
  tar -C "$tmp" -cf - . | xz -9e -T2 >"$ASSETS/big/av.tar.xz.part"
  mv "$ASSETS/big/av.tar.xz.part" "$ASSETS/big/av.tar.xz"
  rm -rf "$tmp"
fi
if [ ! -f "$ASSETS/rest/livekit-server.xz" ]; then
  xz -9e -T2 -c "$LIVEKIT_BIN" >"$ASSETS/rest/livekit-server.xz.part"
  mv "$ASSETS/rest/livekit-server.xz.part" "$ASSETS/rest/livekit-server.xz"
fi
rm -rf "$ASSETS/dl"

# the many-calls script and the clips it names (rendered here with espeak-ng; the GPU image has none)
corpus=$("$PY" -c 'from lab.convbench import corpus; print(corpus.cached(("calls",)))')
mkdir -p "$ASSETS/rest/corpus/calls" "$ASSETS/rest/corpus/clips"
cp "$corpus/calls/questions.json" "$ASSETS/rest/corpus/calls/"
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]))
print("\n".join(sorted({c["wav"] for i in d["items"] for c in i.get("clips", [])} | {i["wav"] for i in d["items"] if "wav" in i})))' \
  "$corpus/calls/questions.json" | while read -r wav; do cp "$corpus/calls/$wav" "$ASSETS/rest/corpus/clips/"; done

cp scripts/gpu_many.sh "$ASSETS/bin/"
mkdir -p "$ASSETS/bin/lib" && cp scripts/lib/help.sh "$ASSETS/bin/lib/"
du -sh "$ASSETS/big" "$ASSETS/rest" "$ASSETS/test"
