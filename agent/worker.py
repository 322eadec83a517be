"""The LiveKit worker: an `AgentServer` with one `rtc_session` (LiveKit 1.8.9's current entry point), run by
`python -m agent dev|start` through LiveKit's own `python -m livekit.agents start` (agent/app.py is the file it loads).

- `prewarm`: Silero VAD and the engine (a module-level singleton under the default THREAD executor, so every call in
  the process shares one model copy), then the runtime's tuning; with `TTS_ENGINE_URL` no model is loaded here and
  the worker hides the GPUs from itself (`leave_the_gpus`).
- `current_load` (LiveKit's `load_fnc`): the largest share in use of calls, engine streams and CPU, scaled so that a
  limit reached reads `AGENT_LOAD_THRESHOLD`; `on_request` declines an offer when `AGENT_MAX_SESSIONS` jobs run or
  are launching (`agent.admission`).
- `entrypoint`, each job: leave at once if another agent of ours holds the room (`agent.one_agent`); else a
  `agent.voice.Call` with the caller `agent.callers` picks, traces to `TRACES_DIR`, open turns in its journal.
- Start-up: the configuration and checkpoint checks (exit 2 with one line per problem), the recovery of calls whose
  worker died here (`agent.recovery`), the traces folder's check (warns only).
- `GET /health` on `AGENT_HTTP_PORT`: status ("ok" or "degraded"), calls, traces, loop stalls; always HTTP 200.
- The worker's own loop has a stall watchdog (common/loop_watch.py; agent/worker_stats.py restarts a stuck worker).
docs/agent.md, "The worker", says why each of these is as it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from livekit.agents import AgentServer, AutoSubscribe, JobContext, JobExecutorType, JobProcess

# LiveKit plugins must be registered on the main thread: the modules that import them (agent.vad: Silero;
# agent.voice: the rest) are imported here, at module import, never first inside prewarm/entrypoint (job threads).
from agent import livekit_internals, worker_stats
from agent.admission import Admission
from agent.callers import follow_callers, install_room_closing_filter
from agent.config import MAX_SESSIONS, MAX_SESSIONS_CPU_ENGINE, MAX_SESSIONS_THREAD, AgentConfig
from agent.engine_client import LocalBackend, RemoteBackend, TTSBackend
from agent.journal import CallJournal
from agent.local.defaults import RANDOM_WEIGHTS_WARNING, ensure_random_checkpoint
from agent.one_agent import OneAgent
from agent.recovery import recover_dead_calls
from agent.trace_otel import check_env as check_otel
from agent.trace_otel import flush as flush_spans
from agent.trace_otel import install_from_env as install_otel
from agent.tracing import WRITES, check_traces_dir
from agent.vad import load_vad
from agent.voice import Call
from common.loop_watch import LoopProbe
from common.process import tune_process

logger = logging.getLogger("agent.worker")
install_room_closing_filter()  # a room LiveKit closes is no ERROR in this log (agent/callers.py)

#: what a replacement agent says first (the dispatch metadata's reason: token_server/agent_guard.py)
RECOVERY_LINES = {
    "agent_lost": "Sorry, I was cut off and lost our conversation. Could you say that again?",
    "no_agent": "Sorry to keep you waiting. I'm here now; go ahead.",
}

APP_FILE = Path(__file__).with_name("app.py")  # the module LiveKit's CLI discovers `server` in

_lock = threading.Lock()
_backend: TTSBackend | None = None
_engine: Any = None
_active_calls = 0
_tuned = False
_speaks_random_weights = False  # the embedded random-weight checkpoint: the page says so
_config: AgentConfig | None = None
CPU_WINDOW_S = 5.0  # the load's CPU term: long enough to span a reply's bursts, short enough to see a new call
HEALTH_PATH = "/health"
HEALTH_STALL_WINDOW_S = 60.0  # a loop stall this recent makes /health say "degraded"
_traces_problems: list[str] | None = None  # the start-up check's findings (None: not checked yet)
_worker_probe: LoopProbe | None = None  # the worker's own loop's lag probe


def get_backend(cfg: AgentConfig) -> TTSBackend:
    """The process-wide TTS backend (loads the engine on first use; thread-safe)."""
    global _backend, _engine, _speaks_random_weights
    with _lock:
        if _backend is None:
            if cfg.tts_engine_url:
                _backend = RemoteBackend(cfg.tts_engine_url, capacity=max_sessions(cfg))
                logger.info("TTS: remote engine at %s", cfg.tts_engine_url)
            else:
                from tts_engine import Engine, EngineConfig

                engine_cfg = EngineConfig.from_env()
                if not engine_cfg.model_dir:  # embedded default (agent/local/): a random-weight checkpoint
                    model_dir = ensure_random_checkpoint()
                    logger.warning(RANDOM_WEIGHTS_WARNING.format(path=model_dir))
                    engine_cfg = dataclasses.replace(engine_cfg, model_dir=str(model_dir))
                    _speaks_random_weights = True
                _engine = Engine.load(engine_cfg.model_dir, engine_cfg)
                _backend = LocalBackend(_engine)
                logger.info("TTS: engine loaded from %s (capacity %d)", engine_cfg.model_dir, _backend.capacity)
        return _backend


def prewarm(proc: JobProcess) -> None:
    global _tuned
    cfg = worker_config()
    install_otel()  # OTEL_EXPORTER_OTLP_ENDPOINT set: turn traces and LiveKit's spans over OTLP (once per process)
    proc.userdata["vad"] = load_vad(cfg.vad_silence_ms, cfg.vad_quiet_db)
    proc.userdata["backend"] = get_backend(cfg)
    if not cfg.stt_base_url:  # embedded STT: load whisper here, not on a call's event loop (~0.5 s)
        from agent.local.whisper_stt import load_model

        load_model()
    if cfg.turn.mode.uses_voice_model:  # the audio end-of-turn model (~100 MB), once per process
        from livekit.local_inference import init_eot

        init_eot()
    with _lock:
        if not _tuned:
            tune_process()
            _tuned = True


def max_sessions(cfg: AgentConfig) -> int:
    """`AGENT_MAX_SESSIONS`, else by where the TTS runs and how calls share the process (agent/config.py): the
    embedded engine on the CPU `MAX_SESSIONS_CPU_ENGINE` (the 2-core box); on a GPU or with a remote engine,
    `MAX_SESSIONS_THREAD` under the THREAD executor, `MAX_SESSIONS` under PROCESS (both measured on an H200 host)."""
    if cfg.max_sessions is not None:
        return cfg.max_sessions
    engine = _engine
    if engine is not None and engine.device.type == "cpu":
        return MAX_SESSIONS_CPU_ENGINE
    return MAX_SESSIONS_THREAD if cfg.job_executor == "thread" else MAX_SESSIONS


def current_load(server: Any = None) -> float:
    """LiveKit's load_fnc: every 0.5 s and before each job offer (`server`: LiveKit's AgentServer). Each limit's share
    in use: calls of `AGENT_MAX_SESSIONS` (LiveKit's own job count, so a call accepted but not yet connected
    counts), engine streams of the engine's capacity, this process's CPU (last 5 s) as a share of the cores it may
    use, of `AGENT_CPU_LIMIT`. The largest, scaled so that a limit reached is `AGENT_LOAD_THRESHOLD` exactly:
    LiveKit offers no call to a worker at the threshold (docs/operations.md "Capacity and load")."""
    cfg = worker_config()
    stats = worker_stats.start(cfg.stats_path, _worker_state)
    calls = len(server.active_jobs) if server is not None else _active_calls
    backend = _backend
    shares = {
        "calls": calls / max_sessions(cfg),
        "engine": backend.active_streams / backend.capacity if backend is not None else 0.0,
        "cpu": stats.cpu_cores(CPU_WINDOW_S) / stats.cores / cfg.cpu_limit if cfg.cpu_limit else 0.0,
    }
    # + 1e-9: a limit reached must read as full through LiveKit's float sums (load + reserved * load / jobs)
    load = min(1.0, cfg.load_threshold * max(shares.values()) + 1e-9)
    stats.note_load(load, shares, jobs=len(server.active_jobs) if server is not None else None)
    return load


def watch_worker_loop() -> None:
    """Probe the worker's own event loop (LiveKit's "worker_started", emitted on it), once per process; this starts
    the sampler, whose thread is the watchdog of every probed loop."""
    global _worker_probe
    cfg = worker_config()
    stats = worker_stats.start(cfg.stats_path, _worker_state)
    with _lock:
        if _worker_probe is None:
            _worker_probe = stats.watch_loop(name="worker")


def health() -> dict[str, Any]:
    """What `GET /health` answers (see the module docstring)."""
    cfg = worker_config()
    traces = {"dir": cfg.traces_dir or None, **WRITES.snapshot(), "startup_problems": list(_traces_problems or [])}
    stats = worker_stats.running()
    stalls = stats.stalls() if stats is not None else []
    recent = [s for s in stalls if time.time() - s["ended"] <= HEALTH_STALL_WINDOW_S]
    return {
        "status": "ok" if traces["ok"] and not traces["startup_problems"] and not recent else "degraded",
        "calls": _active_calls,
        "traces": traces,
        "loop_stalls": stalls,
    }


async def handle_health(_request: web.Request) -> web.Response:
    return web.json_response(health())


def add_health_route(server: AgentServer) -> bool:
    """`GET /health` on the worker's health server; False where LiveKit's server has changed (warned)."""
    return livekit_internals.add_worker_route(server, HEALTH_PATH, handle_health)


def check_traces_once(cfg: AgentConfig) -> list[str]:
    """The start-up check of the traces folder, logged once per process (the CLI and LiveKit's discovery both
    start the worker up)."""
    global _traces_problems
    with _lock:
        if _traces_problems is None:
            _traces_problems = check_traces_dir(cfg.traces_dir) if cfg.traces_dir else []
            for problem in _traces_problems:
                logger.warning("%s (calls still work; GET %s on port %d reports it)", problem, HEALTH_PATH,
                               cfg.http_port)  # fmt: skip
        return _traces_problems


def _worker_state() -> dict[str, int]:
    backend = _backend
    return {
        "calls": _active_calls,
        "engine_active": backend.active_streams if backend is not None else 0,
        "engine_capacity": backend.capacity if backend is not None else 0,
    }


async def entrypoint(ctx: JobContext) -> None:
    global _active_calls
    cfg = worker_config()
    vad = ctx.proc.userdata.get("vad")
    backend = ctx.proc.userdata.get("backend") or get_backend(cfg)
    if vad is None:
        vad = load_vad(cfg.vad_silence_ms, cfg.vad_quiet_db)
    await ctx.connect(auto_subscribe=AutoSubscribe.AUDIO_ONLY)
    claim = OneAgent(ctx.room, cfg.agent_name)
    earlier = claim.earlier()
    if earlier is not None:  # the room was dispatched twice and the other agent came first (agent/one_agent.py)
        leave_to(ctx, earlier)
        return
    attributes = {**voice_attributes(cfg), **claim.start_call()}
    stop_watch = claim.watch(lambda identity: leave_to(ctx, identity))
    call = Call(cfg, vad=vad, backend=backend, session_id=f"{ctx.room.name}-{ctx.job.id[-6:]}")
    journal = None
    if cfg.traces_dir:
        journal = CallJournal(
            cfg.traces_dir,
            room=ctx.room.name,
            agent_identity=ctx.room.local_participant.identity,
            job_id=ctx.job.id,
            session_id=call.session_id,
        )
        journal.watch(call.collector)
    with _lock:
        _active_calls += 1
    stats = worker_stats.running()
    probe = stats.watch_loop() if stats is not None else None  # this call's loop lag

    async def on_shutdown() -> None:
        global _active_calls
        stop_watch()
        with _lock:
            _active_calls -= 1
        if probe is not None:
            probe.stop()
        closing = time.monotonic()
        try:
            await call.aclose()  # controller, session (idempotent), audio output, STT client; then trims the C heap
            await backend.aclose()  # a remote engine's HTTP session of this call's event loop
        finally:
            if journal is not None:
                journal.close()  # the collector wrote every record: nothing is left open
        flush_spans()  # the call's last turn, before a job process may exit
        left = await tasks_left_running()
        if left:  # the fault drills read this line: a call must leave nothing of ours behind
            logger.warning("call %s closed with %d task(s) of ours still running: %s", call.session_id, len(left),
                           ", ".join(left))  # fmt: skip
        # how long a call slot stays taken after the call ended (then LiveKit's job leaves the room)
        logger.info("call %s closed in %.2f s", call.session_id, time.monotonic() - closing)

    ctx.add_shutdown_callback(on_shutdown)
    await call.start(room=ctx.room)
    # one caller at a time; the job ends CALLER_GONE_END_S after the last caller left (agent/callers.py)
    follow_callers(ctx.room, call.session, on_empty=lambda: ctx.shutdown(reason="its caller left"))
    await ctx.room.local_participant.set_attributes(attributes)
    # after LiveKit's server restarts, the SDK rejoins with its token's attributes: ours are published again, so
    # that an agent the page's new room dispatched meanwhile sees whose call this is (agent/one_agent.py)
    republished: set[asyncio.Task[None]] = set()

    def on_reconnected() -> None:
        task = asyncio.ensure_future(_publish_again(ctx, attributes))
        republished.add(task)
        task.add_done_callback(republished.discard)

    ctx.room.on("reconnected", on_reconnected)
    reason = recovery_reason(ctx.job.metadata)
    if reason is not None:
        call.session.say(RECOVERY_LINES.get(reason, RECOVERY_LINES["agent_lost"]))
    logger.info("call %s started in room %s%s", call.session_id, ctx.room.name, f" ({reason})" if reason else "")


def leave_to(ctx: JobContext, identity: str) -> None:
    """Another agent of ours holds this room's call: this job ends without a word (agent/one_agent.py)."""
    logger.info("room %s: agent %s holds its call; job %s leaves", ctx.room.name, identity, ctx.job.id)
    ctx.shutdown(reason=f"agent {identity} holds the room")


