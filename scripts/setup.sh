#!/usr/bin/env bash
# Idempotent setup: .venv with the right torch build, the project with its dev and parity extras,
# the test-time reference, the Debian packages the tests need and the web page's npm assets.
# Each step runs only when its result is missing. Any failure stops with a message and exit 1.
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

# --- torch: the CPU build where there is no NVIDIA GPU (a local file on our machines), CUDA otherwise
if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    say "NVIDIA GPU found: installing the CUDA build of torch"
    "${PIP[@]}" torch
  else
    say "no NVIDIA GPU: installing the CPU build torch==2.13.0"
    "${PIP[@]}" torch==2.13.0
  fi
fi

# --- the project (editable) with dev + parity extras; skipped when pyproject.toml is unchanged
stamp="$VENV/.voice-agent-installed"
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "installing the project and its dev/parity extras"
  "${PIP[@]}" -e ".[dev,parity]"
  # the test-time reference; its declared deps (gradio, torchaudio, ...) are not needed for parity
  "${PIP[@]}" --no-deps "qwen-tts-hf==0.1.1.post1"
  echo "$want" >"$stamp"
fi

# --- web assets (livekit-client from npm, pinned by web/package-lock.json)
if [ -f web/package.json ] && [ ! -d web/node_modules ]; then
  command -v npm >/dev/null || die "npm not found; install Node.js 18+ (Debian: nodejs npm)"
  say "installing web assets (npm ci)"
  (cd web && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci in web/ failed"
fi

say "ready: $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
