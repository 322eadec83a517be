"""On a CUDA GPU: graphed and eager engines give bit-identical codes and PCM; streaming equals offline.

Marker `gpu`: skipped cleanly without CUDA (tests/conftest.py). Uses the tiny checkpoint by default; set
TTS_GPU_TEST_MODEL_DIR to run the same checks on a full-size checkpoint (e.g. the bench's 0.6b).
Every engine here is built over one loaded model, so graphs on and off run the same compiled (fused) functions:
the comparison is graph vs eager. Two separate compiles of the fused model may pick different kernels for a
multi-row batch (Inductor's choice for a dynamic batch size) and then differ in the last bit. Within one
model, the engine's compile pass (runtime/step_graphs.compile_step_shapes) makes every torch.compile entry before
any capture, so a graph and a later eager step of the same shape run the same entry's kernels
(tests/model/test_compile_entries.py shows the entry selection on the CPU).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

TEXT = "Graphs and eager must agree, sample for sample."
FRAMES = 40


def _config(model_dir: str, **overrides: Any) -> Any:
    from tts_engine.config import EngineConfig

    base = dataclasses.replace(EngineConfig.from_env({}), model_dir=model_dir, device="cuda", max_streams=4)
    return dataclasses.replace(base, **overrides)


@pytest.fixture(scope="module")
def model_dir(tiny_checkpoint: Path) -> str:
    return os.environ.get("TTS_GPU_TEST_MODEL_DIR") or str(tiny_checkpoint)


@pytest.fixture(scope="module")
def model(model_dir: str) -> Any:
    from tts_engine.model.loader import load_model

    return load_model(model_dir, device="cuda")


def _engine(model: Any, config: Any) -> Any:
    from tts_engine.engine import Engine

    engine = Engine(model, config)
    engine.warmup()
    return engine


@pytest.fixture(scope="module")
def engines(model_dir: str, model: Any) -> Iterator[dict[str, Any]]:
    made = {
        "graph": _engine(model, _config(model_dir)),
        "eager": _engine(model, _config(model_dir, cudagraph_talker=False, cudagraph_predictor=False,
                                        cudagraph_decoder=False)),
    }
    yield made
    for engine in made.values():
        engine.close()


async def _run(engine: Any, text: str = TEXT, **options: Any) -> tuple[np.ndarray, np.ndarray]:
    handle = engine.stream(text, engine.speakers[0], "auto", max_frames=FRAMES, **options)
    parts = [packet.pcm async for packet in handle]
    return np.concatenate(parts), handle.codes()


async def test_graph_and_eager_give_identical_pcm_and_codes(engines: dict[str, Any]) -> None:
    graph_pcm, graph_codes = await _run(engines["graph"])
    eager_pcm, eager_codes = await _run(engines["eager"])
    assert graph_pcm.shape == eager_pcm.shape and graph_pcm.size > 0
    assert np.array_equal(graph_codes, eager_codes)
    assert graph_pcm.tobytes() == eager_pcm.tobytes()
    graphs = engines["graph"].stats()["cuda_graphs"]
    assert graphs["graph_steps"] > 0 and graphs["eager_steps"] == 0, graphs
    eager = engines["eager"].stats()["cuda_graphs"]
    assert eager["graph_steps"] == 0 and eager["eager_steps"] > 0
    assert any("TTS_DECODER_CUDAGRAPH=0" in reason for reason in eager["fallback_reasons"])


async def test_stream_equals_offline_on_gpu(engines: dict[str, Any]) -> None:
    engine = engines["graph"]
    streamed, _ = await _run(engine, first_packet_frames=1, packet_frames=1)
    offline = await engine.synthesize(TEXT, engine.speakers[0], "auto", max_frames=FRAMES, packet_frames=8)
    assert streamed.tobytes() == offline.tobytes()


async def _run_together(engine: Any, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Start all streams while the worker is held, so they are admitted in the same pass (same row history)."""
    held = engine.scheduler.call(lambda: time.sleep(0.3))
    tasks = [asyncio.ensure_future(_run(engine, t)) for t in texts]
    await asyncio.sleep(0)
    results = await asyncio.gather(*tasks)
    held.result()
    return results


async def test_concurrent_streams_graph_equals_eager(engines: dict[str, Any]) -> None:
    """Three streams share a 4-row bucket (the 4th row is a free slot): graphed == eager, stream by stream."""
    texts = [TEXT, "A second, different sentence.", "And a third one, to fill three rows."]
    graphed = await _run_together(engines["graph"], texts)
    eager = await _run_together(engines["eager"], texts)
    for index, ((g_pcm, g_codes), (e_pcm, e_codes)) in enumerate(zip(graphed, eager, strict=True)):
        assert g_pcm.size > 0
        differs = [f for f in range(min(len(g_codes), len(e_codes))) if not np.array_equal(g_codes[f], e_codes[f])]
        assert np.array_equal(g_codes, e_codes), (
            f"stream {index}: {len(g_codes)} graphed vs {len(e_codes)} eager frames; first differing frame "
            f"{differs[0] if differs else None}"
        )
        assert g_pcm.tobytes() == e_pcm.tobytes()
    for name, engine in engines.items():  # nothing compiled after load: the graphs froze the entries eager runs
        assert engine.stats()["cuda_graphs"]["compiles_since_load"] == 0, (name, engine.stats()["cuda_graphs"])