async def _publish_again(ctx: JobContext, attributes: dict[str, str]) -> None:
    try:
        await ctx.room.local_participant.set_attributes(attributes)
    except Exception as exc:  # noqa: BLE001 - a rejoined room without our attributes keeps its call; say so
        logger.warning("room %s: publishing the agent's attributes again failed: %r", ctx.room.name, exc)


async def tasks_left_running(settle_s: float = 0.2) -> list[str]:
    """Names of this job's tasks that run our code (agent/) and are still pending a moment after the call closed."""
    await asyncio.sleep(settle_s)
    ours = str(Path(__file__).resolve().parent)
    left = []
    for task in asyncio.all_tasks():
        code = getattr(task.get_coro(), "cr_code", None)
        if task is asyncio.current_task() or task.done() or code is None:
            continue
        if code.co_filename.startswith(ours):
            left.append(task.get_name())
    return left


def recovery_reason(metadata: str) -> str | None:
    """Why the agent guard dispatched this job (`{"voice_agent": {"recovery": REASON}}`), or None."""
    try:
        data = json.loads(metadata) if metadata else None
    except ValueError:
        return None
    section = data.get("voice_agent") if isinstance(data, dict) else None
    reason = section.get("recovery") if isinstance(section, dict) else None
    return reason if isinstance(reason, str) and reason else None


