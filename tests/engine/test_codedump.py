"""TTS_CODE_DUMP_ENABLE: a finished stream's codes land on disk and decode back to its audio."""

from __future__ import annotations

import numpy as np

from tts_engine.replay import decode_codes
from tts_engine.runtime.codedump import load_code_dump

from .helpers import collect


async def test_code_dump_round_trip(make_engine, tmp_path) -> None:
    engine = make_engine(code_dump_enable=True, code_dump_dir=str(tmp_path / "dumps"))
    handle = engine.stream("Hello world.", "serena", max_frames=5, request_id="turn/1")
    pcm, _ = await collect(handle)
    engine.flush_code_dumps()
    codes, meta = load_code_dump(tmp_path / "dumps" / "turn_1.npz")
    assert np.array_equal(codes, handle.codes()) and codes.shape == (5, 16)
    assert meta["speaker"] == "serena" and meta["end_reason"] == "cap" and meta["text"] == "Hello world."
    assert decode_codes(engine.model.codec, codes, "stream").tobytes() == pcm.tobytes()
    cancelled = engine.stream("Hello world.", "serena", max_frames=300, request_id="turn-2")
    await cancelled.__anext__()
    cancelled.cancel()
    engine.flush_code_dumps()
    assert not (tmp_path / "dumps" / "turn-2.npz").exists(), "only completed streams are dumped"
