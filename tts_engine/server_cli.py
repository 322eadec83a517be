"""The command line of `python -m tts_engine serve` (tts_engine/__main__.py dispatches `serve` to tts_engine.server,
which re-exports `add_arguments` and `run` from here).

Configuration: the env table of DESIGN.md §6 (and `.env`, or `--env-file` / $ENV_FILE, read first), every given CLI
flag wins over the environment; unknown TTS_* variables are warned about at start-up. `run` loads the engine, serves
until SIGTERM/SIGINT, then closes the engine. Exit status: 0 after a clean stop; 2 for a bad configuration or
checkpoint, or a port that cannot be bound (a restart would not help).
Log lines keep the logger name `tts_engine.server`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any

log = logging.getLogger("tts_engine.server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="checkpoint directory (TTS_DEEP_STREAM_MODEL_DIR)")
    parser.add_argument("--host", help="bind address (TTS_HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="TCP port (TTS_PORT, default 9000)")
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
    parser.add_argument(
        "--env-file", default=os.environ.get("ENV_FILE") or ".env", help="KEY=VALUE file read first ($ENV_FILE or .env)"
    )
    parser.add_argument("--log-level", default="INFO")


def config_from_args(args: argparse.Namespace) -> Any:
    """EngineConfig from the environment, with every given CLI flag winning."""
    from tts_engine.config import EngineConfig

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


def warn_unknown_variables() -> list[str]:
    from tts_engine.config import unknown_tts_variables

    unknown = unknown_tts_variables()
    for name in unknown:
        log.warning("unknown environment variable %s is ignored (typo? see DESIGN.md §6 / docs/server.md)", name)
    return unknown


def run(args: argparse.Namespace) -> int:
    from tts_engine.engine import Engine
    from tts_engine.env import Env, load_dotenv
    from tts_engine.errors import CheckpointError, ConfigError

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        load_dotenv(args.env_file)
        warn_unknown_variables()
        config = config_from_args(args)
        env = Env()
        host = args.host or env.str("TTS_HOST", "0.0.0.0")
        port = args.port if args.port is not None else env.int("TTS_PORT", 9000, lo=0, hi=65535)
        log.info("loading %s on %s", config.model_dir, config.device)
        engine = Engine.load(config.model_dir or None, config)
    except (ConfigError, CheckpointError) as exc:
        log.error("%s", exc)
        return 2
    log.info("engine ready on %s (warm-up %.2f s)", engine.device, engine.warmup_s or 0.0)
    from tts_engine.runtime.process import tune_process

    tune_process()  # GIL switch interval + gc.freeze after the load (runtime/process.py says why)

    async def serve() -> None:
        from tts_engine.server import start_server  # server.py imports this module: no import cycle at load

        runner, bound, _ = await start_server(engine, host, port)
        log.info("listening on http://%s:%d (POST /tts/stream, /synthesize; GET /healthz, /metrics)", host, bound)
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
    except OSError as exc:  # port taken / address not available: a restart would not help
        log.error("cannot listen on %s:%d: %s", host, port, exc)
        return 2
    finally:
        engine.close()
    return 0