@pytest.mark.parametrize("talker,predictor", [(True, False), (False, True)])
async def test_half_graphed_codegen_matches_eager(model_dir: str, model: Any, engines: dict[str, Any], talker: bool,
                                                  predictor: bool) -> None:
    engine = _engine(model, _config(model_dir, cudagraph_talker=talker, cudagraph_predictor=predictor))
    try:
        pcm, codes = await _run(engine)
        stats = engine.stats()["cuda_graphs"]
    finally:
        engine.close()
    eager_pcm, eager_codes = await _run(engines["eager"])
    assert np.array_equal(codes, eager_codes)
    assert pcm.tobytes() == eager_pcm.tobytes()
    assert stats["graph_steps"] > 0
    off = "TTS_CODEGEN_CUDAGRAPH_CP=0" if talker else "TTS_CODEGEN_CUDAGRAPH_TALKER=0"
    assert any(off in reason for reason in stats["fallback_reasons"]), stats


async def test_seeded_sampling_graph_matches_eager(model_dir: str, model: Any) -> None:
    results = []
    for graphs in (True, False):
        engine = _engine(model, _config(model_dir, deterministic_policy="seeded", cudagraph_talker=graphs,
                                        cudagraph_predictor=graphs, cudagraph_decoder=graphs))
        try:
            results.append(await _run(engine, seed=1234))
            if graphs:
                assert engine.stats()["cuda_graphs"]["eager_steps"] == 0
        finally:
            engine.close()
    (g_pcm, g_codes), (e_pcm, e_codes) = results
    assert np.array_equal(g_codes, e_codes)
    assert g_pcm.tobytes() == e_pcm.tobytes()


def test_captured_call_refuses_a_shape_change() -> None:
    import torch

    from tts_engine.runtime.cuda_graphs import CapturedCall, GraphShapeError

    x = torch.randn(4, 8, device="cuda")
    call = CapturedCall(lambda t: t * 2 + 1, (x,), name="affine")
    y = torch.randn(4, 8, device="cuda")
    assert torch.equal(call(y), y * 2 + 1)
    with pytest.raises(GraphShapeError, match="argument 0"):
        call(torch.randn(5, 8, device="cuda"))


async def test_compaction_moves_keep_graph_equal_to_eager(engines: dict[str, Any]) -> None:
    """A short stream ends first and the highest running row moves into its slot (bucket 4 -> 2): the moved
    stream's codes and PCM stay graph == eager."""

    async def run_mixed(engine: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        held = engine.scheduler.call(lambda: time.sleep(0.3))
        frames = [8, FRAMES, FRAMES]
        texts = [TEXT, "A second, different sentence.", "And a third one, to fill three rows."]
        tasks = [asyncio.ensure_future(_frames(engine, t, n)) for t, n in zip(texts, frames, strict=True)]
        await asyncio.sleep(0)
        results = await asyncio.gather(*tasks)
        held.result()
        return results

    async def _frames(engine: Any, text: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        handle = engine.stream(text, engine.speakers[0], "auto", max_frames=n)
        parts = [packet.pcm async for packet in handle]
        return np.concatenate(parts), handle.codes()

    moves = {name: engine.stats()["slot_moves"] for name, engine in engines.items()}
    graphed = await run_mixed(engines["graph"])
    eager = await run_mixed(engines["eager"])
    for name, engine in engines.items():
        assert engine.stats()["slot_moves"] > moves[name], name
    for (g_pcm, g_codes), (e_pcm, e_codes) in zip(graphed, eager, strict=True):
        assert np.array_equal(g_codes, e_codes)
        assert g_pcm.tobytes() == e_pcm.tobytes()


async def _tokens(engine: Any, text: str, trickle_s: float) -> tuple[np.ndarray, np.ndarray]:
    """A streaming-text (layout tokens) stream, its text pushed a word at a time (it parks while its text runs dry)."""
    stream = engine.open_text_stream(engine.speakers[0], "auto", layout="tokens", max_frames=FRAMES)

    async def feed() -> None:
        for i, word in enumerate(text.split()):
            stream.push(word if i == 0 else " " + word)
            await asyncio.sleep(trickle_s)
        stream.close()

    feeder = asyncio.ensure_future(feed())
    parts = [packet.pcm async for packet in stream]
    await feeder
    return np.concatenate(parts), stream.codes()


async def test_streaming_text_graph_equals_eager(engines: dict[str, Any]) -> None:
    """The tokens layout on the GPU: one stream whose text trickles in (parked and back, its rows written in batches)
    and three at once (a 4-row bucket), graphed == eager."""
    texts = [TEXT, "A second, different sentence.", "And a third one, to fill three rows."]
    alone = {name: await _tokens(engine, TEXT, 0.03) for name, engine in engines.items()}  # (parks: timing)
    assert np.array_equal(alone["graph"][1], alone["eager"][1]) and len(alone["graph"][1]) > 0
    assert alone["graph"][0].tobytes() == alone["eager"][0].tobytes()

    async def together(engine: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        held = engine.scheduler.call(lambda: time.sleep(0.3))  # all three admitted in one pass
        tasks = [asyncio.ensure_future(_tokens(engine, t, 0.0)) for t in texts]
        await asyncio.sleep(0)
        results = await asyncio.gather(*tasks)
        held.result()
        return results

    graphed, eager = await together(engines["graph"]), await together(engines["eager"])
    for (g_pcm, g_codes), (e_pcm, e_codes) in zip(graphed, eager, strict=True):
        assert np.array_equal(g_codes, e_codes)
        assert g_pcm.tobytes() == e_pcm.tobytes()


def test_capacity_comes_from_measured_step_costs(engines: dict[str, Any]) -> None:
    from tts_engine.runtime.admission import capacity_from_costs

    for engine in engines.values():
        stats = engine.stats()
        costs = {int(k): v for k, v in stats["step_costs_ms"].items()}
        assert sorted(costs) == engine.scheduler.stepper.graphs.buckets and all(v > 0 for v in costs.values())
        assert stats["admit_cost_ms"] > 0
        assert engine.capacity() == capacity_from_costs(costs, stats["step_budget_ms"], engine.slots)