def voice_attributes(cfg: AgentConfig) -> dict[str, str]:
    """What the page shows about this agent's parts (participant attributes under `voice_agent.`)."""
    defaults = [
        name
        for name, is_default in (
            ("tts", _speaks_random_weights),
            ("llm", cfg.llm_default),
            ("stt", not cfg.stt_base_url),
            ("livekit", cfg.livekit_default),
        )
        if is_default
    ]
    return {
        "voice_agent.tts_weights": "random" if _speaks_random_weights else "configured",
        "voice_agent.defaults": ",".join(defaults),
    }


def server_options(cfg: AgentConfig) -> dict[str, Any]:
    """The `AgentServer` settings this configuration asks for (its keyword arguments)."""
    return dict(
        setup_fnc=prewarm,
        load_fnc=current_load,
        load_threshold=cfg.load_threshold,
        job_executor_type=JobExecutorType.THREAD if cfg.job_executor == "thread" else JobExecutorType.PROCESS,
        num_idle_processes=cfg.num_idle_processes,
        initialize_process_timeout=cfg.init_timeout_s,
        drain_timeout=cfg.drain_timeout_s,
        port=cfg.http_port,
        ws_url=cfg.livekit_url or None,
        api_key=cfg.livekit_api_key or None,
        api_secret=cfg.livekit_api_secret or None,
    )


