"""`python -m tts_engine serve`: the command line of the TTS server.

Contract:
- Imports only the standard library and light tts_engine modules at the top, so `--help` works on a machine without
  torch or aiohttp; `run` imports the engine (torch) and the server (aiohttp) once the arguments are parsed.
- Configuration: the engine's variables (tts_engine/config.py) and the server's (tts_engine/server/config.py), from the
  environment and `.env` (or `--env-file` / $ENV_FILE, read first); every given flag wins. Unknown TTS_* variables are
  warned about.
- Order in `run`: configuration, then the listening sockets are bound (a taken port fails at once, before the model
  loads), then the engine loads, then the server serves until SIGTERM/SIGINT and the engine is closed. A host that is
  not loopback without `TTS_API_KEY` is warned about: anyone who reaches the port can use the engine.
- Exit status: 0 after a clean stop; 2 for a bad configuration or checkpoint, or a port that cannot be bound (a
  restart would not help). Log lines use the logger name `tts_engine.server`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from typing import Any

from common.env import load_dotenv
from common.process import tune_process
from tts_engine.config import EngineConfig, unknown_tts_variables
from tts_engine.errors import CheckpointError, ConfigError
from tts_engine.server.config import ServerConfig, is_loopback, listen_sockets, parse_client_limit

log = logging.getLogger("tts_engine.server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="checkpoint directory (TTS_DEEP_STREAM_MODEL_DIR)")
    parser.add_argument("--host", help="bind address (TTS_HOST, default 127.0.0.1; another address without "
                                       "TTS_API_KEY is warned about)")
    parser.add_argument("--port", type=int, help="TCP port, 0 = any free one (TTS_PORT, default 9000)")
    parser.add_argument("--device", help="auto | cpu | cuda | cuda:N (TTS_DEEP_STREAM_DEVICE)")
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float16", "float32"))
    parser.add_argument("--packet-frames", type=int, help="frames per packet (TTS_DEEP_STREAM_PACKET_TOKENS)")
    parser.add_argument("--first-packet-frames", type=int, help="TTS_DEEP_STREAM_FIRST_PACKET_TOKENS")
    parser.add_argument("--max-streams", type=int, help="concurrent stream slots (TTS_DEEP_STREAM_MAX_STREAMS)")
    parser.add_argument("--max-text-chars", type=int, help="TTS_DEEP_STREAM_MAX_TEXT_CHARS")
    parser.add_argument("--seed", type=int, help="TTS_DEEP_STREAM_SEED")
    parser.add_argument("--policy", choices=("greedy", "seeded"), help="TTS_DEEP_STREAM_DETERMINISTIC_POLICY")
    parser.add_argument("--deterministic", choices=("0", "1"), help="TTS_DEEP_STREAM_DETERMINISTIC")
    parser.add_argument("--code-dump-dir", help="enable code dumps into this folder (TTS_CODE_DUMP_*)")
    parser.add_argument("--idle-timeout", type=float,
                        help="seconds a stream's client may take nothing before it is cut (TTS_STREAM_IDLE_TIMEOUT_S, "
                             "default 20)")
    parser.add_argument("--client-max-streams",
                        help="streams one client may hold: auto (half the capacity), 0 (no limit) or a number "
                             "(TTS_CLIENT_MAX_STREAMS)")
    parser.add_argument(
        "--env-file", default=os.environ.get("ENV_FILE") or ".env", help="KEY=VALUE file read first ($ENV_FILE or .env)"
    )
    parser.add_argument("--log-level", default="INFO")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """EngineConfig from the environment, with every given CLI flag winning."""
    overrides: dict[str, Any] = {
        "model_dir": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "packet_frames": args.packet_frames,
        "first_packet_frames": args.first_packet_frames,
        "max_streams": args.max_streams,
        "max_text_chars": args.max_text_chars,
        "seed": args.seed,
        "deterministic_policy": args.policy,
        "deterministic": None if args.deterministic is None else args.deterministic == "1",
    }
    if getattr(args, "code_dump_dir", None):
        overrides.update(code_dump_enable=True, code_dump_dir=args.code_dump_dir)
    return EngineConfig.from_env(**overrides)


def server_config_from_args(args: argparse.Namespace) -> ServerConfig:
    """ServerConfig from the environment, with every given CLI flag winning."""
    given: dict[str, Any] = {}
    if args.host is not None:
        given["host"] = args.host
    if args.port is not None:
        given["port"] = args.port
    if args.idle_timeout is not None:
        given["idle_timeout_s"] = args.idle_timeout
    if args.client_max_streams is not None:
        given["client_max_streams"] = parse_client_limit(args.client_max_streams)
    return ServerConfig.from_env(**given)


def warn_unknown_variables() -> list[str]:
    unknown = unknown_tts_variables()
    for name in unknown:
        log.warning("unknown environment variable %s is ignored (typo? see docs/server.md and .env.example)", name)
    return unknown


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        load_dotenv(args.env_file)
        warn_unknown_variables()
        config = config_from_args(args)
        server_config = server_config_from_args(args)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    host, port = server_config.host, server_config.port
    try:  # before the model loads: a taken port is reported in a second, not after minutes of loading
        sockets = listen_sockets(host, port)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s (nothing was loaded; choose another --port / TTS_PORT)", host, port,
                  exc.strerror or exc)
        return 2
    warn_if_exposed(sockets, server_config)
    try:
        return _serve_loaded(config, server_config, sockets)
    finally:
        for sock in sockets:
            sock.close()


def warn_if_exposed(sockets: list[socket.socket], config: ServerConfig) -> bool:
    """Warn, and say so, when the server listens beyond this machine without an API key."""
    if is_loopback(sockets) or config.api_keys:
        return False
    address, port = sockets[0].getsockname()[:2]
    log.warning("listening on %s (port %d) without TTS_API_KEY: anyone who can reach it can use this TTS engine; set "
                "TTS_API_KEY, or listen on 127.0.0.1", address, port)
    return True


def _serve_loaded(config: EngineConfig, server_config: ServerConfig, sockets: list[socket.socket]) -> int:
    # heavy (torch, aiohttp): imported only once the arguments are parsed and the port is ours
    from tts_engine.engine import Engine
    from tts_engine.server.app import start_server

    try:
        log.info("loading %s on %s", config.model_dir, config.device)
        engine = Engine.load(config.model_dir or None, config)
    except (ConfigError, CheckpointError) as exc:
        log.error("%s", exc)
        return 2
    log.info("engine ready on %s (warm-up %.2f s)", engine.device, engine.warmup_s or 0.0)
    tune_process()  # GIL switch interval + gc.freeze after the load (common/process.py says why)

    async def serve() -> None:
        runner, bound, _ = await start_server(engine, config=server_config, sockets=sockets)
        log.info("listening on http://%s:%d (POST /tts/stream, /synthesize, /v1/audio/speech; GET /tts/ws, /healthz, "
                 "/metrics)%s", server_config.host, bound, " with an API key" if server_config.api_keys else "")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
            log.info("shutting down")
        finally:
            await runner.cleanup()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()
    return 0
