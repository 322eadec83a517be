#!/usr/bin/env bash
# Start vLLM's OpenAI-compatible server for Qwen3-Omni (the agent's STT and LLM), wait until /v1/models
# answers, then stay in the foreground until vLLM exits (start_all.sh supervises it as a process group).
#
#   LLM_MODEL_DIR=/models/Qwen3-Omni-30B-A3B-Instruct scripts/run_llm_server.sh [extra vllm serve flags...]
#
# Configuration (environment or .env; the environment wins):
#   LLM_MODEL_DIR                  model path or HF id (required)
#   LLM_MODEL                      served model name, what the agent asks for (qwen3-omni)
#   LLM_HOST / LLM_PORT            bind address (0.0.0.0 / 8000)
#   LLM_MAX_MODEL_LEN              2048 (a voice turn is short; a small context leaves memory for the TTS)
#   LLM_GPU_MEMORY_UTILIZATION     0.6 (the rest of the GPU is the TTS engine's; 0.9 starves it)
#   LLM_QUANTIZATION               e.g. awq, compressed-tensors, fp8 (empty: what the checkpoint says)
#   LLM_KV_CACHE_DTYPE             fp8 (halves KV memory; "auto" to keep the model dtype)
#   LLM_MIN_FREE_GPU_MIB           8000: refuse to start when the GPU has less free memory than this
#   LLM_GPU                        GPU index for the free-memory check and CUDA_VISIBLE_DEVICES (0)
#   LLM_READY_TIMEOUT              seconds to wait for /v1/models (900)
#   LLM_EXTRA_ARGS                 more `vllm serve` flags, space separated
# Exit status: 0 vLLM exited cleanly; 1 it failed or never became ready; 2 bad configuration.
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

say() { printf '[run_llm_server] %s\n' "$*"; }
err() { printf '[run_llm_server] ERROR: %s\n' "$*" >&2; }

if [ -f "$ROOT/scripts/lib/dotenv.sh" ]; then
  # shellcheck source=scripts/lib/dotenv.sh
  . "$ROOT/scripts/lib/dotenv.sh"
  load_env_file "${ENV_FILE:-$ROOT/.env}" || exit 2
fi

MODEL_DIR=${LLM_MODEL_DIR:-}
SERVED=${LLM_MODEL:-qwen3-omni}
HOST=${LLM_HOST:-0.0.0.0}
PORT=${LLM_PORT:-8000}
MAX_LEN=${LLM_MAX_MODEL_LEN:-2048}
UTIL=${LLM_GPU_MEMORY_UTILIZATION:-0.6}
QUANT=${LLM_QUANTIZATION:-}
KV_DTYPE=${LLM_KV_CACHE_DTYPE:-fp8}
MIN_FREE=${LLM_MIN_FREE_GPU_MIB:-8000}
GPU=${LLM_GPU:-0}
READY_TIMEOUT=${LLM_READY_TIMEOUT:-900}

[ -n "$MODEL_DIR" ] || { err "LLM_MODEL_DIR is not set (path to a Qwen3-Omni checkpoint or its HF id)"; exit 2; }
case $PORT in ''|*[!0-9]*) err "LLM_PORT=$PORT is not a port number (allowed: 1..65535)"; exit 2 ;; esac
{ [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ]; } || { err "LLM_PORT=$PORT is out of range (allowed: 1..65535)"; exit 2; }
case $MAX_LEN in ''|*[!0-9]*) err "LLM_MAX_MODEL_LEN=$MAX_LEN is not a positive integer"; exit 2 ;; esac
if ! awk -v u="$UTIL" 'BEGIN { exit !(u ~ /^[0-9]*\.?[0-9]+$/ && u > 0 && u <= 1) }'; then
  err "LLM_GPU_MEMORY_UTILIZATION=$UTIL is out of range (allowed: a number in (0, 1])"; exit 2
fi
case $KV_DTYPE in auto|fp8|fp8_e4m3|fp8_e5m2) ;; *) err "LLM_KV_CACHE_DTYPE=$KV_DTYPE is not allowed (auto, fp8, fp8_e4m3, fp8_e5m2)"; exit 2 ;; esac

if [ -n "${VLLM:-}" ]; then
  VLLM_CMD=("$VLLM")
elif command -v vllm >/dev/null 2>&1; then
  VLLM_CMD=(vllm)
else
  err "vllm is not installed (pip install vllm on the GPU machine; it is not part of the agent's venv)"; exit 2
fi

# Free GPU memory check: a leftover process holding the GPU makes vLLM fail late and obscurely.
if command -v nvidia-smi >/dev/null 2>&1; then
  free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i "$GPU" 2>/dev/null | head -1 | tr -d ' ')
  case $free in
    ''|*[!0-9]*) err "cannot read free memory of GPU $GPU from nvidia-smi"; exit 1 ;;
  esac
  if [ "$free" -lt "$MIN_FREE" ]; then
    err "GPU $GPU has ${free} MiB free, less than LLM_MIN_FREE_GPU_MIB=${MIN_FREE}; see nvidia-smi for what holds it"
    exit 1
  fi
  say "GPU $GPU: ${free} MiB free"
else
  err "nvidia-smi not found: vLLM needs an NVIDIA GPU"; exit 1
fi

args=(serve "$MODEL_DIR" --served-model-name "$SERVED" --host "$HOST" --port "$PORT"
      --max-model-len "$MAX_LEN" --gpu-memory-utilization "$UTIL" --kv-cache-dtype "$KV_DTYPE"
      --limit-mm-per-prompt '{"audio": 1, "image": 0, "video": 0}')
[ -n "$QUANT" ] && args+=(--quantization "$QUANT")
# shellcheck disable=SC2206 # word splitting is the point of LLM_EXTRA_ARGS
[ -n "${LLM_EXTRA_ARGS:-}" ] && args+=(${LLM_EXTRA_ARGS})
args+=("$@")

say "starting: ${VLLM_CMD[*]} ${args[*]}"
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-$GPU} "${VLLM_CMD[@]}" "${args[@]}" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT

probe_host=$HOST
[ "$probe_host" = "0.0.0.0" ] && probe_host=127.0.0.1
url="http://$probe_host:$PORT/v1/models"
deadline=$(( $(date +%s) + READY_TIMEOUT ))
until curl -fsS -m 3 "$url" 2>/dev/null | grep -q "\"$SERVED\""; do
  if ! kill -0 "$child" 2>/dev/null; then
    wait "$child"; rc=$?
    err "vLLM exited with status $rc before it was ready (check the log above: model path, memory, flags)"
    exit 1
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    err "vLLM did not serve $SERVED at $url within ${READY_TIMEOUT}s"
    kill -TERM "$child" 2>/dev/null; wait "$child"
    exit 1
  fi
  sleep 2
done
say "ready: $url serves $SERVED (LLM_BASE_URL=http://$probe_host:$PORT/v1)"
wait "$child"; rc=$?
[ "$rc" -eq 0 ] || { err "vLLM exited with status $rc"; exit 1; }
exit 0