def build_server(cfg: AgentConfig) -> AgentServer:
    """The worker: an AgentServer whose one rtc_session is `entrypoint`, dispatched by name (AGENT_NAME); a job
    offer is accepted only while a call slot is free, counted on the loop (agent/admission.py)."""
    livekit_internals.close_runners_cancelled_in_prewarm()  # else stopping during a runner's prewarm hangs
    if cfg.tts_engine_url and os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # logged here: logging is set up now
        logger.info("the TTS engine is remote (%s): this worker and its calls see no GPU (CUDA_VISIBLE_DEVICES=''), "
                    "so joining a room creates no CUDA context", cfg.tts_engine_url)
    server = AgentServer(**server_options(cfg))
    add_health_route(server)
    server.on("worker_started", watch_worker_loop)
    # LiveKit hears that a call slot is free when the call's runner closes, not up to 2.5 s later
    server.on("worker_started", lambda: livekit_internals.report_status_when_jobs_end(server))
    admission = Admission(lambda: max_sessions(cfg), lambda: server.active_jobs)
    server.rtc_session(entrypoint, agent_name=cfg.agent_name, on_request=admission)
    return server


def worker_config() -> AgentConfig:
    """The configuration read once when the worker started.

    Read once because LiveKit's CLI writes the resolved LIVEKIT_URL into the environment, which would make
    a later read report the embedded LiveKit server as configured.
    """
    global _config
    with _lock:
        if _config is None:
            _config = AgentConfig.from_env()
        return _config


