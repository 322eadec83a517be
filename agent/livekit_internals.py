"""Every use of private LiveKit state in the agent, in one place (issue 18).

Written for livekit-agents 1.8.9 (`WRITTEN_FOR`; pyproject.toml pins `livekit-agents==1.8.9`), which has
no public equivalent for these three reads (agent/voice.py's docstring says what each is for):

- `livekit.agents.voice.agent_activity._SpeechHandleContextVar` (a `ContextVar[SpeechHandle]` set around
  each speech's reply task): `current_speech_handle()` returns the `SpeechHandle` whose task runs the
  caller, or None outside a speech. `session.current_speech` is no substitute: it is still the previous
  speech while the LLM node of the next one starts.
- `SpeechHandle._interrupt_fut` (an `asyncio.Future[None]` that the framework resolves the moment it
  decides to interrupt the speech; the public `interrupted` property is its `done()`):
  `interrupt_future(handle)` returns it, or None.
- `SpeechHandle._interrupt_source` (`"audio_activity" | "user_turn" | "programmatic"`, the first
  interrupt's cause; None until then): `interrupt_source(handle)` returns it, or None.

When a name is missing (a LiveKit upgrade renamed it), each function logs once at WARNING (logger
`agent.livekit_internals`) and falls back: no current handle (the caller then uses the public
`session.current_speech`), no interrupt future (the public `interrupted` flag, read before every frame,
and `add_done_callback` still end every reply), no source (the trace says "interrupted"). So the call keeps
working, only less precisely. `missing_internals()` lists the absent names without warning, for the test
(tests/agent/test_livekit_internals.py) that fails loudly on an upgrade, and for anyone checking one.

One construction, `silero_stream_with_model(vad, wrap)` (agent/vad.py's quiet gate): a stream of the Silero
plugin's own `VADStream` whose model is `wrap(model)`. The plugin's `VAD.stream()` builds the model from its
private `_onnx_session` and `_opts` and registers the stream in `_streams` (so `update_options` reaches it), and
has no way to hand it another model. Where a name is gone it returns None with a warning, and the caller uses
the plugin's plain stream (Silero alone).

One read for agent/callers.py, `session_room_io(session)`: the session's `RoomIO` (`AgentSession._room_io`), whose
public `set_participant` switches the caller the session listens to; the session exposes no public handle to
it. Where it is gone, None with a warning, and the session keeps LiveKit's first-caller link.

One call for agent/turn/controller.py's pause handling, `drop_early_answer(session)`: the answer the framework
prepares on a transcript before the turn is committed (its preemptive generation) is kept until the *next* transcript
when the caller goes on after a pause; the activity's `_cancel_preemptive_generation()` (`AgentSession._activity`)
drops it the moment they go on, so no LLM and TTS work is spent on half a sentence and the turn, once committed, is
answered afresh. Where the names are gone, a warning once and nothing: the framework drops it at the next transcript.

One addition for agent/worker.py, `add_worker_route(server, path, handler)`: a GET route on the worker's health
server (`AgentServer._http_server`, a `livekit.agents.utils.http_server.HttpServer` serving GET / and /worker on
`AGENT_HTTP_PORT`). `AgentServer.run()` creates that server and starts it at once, and aiohttp takes no route once
started, so `HttpServer.start` is wrapped (once per process) to add the routes asked for that server first.
Where the names are gone, False with a warning, and the route is not served.

One hook for agent/worker.py, `report_status_when_jobs_end(server)`: LiveKit's server hears a worker's load and
availability only every 2.5 s (`UPDATE_STATUS_INTERVAL`), so a one-call worker whose call just ended stayed "full" to
it for up to 2.5 s more and the next caller's dispatch found no worker (measured 2026-12-03: the call ended, the
job closed 2.0 s later, "below capacity" 1.8 s after that). On each runner's close (the pool's `process_closed`,
`AgentServer._proc_pool`) the hook refreshes the load (`_refresh_worker_load`) and sends the status
(`_update_worker_status`) at once. Where the names are gone, False with a warning, and the periodic update remains.

One fix, `close_runners_cancelled_in_prewarm()` (`agent.worker.build_server` applies it): with the THREAD executor,
closing the worker while a runner is still in prewarm (the pool starts a replacement each time a call takes
the idle one, and prewarm loads Silero and Whisper, seconds on a busy CPU) hangs forever. The pool cancels
`ThreadJobExecutor.initialize()`, which leaves the executor's private `_initialize_fut` unresolved; the
executor's main task waits on it before it reads the runner's channel, so `aclose()` never sees the
runner's shutdown ack ("job did not ack shutdown in time", then an unbounded wait). The fix resolves that
future when `initialize()` is cancelled; the runner finishes prewarm, reads the queued shutdown request and
exits, and `aclose()` returns. Where the name is gone, the fix is skipped with a warning.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

from livekit.agents.voice.speech_handle import SpeechHandle

logger = logging.getLogger("agent.livekit_internals")

WRITTEN_FOR = "1.8.9"
CONTEXT_VAR = "livekit.agents.voice.agent_activity._SpeechHandleContextVar"
INTERRUPT_FUT = "SpeechHandle._interrupt_fut"
INTERRUPT_SOURCE = "SpeechHandle._interrupt_source"
RUNNER_INIT_FUT = "ThreadJobExecutor._initialize_fut"
SILERO_MODEL = "silero.VAD._onnx_session/_opts/_streams"
SESSION_ROOM_IO = "AgentSession._room_io"
DROP_PREEMPTIVE = "AgentSession._activity._cancel_preemptive_generation"
HTTP_APP = "AgentServer._http_server (utils.http_server.HttpServer.app/start)"
STATUS_NOW = "AgentServer._proc_pool/_refresh_worker_load/_update_worker_status"

_MISSING = object()
_warned: set[str] = set()


def installed_version() -> str:
    """The installed livekit-agents version."""
    from livekit.agents import __version__

    return __version__


def _warn_once(name: str) -> None:
    if name not in _warned:
        _warned.add(name)
        logger.warning(
            "livekit-agents %s has no %s (this adapter was written for %s): falling back to public API only",
            installed_version(),
            name,
            WRITTEN_FOR,
        )


def _context_var() -> contextvars.ContextVar[SpeechHandle] | None:
    try:
        from livekit.agents.voice import agent_activity
    except ImportError:  # pragma: no cover - the module itself moved
        return None
    var = getattr(agent_activity, "_SpeechHandleContextVar", None)
    return var if isinstance(var, contextvars.ContextVar) else None


def current_speech_handle() -> SpeechHandle | None:
    """The speech handle whose reply task runs the caller (None outside a speech or if the name is gone)."""
    var = _context_var()
    if var is None:
        _warn_once(CONTEXT_VAR)
        return None
    return var.get(None)


def interrupt_future(handle: Any) -> asyncio.Future[None] | None:
    """The future the framework resolves the moment it interrupts `handle` (None if the name is gone)."""
    fut = getattr(handle, "_interrupt_fut", None)
    if not isinstance(fut, asyncio.Future):
        _warn_once(INTERRUPT_FUT)
        return None
    return fut


def interrupt_source(handle: Any) -> str | None:
    """Why the framework interrupted `handle` (its first interrupt's source), None if not (yet) or if gone."""
    source = getattr(handle, "_interrupt_source", _MISSING)
    if source is _MISSING:
        _warn_once(INTERRUPT_SOURCE)
        return None
    return None if source is None else str(source)


def missing_internals() -> list[str]:
    """The private names above that the installed livekit-agents lacks (empty = the adapter holds)."""
    missing = [] if _context_var() is not None else [CONTEXT_VAR]

    async def make() -> SpeechHandle:  # SpeechHandle's futures need a running loop, as in a real session
        return SpeechHandle.create()

    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if running:
        handle = SpeechHandle.create()
    else:  # no loop running here: make the handle on a short-lived one
        loop = asyncio.new_event_loop()
        try:
            handle = loop.run_until_complete(make())
        finally:
            loop.close()
    if not isinstance(getattr(handle, "_interrupt_fut", None), asyncio.Future):
        missing.append(INTERRUPT_FUT)
    if getattr(handle, "_interrupt_source", _MISSING) is _MISSING:
        missing.append(INTERRUPT_SOURCE)
    if not _runner_has_init_future():
        missing.append(RUNNER_INIT_FUT)
    if not _silero_builds_its_model():
        missing.append(SILERO_MODEL)
    if not _session_keeps_room_io():
        missing.append(SESSION_ROOM_IO)
    if not _activity_drops_preemptive():
        missing.append(DROP_PREEMPTIVE)
    if not _server_keeps_http_app():
        missing.append(HTTP_APP)
    if not _server_reports_status():
        missing.append(STATUS_NOW)
    return missing


def _server_reports_status() -> bool:
    from livekit.agents import AgentServer

    run = inspect.unwrap(AgentServer.run)
    return "_proc_pool" in run.__code__.co_names and all(
        inspect.iscoroutinefunction(getattr(AgentServer, name, None))
        for name in ("_refresh_worker_load", "_update_worker_status")
    )


_status_tasks: set[asyncio.Task[None]] = set()


def report_status_when_jobs_end(server: Any) -> bool:
    """Send LiveKit the worker's load and status as soon as a job's runner closes (see the module docstring). Call
    it once the server runs (its "worker_started" event: the pool exists then); False (warned) where it cannot."""
    pool = getattr(server, "_proc_pool", None)
    if pool is None or not callable(getattr(pool, "on", None)) or not _server_reports_status():
        _warn_once(STATUS_NOW)
        return False

    async def report() -> None:
        try:
            await server._refresh_worker_load()
            await server._update_worker_status()
        except Exception as exc:  # noqa: BLE001 - the periodic update still comes within 2.5 s
            logger.debug("sending the worker status after a job ended failed: %r", exc)

    def on_closed(_runner: Any) -> None:
        # a task: it runs after the pool has taken the runner off its list, so the job no longer counts
        task = asyncio.get_running_loop().create_task(report())
        _status_tasks.add(task)
        task.add_done_callback(_status_tasks.discard)

    pool.on("process_closed", on_closed)
    return True


def _server_keeps_http_app() -> bool:
    from livekit.agents import AgentServer
    from livekit.agents.utils.http_server import HttpServer

    run = inspect.unwrap(AgentServer.run)
    return "_http_server" in run.__code__.co_names and callable(getattr(HttpServer, "start", None)) and \
        isinstance(getattr(HttpServer, "app", None), property)  # fmt: skip


_routes: weakref.WeakKeyDictionary[Any, list[tuple[str, Callable[..., Any]]]] = weakref.WeakKeyDictionary()


def add_worker_route(server: Any, path: str, handler: Callable[..., Any]) -> bool:
    """Serve GET `path` with `handler` on `server`'s health server once it starts (see the module docstring)."""
    from livekit.agents.utils.http_server import HttpServer

    if not _server_keeps_http_app():
        _warn_once(HTTP_APP)
        return False
    _routes.setdefault(server, []).append((path, handler))
    start = HttpServer.start
    if not getattr(start, "_adds_worker_routes", False):

        async def start_with_routes(self: Any) -> None:
            app: Any = getattr(self, "app", None)  # the aiohttp application (_server_keeps_http_app checked it)
            for owner, routes in list(_routes.items()):
                if app is not None and getattr(owner, "_http_server", None) is self:
                    for route_path, route_handler in routes:
                        app.router.add_get(route_path, route_handler)
            await start(self)

        start_with_routes._adds_worker_routes = True  # type: ignore[attr-defined]  # a marker read back above
        HttpServer.start = start_with_routes  # type: ignore[method-assign]  # the pinned patch (module docstring)
    return True


def _activity_drops_preemptive() -> bool:
    from livekit.agents import AgentSession
    from livekit.agents.voice.agent_activity import AgentActivity

    init = inspect.unwrap(AgentSession.__init__)
    cancel = getattr(AgentActivity, "_cancel_preemptive_generation", None)
    return "_activity" in init.__code__.co_names and callable(cancel)


def drop_early_answer(session: Any) -> bool:
    """Drop the answer the session prepared before the turn's commit (see the module docstring); False if gone."""
    cancel = getattr(getattr(session, "_activity", None), "_cancel_preemptive_generation", None)
    if not callable(cancel):
        _warn_once(DROP_PREEMPTIVE)
        return False
    cancel()
    return True


def _session_keeps_room_io() -> bool:
    from livekit.agents import AgentSession

    init = inspect.unwrap(AgentSession.__init__)  # wrapped by LiveKit's deprecation helper
    return "_room_io" in init.__code__.co_names


def session_room_io(session: Any) -> Any | None:
    """The `RoomIO` of a session started in a room (None, warned once, if the name is gone or not started)."""
    room_io = getattr(session, "_room_io", None)
    if room_io is None or not hasattr(room_io, "set_participant"):
        _warn_once(SESSION_ROOM_IO)
        return None
    return room_io


def _silero_builds_its_model() -> bool:
    """Whether silero.VAD keeps `_onnx_session`, `_opts`, `_streams` and its stream takes (vad, opts, model)."""
    from livekit.plugins import silero

    names = silero.VAD.__init__.__code__.co_names
    params = silero.VADStream.__init__.__code__.co_varnames[:4]
    return {"_onnx_session", "_opts", "_streams"} <= set(names) and params == ("self", "vad", "opts", "model")


def silero_stream_with_model(vad: Any, wrap: Callable[[Any], Any]) -> Any | None:
    """The Silero plugin's own stream on `vad` (a `silero.VAD`) with `wrap(model)` as its model; None (and a
    warning once) where the plugin's private names are gone."""
    from livekit.plugins import silero
    from livekit.plugins.silero import onnx_model

    session, opts, streams = (getattr(vad, name, None) for name in ("_onnx_session", "_opts", "_streams"))
    if session is None or opts is None or streams is None or not _silero_builds_its_model():
        _warn_once(SILERO_MODEL)
        return None
    stream = silero.VADStream(vad, opts, wrap(onnx_model.OnnxModel(onnx_session=session, sample_rate=opts.sample_rate)))
    streams.add(stream)  # as the plugin's stream() does: update_options() reaches its streams through this set
    return stream


def _runner_has_init_future() -> bool:
    """Whether ThreadJobExecutor still sets `_initialize_fut` (read from its __init__'s attribute names)."""
    from livekit.agents.ipc.job_thread_executor import ThreadJobExecutor

    return "_initialize_fut" in ThreadJobExecutor.__init__.__code__.co_names


def close_runners_cancelled_in_prewarm() -> bool:
    """Make a THREAD runner whose `initialize()` was cancelled closable (see the module docstring).

    Idempotent; True once the fix is in place, False (with a warning) where the executor has changed."""
    from livekit.agents.ipc.job_thread_executor import ThreadJobExecutor

    initialize = ThreadJobExecutor.initialize
    if getattr(initialize, "_settles_when_cancelled", False):
        return True
    if not _runner_has_init_future():
        _warn_once(RUNNER_INIT_FUT)
        return False

    async def initialize_settling_when_cancelled(self: ThreadJobExecutor) -> None:
        try:
            await initialize(self)
        except asyncio.CancelledError:
            fut: asyncio.Future[None] = self._initialize_fut
            if not fut.done():  # the main task awaits it before it reads the runner's shutdown ack
                fut.set_exception(RuntimeError("runner initialization cancelled"))
            raise

    # a marker on the replacement (the patch applies once), then the patch itself: both on purpose
    initialize_settling_when_cancelled._settles_when_cancelled = True  # type: ignore[attr-defined]  # a marker
    ThreadJobExecutor.initialize = initialize_settling_when_cancelled  # type: ignore[method-assign]  # the patch
    return True
