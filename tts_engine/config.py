"""Engine configuration: one dataclass, read from the environment (docs/engine.md, "Configuration") or built in code.

Variable names keep the old system's names so its operators can move over. Every value is checked
at start-up; a bad one raises `ConfigError` naming the variable and what is allowed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.audio_format import MAX_PACKET_FRAMES
from common.cpu import usable_cores
from common.env import Env
from tts_engine.errors import ConfigError

#: Every TTS_* variable the engine understands; anything else starting with TTS_ is warned about.
KNOWN_TTS_VARIABLES = (
    "TTS_DEEP_STREAM_MODEL_DIR",
    "TTS_DEEP_STREAM_DEVICE",
    "TTS_DEEP_STREAM_DTYPE",
    "TTS_DEEP_STREAM_PACKET_TOKENS",
    "TTS_DEEP_STREAM_FIRST_PACKET_TOKENS",
    "TTS_DEEP_STREAM_DETERMINISTIC",
    "TTS_DEEP_STREAM_DETERMINISTIC_POLICY",
    "TTS_DEEP_STREAM_SEED",
    "TTS_DEEP_STREAM_MAX_STREAMS",
    "TTS_DEEP_STREAM_GPU_MEMORY_FRACTION",
    "TTS_DEEP_STREAM_STEP_BUDGET_MS",
    "TTS_DEEP_STREAM_QUEUE",
    "TTS_DEEP_STREAM_ADMIT_PER_STEP",
    "TTS_DEEP_STREAM_CLIENT_BUFFER_MS",
    "TTS_TALKER_BATCHED_ATTENTION",  # runtime/fusion.py: sdpa (default) or reduce for many-row talker steps
    "TTS_DEEP_STREAM_MAX_POSITIONS",
    "TTS_DEEP_STREAM_CPU_THREADS",
    "TTS_DEEP_STREAM_CPU_NICE",
    "TTS_DEEP_STREAM_MAX_TEXT_CHARS",
    "TTS_DEEP_STREAM_RUNAWAY_SCALE",
    "TTS_DEEP_STREAM_MAX_BUFFER_SECONDS",
    "TTS_DEEP_STREAM_METRICS",
    "TTS_CODEGEN_CUDAGRAPH_TALKER",
    "TTS_CODEGEN_CUDAGRAPH_CP",
    "TTS_DECODER_CUDAGRAPH",
    "TTS_CUDA_FUSION",  # runtime/fusion.py: 1 (all parts), 0 (off), or a comma list of parts (A/B, diagnosis)
    "TTS_CODE_DUMP_ENABLE",
    "TTS_CODE_DUMP_DIR",
    "TTS_REGRESSION_BASELINE",
    "TTS_GATE_SNR_BASELINE_DB",
    # read by the agent, not the engine, but legitimately TTS_-prefixed
    "TTS_FRAME_MS",
    "TTS_ENGINE_URL",
    "TTS_SPEAKER",
    "TTS_LANGUAGE",
    "TTS_TEXT_INPUT",
    # read by `python -m tts_engine serve` and the launch scripts (scripts/run_tts_server.sh, start_all.sh)
    "TTS_HOST",
    "TTS_PORT",
    "TTS_API_KEY",  # these three: tts_engine/server/config.py
    "TTS_STREAM_IDLE_TIMEOUT_S",
    "TTS_CLIENT_MAX_STREAMS",
    "TTS_STANDALONE",
    "TTS_CMD",
    "TTS_HEALTH_URL",
    "TTS_START_TIMEOUT",
)


@dataclass(frozen=True)
class EngineConfig:
    model_dir: str = ""
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | bfloat16 | float16 | float32
    packet_frames: int = 1  # codec frames per packet (80 ms each); 1 keeps a fresh stream's next packet one step away
    first_packet_frames: int = 1  # a smaller first packet cuts time-to-first-audio
    deterministic: bool = True
    deterministic_policy: str = "greedy"  # greedy | seeded
    seed: int = 42
    max_streams: int = 0  # stream slots (static cache rows); 0 = auto: 16 on a CPU, what fits the GPU on CUDA
    gpu_memory_fraction: float = 0.85  # auto slots: share of the GPU memory free at load the slots may take
    step_budget_ms: float = 60.0  # capacity = the most rows whose measured step fits this (a frame is 80 ms)
    queue_limit: int = 16  # streams that may wait for a running one to end; past it EngineBusyError (503)
    admit_per_step: int = 16  # most admissions (prompts + one batched prefill) between two steps
    client_buffer_ms: float = 0.0  # audio a listener holds before playing: slack that admissions may use
    # talker KV positions per slot: prompt + frames of one stream (768 ~ 55 s of speech); memory ~ slots x this
    max_positions: int = 768
    max_text_chars: int = 20_000  # one request, any length up to this: long text is cut into segments
    # the runaway guard: a stream's frame cap is its text's frame budget (text/speech_length.py) times this
    runaway_scale: float = 1.0
    max_buffered_seconds: float = 600.0  # unread audio per stream before a slow consumer's stream is cancelled
    metrics: bool = True
    # torch threads when the engine runs on a CPU (process-wide); 0 = torch's default. From the environment the
    # default is one core fewer than the process may use (common/cpu.py: affinity, a container's quota): the
    # worker's media path (WebRTC, VAD) needs a free core, or its 20 ms packets leave in bursts and listeners'
    # jitter buffers grow (docs/agent.md, "Latency at the browser").
    cpu_threads: int = 0
    cpu_nice: int = 0  # on a CPU, raise the engine thread's nice value by this (common/niceness.py); env default 10
    cudagraph_talker: bool = True  # only meaningful on CUDA
    cudagraph_predictor: bool = True
    cudagraph_decoder: bool = True
    code_dump_enable: bool = False
    code_dump_dir: str = "code_dumps"
    regression_baseline: str = ""
    gate_snr_baseline_db: float = 15.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> EngineConfig:
        """Read the TTS_* variables (docs/engine.md, "Configuration"); keyword overrides (e.g. CLI flags) win."""
        env = Env(environ)
        cfg = cls(
            model_dir=env.str("TTS_DEEP_STREAM_MODEL_DIR", ""),
            device=env.str("TTS_DEEP_STREAM_DEVICE", "auto"),
            dtype=env.choice("TTS_DEEP_STREAM_DTYPE", "auto", ("auto", "bfloat16", "float16", "float32")),
            packet_frames=env.int("TTS_DEEP_STREAM_PACKET_TOKENS", 1, lo=1, hi=MAX_PACKET_FRAMES),
            first_packet_frames=env.int("TTS_DEEP_STREAM_FIRST_PACKET_TOKENS", 1, lo=1, hi=MAX_PACKET_FRAMES),
            deterministic=env.bool("TTS_DEEP_STREAM_DETERMINISTIC", True),
            deterministic_policy=env.choice("TTS_DEEP_STREAM_DETERMINISTIC_POLICY", "greedy", ("greedy", "seeded")),
            seed=env.int("TTS_DEEP_STREAM_SEED", 42, lo=0, hi=2**62),
            max_streams=_slots(env.str("TTS_DEEP_STREAM_MAX_STREAMS", "auto")),
            gpu_memory_fraction=env.float("TTS_DEEP_STREAM_GPU_MEMORY_FRACTION", 0.85, lo=0.05, hi=0.98),
            step_budget_ms=env.float("TTS_DEEP_STREAM_STEP_BUDGET_MS", 60.0, lo=5.0, hi=1000.0),
            queue_limit=env.int("TTS_DEEP_STREAM_QUEUE", 16, lo=0, hi=100_000),
            admit_per_step=env.int("TTS_DEEP_STREAM_ADMIT_PER_STEP", 16, lo=1, hi=256),
            client_buffer_ms=env.float("TTS_DEEP_STREAM_CLIENT_BUFFER_MS", 0.0, lo=0.0, hi=5000.0),
            max_positions=env.int("TTS_DEEP_STREAM_MAX_POSITIONS", 768, lo=128, hi=32768),
            max_text_chars=env.int("TTS_DEEP_STREAM_MAX_TEXT_CHARS", 20_000, lo=1, hi=100_000),
            runaway_scale=env.float("TTS_DEEP_STREAM_RUNAWAY_SCALE", 1.0, lo=0.25, hi=20.0),
            max_buffered_seconds=env.float("TTS_DEEP_STREAM_MAX_BUFFER_SECONDS", 600.0, lo=1.0, hi=86_400.0),
            metrics=env.bool("TTS_DEEP_STREAM_METRICS", True),
            cpu_threads=env.int("TTS_DEEP_STREAM_CPU_THREADS", max(1, int(usable_cores()) - 1), lo=0, hi=1024),
            cpu_nice=env.int("TTS_DEEP_STREAM_CPU_NICE", 10, lo=0, hi=19),
            cudagraph_talker=env.bool("TTS_CODEGEN_CUDAGRAPH_TALKER", True),
            cudagraph_predictor=env.bool("TTS_CODEGEN_CUDAGRAPH_CP", True),
            cudagraph_decoder=env.bool("TTS_DECODER_CUDAGRAPH", True),
            code_dump_enable=env.bool("TTS_CODE_DUMP_ENABLE", False),
            code_dump_dir=env.str("TTS_CODE_DUMP_DIR", "code_dumps"),
            regression_baseline=env.str("TTS_REGRESSION_BASELINE", ""),
            gate_snr_baseline_db=env.float("TTS_GATE_SNR_BASELINE_DB", 15.0, lo=0.0, hi=200.0),
        )
        clean = {k: v for k, v in overrides.items() if v is not None}
        if clean:
            cfg = dataclasses.replace(cfg, **clean)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        dev = self.device
        if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise ConfigError(f"TTS_DEEP_STREAM_DEVICE={dev!r} is not allowed; allowed values: auto, cpu, cuda, cuda:N")
        if self.deterministic_policy not in ("greedy", "seeded"):
            raise ConfigError(
                f"TTS_DEEP_STREAM_DETERMINISTIC_POLICY={self.deterministic_policy!r} is not allowed; "
                "allowed values: greedy, seeded"
            )
        for name, value, lo in (
            ("TTS_DEEP_STREAM_PACKET_TOKENS", self.packet_frames, 1),
            ("TTS_DEEP_STREAM_FIRST_PACKET_TOKENS", self.first_packet_frames, 1),
            ("TTS_DEEP_STREAM_MAX_STREAMS", self.max_streams, 0),
            ("TTS_DEEP_STREAM_MAX_POSITIONS", self.max_positions, 128),
        ):
            if value < lo:
                raise ConfigError(f"{name}={value} is out of range (allowed: >= {lo})")
        if not self.runaway_scale > 0:
            raise ConfigError(f"TTS_DEEP_STREAM_RUNAWAY_SCALE={self.runaway_scale} is out of range (allowed: > 0)")


MAX_SLOTS = 1024


def _slots(raw: str) -> int:
    """TTS_DEEP_STREAM_MAX_STREAMS: `auto` (0) or a slot count 1..1024."""
    value = raw.strip().lower()
    if value in ("auto", "0", ""):
        return 0
    try:
        slots = int(value)
    except ValueError:
        slots = -1
    if not 1 <= slots <= MAX_SLOTS:
        raise ConfigError(f"TTS_DEEP_STREAM_MAX_STREAMS={raw!r} is not allowed; give auto or an integer 1..{MAX_SLOTS}")
    return slots


def unknown_tts_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """TTS_* variables that nothing reads: usually a typo worth a warning at start-up."""
    env = os.environ if environ is None else environ
    return sorted(k for k in env if k.startswith("TTS_") and k not in KNOWN_TTS_VARIABLES)