def leave_the_gpus(cfg: AgentConfig) -> bool:
    """A worker whose engine is remote uses no GPU, but LiveKit's WebRTC, seeing one, creates a CUDA context in each
    process's first room join (for NVIDIA video codecs an audio call never uses), and contexts are made one at a time
    across processes (docs/operations.md, "Sizing", has the measurements). Such a worker hides the GPUs
    (`CUDA_VISIBLE_DEVICES` empty) before any room is joined; its job processes inherit it. True when it did."""
    if not cfg.tts_engine_url or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    return True


def check_startup() -> AgentConfig:
    """The configuration (ConfigError naming the variable) and, for a configured checkpoint, the doctor: it reads
    headers only, so a broken checkpoint stops the worker with one line per problem and exit 2, instead of a
    traceback inside LiveKit's prewarm. A remote engine's worker leaves the GPUs alone (`leave_the_gpus`)."""
    cfg = worker_config()
    leave_the_gpus(cfg)
    check_otel()  # a bad OTEL_EXPORTER_OTLP_PROTOCOL stops here, not in each job's prewarm
    check_traces_once(cfg)  # warns only: a call works without its traces
    if not cfg.tts_engine_url:
        from tts_engine import EngineConfig, diagnose

        model_dir = EngineConfig.from_env().model_dir
        diagnosis = diagnose(model_dir) if model_dir else None
        if diagnosis is not None and not diagnosis.ok:
            for line in diagnosis.problems:
                print(f"TTS_DEEP_STREAM_MODEL_DIR: {line}", file=sys.stderr)
            raise SystemExit(2)
    return cfg


def serve() -> AgentServer:
    """The configured server, after `check_startup` (what agent/app.py exports to LiveKit's CLI)."""
    return build_server(check_startup())


def run_cli(*, dev: bool, log_level: str | None = None, url: str | None = None, api_key: str | None = None,
            api_secret: str | None = None) -> int:
    """Run the worker through LiveKit's current entry point, `python -m livekit.agents start agent/app.py`
    (`--dev`: development mode, colored logs, no drain on exit; else production: JSON logs, drains on SIGTERM).

    `log_level` defaults to LIVEKIT_LOG_LEVEL, else DEBUG in dev and INFO in production (as LiveKit's own CLI)."""
    from livekit.agents.__main__ import main as livekit_main

    cfg = check_startup()  # with our messages, before LiveKit's discovery imports agent/app.py (which checks again)
    recover_dead_calls(cfg, reason="found at the next worker's start-up")  # workers that died with no supervisor
    level = (log_level or os.environ.get("LIVEKIT_LOG_LEVEL") or ("DEBUG" if dev else "INFO")).upper()
    argv = ["start", str(APP_FILE), "--log-level", level, "--log-format", "colored" if dev else "json"]
    if dev:
        argv.append("--dev")
    for flag, value in (("--url", url), ("--api-key", api_key), ("--api-secret", api_secret)):
        if value:
            argv += [flag, value]
    return livekit_main(argv)
