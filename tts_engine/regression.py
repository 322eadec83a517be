"""Regression suite and release gates: `python -m tts_engine regression --mode fast|full` (docs/engine.md).

Runs a fixed set of cases through the real engine (in process, warmed up), writes per-case WAVs and code
dumps plus `summary.json` = {"pass", "gates": {name: {"pass", "value", "threshold", ...}}, "device",
"config", "cases", ...} into --out, and exits 1 when any gate fails (2 on a configuration error).

Gates (value vs threshold):
- determinism: distinct PCM hashes over N identical runs per case (fast 3, full 10); must be 1.
- stream_vs_offline: (case, packet layout) pairs whose streamed bytes differ from `synthesize`; must be 0.
- duration: largest |stream - offline| length in ms; must be 0 (the decode is exact, not approximate).
- decode_exactness: largest |engine PCM - single-pass decode of the same codes| in int16 LSB; <= 2
  (the one-frame incremental decoder vs `CodecDecoder.forward`, fp32 rounding only).
- repeat: longest span (frames) of a back-to-back repeated n-gram of whole 16-code frames (n <= 16);
  must stay under 25 frames (2 s): a model stuck in a loop repeats exact frames, speech does not.
- bad_audio: outputs that are empty, contain non-finite samples, are silent throughout (peak <= 16 LSB)
  or clipped throughout (>= 50 % of samples at full scale); must be 0.
- runaway: runs that ended other than by EOS or by the frame cap, or ran past the cap; must be 0.
- snr_vs_baseline: min SNR (dB) of each case against the golden run (TTS_REGRESSION_BASELINE or
  --baseline: a previous summary.json of the same config); >= TTS_GATE_SNR_BASELINE_DB (15). Skipped
  when no baseline is configured. Identical audio reports 200 dB.
- ttfa: P95 of TTFA (stream requested -> first packet on the host) over the determinism runs, against
  the device's target (H100/H200: 30 ms, other CUDA: 100 ms; --ttfa-target-ms overrides). Skipped on CPU.
Random-weight checkpoints rarely emit EOS: pass --max-frames to fix the length (the cap then ends runs).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from common.audio_format import SAMPLE_RATE
from common.env import load_dotenv
from common.percentiles import percentiles
from tts_engine.config import EngineConfig
from tts_engine.engine import Engine
from tts_engine.errors import CheckpointError, ConfigError
from tts_engine.replay import decode_codes
from tts_engine.runtime.codedump import write_code_dump
from tts_engine.runtime.wav import read_wav, wav_bytes

log = logging.getLogger("tts_engine.regression")

IDENTICAL_SNR_DB = 200.0
REPEAT_MAX_PERIOD = 16
REPEAT_LIMIT_FRAMES = 25
DECODE_EXACTNESS_LSB = 2
SILENT_PEAK = 16
TTFA_TARGETS_MS = {"H100": 30.0, "H200": 30.0}
TTFA_DEFAULT_CUDA_MS = 100.0

CASES: list[dict[str, str]] = [
    {"name": "en_short", "text": "Hello! How can I help you today?", "speaker": "serena", "language": "english"},
    {"name": "zh_short", "text": "你好，今天天气很好。", "speaker": "vivian", "language": "chinese"},
    {"name": "auto_mixed", "text": "The meeting starts at 10:30, 请准时参加。", "speaker": "ryan", "language": "auto"},
    {
        "name": "en_long",
        "text": "We stream audio as soon as it exists, one small packet at a time, so the "
        "listener hears the first syllable while the rest of the sentence is still being generated.",
        "speaker": "aiden",
        "language": "english",
    },
    {
        "name": "zh_dialect_speaker",
        "text": "这个地方的小吃特别好吃，你一定要尝一尝。",
        "speaker": "dylan",
        "language": "auto",
    },
    {"name": "ja", "text": "こんにちは、お元気ですか。", "speaker": "ono_anna", "language": "japanese"},
    {"name": "ko", "text": "안녕하세요, 만나서 반갑습니다.", "speaker": "sohee", "language": "korean"},
    {"name": "numbers", "text": "Call 555-0134 before 6 pm; the fee is $42.50.", "speaker": "eric", "language": "auto"},
]


class Mode(TypedDict):
    cases: int  # the first this many of CASES
    runs: int  # per case and layout
    layouts: list[tuple[int, int]]


MODES: dict[str, Mode] = {
    "fast": {"cases": 3, "runs": 3, "layouts": [(1, 1), (2, 3)]},
    "full": {"cases": len(CASES), "runs": 10, "layouts": [(1, 1), (2, 3), (4, 8)]},
}


# ---- measurements (pure functions) -------------------------------------------------------------
def sha256(pcm: np.ndarray) -> str:
    return hashlib.sha256(pcm.tobytes()).hexdigest()


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """SNR of `test` against `reference` (int16 arrays); a length mismatch counts the missing part as error."""
    n = max(len(reference), len(test))
    ref = np.zeros(n, dtype=np.float64)
    out = np.zeros(n, dtype=np.float64)
    ref[: len(reference)] = reference
    out[: len(test)] = test
    noise = float(np.sum((ref - out) ** 2))
    signal = float(np.sum(ref**2))
    if noise == 0.0:
        return IDENTICAL_SNR_DB
    if signal == 0.0:
        return -IDENTICAL_SNR_DB
    return round(min(IDENTICAL_SNR_DB, 10.0 * np.log10(signal / noise)), 3)


def longest_loop(codes: np.ndarray, max_period: int = REPEAT_MAX_PERIOD) -> int:
    """Frames covered by the longest back-to-back repetition of an n-gram of whole frames (n <= max_period);
    0 when no n-gram repeats even once."""
    frames = [tuple(row) for row in np.asarray(codes).tolist()]
    best = 0
    for period in range(1, max_period + 1):
        run = 0
        for t in range(period, len(frames)):
            run = run + 1 if frames[t] == frames[t - period] else 0
            if run >= period:  # at least one full repeat of the n-gram
                best = max(best, run + period)
    return best


def audio_problems(pcm: np.ndarray, nonfinite: int) -> list[str]:
    problems = []
    if len(pcm) == 0:
        return ["empty"]
    if nonfinite:
        problems.append(f"{nonfinite} non-finite samples")
    if int(np.abs(pcm.astype(np.int32)).max()) <= SILENT_PEAK:
        problems.append("silent throughout")
    if float(np.mean(np.abs(pcm.astype(np.int32)) >= 32767)) >= 0.5:
        problems.append("clipped throughout")
    return problems


def ttfa_target_ms(device_name: str, override: float | None) -> float | None:
    if override is not None:
        return override
    if device_name == "cpu":
        return None
    for key, value in TTFA_TARGETS_MS.items():
        if key in device_name:
            return value
    return TTFA_DEFAULT_CUDA_MS


def gate(passed: bool, value: Any, threshold: Any, **extra: Any) -> dict[str, Any]:
    return {"pass": bool(passed), "value": value, "threshold": threshold, **extra}


def skipped(reason: str, threshold: Any = None) -> dict[str, Any]:
    return {"pass": True, "skipped": True, "reason": reason, "value": None, "threshold": threshold}


# ---- running the engine ---------------------------------------------------------------------------
@dataclasses.dataclass
class Run:
    pcm: np.ndarray
    codes: np.ndarray
    metrics: dict[str, Any]


async def run_once(engine: Any, case: dict[str, str], layout: tuple[int, int] | None, max_frames: int | None) -> Run:
    first, size = layout if layout is not None else (None, None)
    handle = engine.stream(
        case["text"],
        case["speaker"],
        case["language"],
        first_packet_frames=first,
        packet_frames=size,
        max_frames=max_frames,
    )
    parts = [packet.pcm async for packet in handle]
    pcm = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
    return Run(pcm=pcm, codes=handle.codes(), metrics=handle.metrics.to_dict())


async def run_cases(
    engine: Any, cases: list[dict[str, str]], runs: int, layouts: list[tuple[int, int]], max_frames: int | None
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for case in cases:
        offline = await engine.synthesize(case["text"], case["speaker"], case["language"], max_frames=max_frames)
        repeated = [await run_once(engine, case, None, max_frames) for _ in range(runs)]
        variants = {layout: await run_once(engine, case, layout, max_frames) for layout in layouts}
        results[case["name"]] = {"offline": offline, "runs": repeated, "variants": variants}
        log.info(
            "case %s: %d frames, %s", case["name"], repeated[0].metrics["frames"], repeated[0].metrics["end_reason"]
        )
    return results


# ---- gates ------------------------------------------------------------------------------------------
def evaluate(
    results: dict[str, dict[str, Any]],
    decoder: Any,
    baseline: dict[str, np.ndarray] | None,
    baseline_reason: str,
    snr_threshold: float,
    ttfa_target: float | None,
) -> dict[str, dict[str, Any]]:

    gates: dict[str, dict[str, Any]] = {}
    unique = {name: len({sha256(r.pcm) for r in res["runs"]}) for name, res in results.items()}
    gates["determinism"] = gate(max(unique.values()) == 1, max(unique.values()), 1, per_case=unique)

    mismatches, durations = [], []
    for name, res in results.items():
        offline = res["offline"]
        for layout, run in [(None, res["runs"][0]), *res["variants"].items()]:
            label = f"{name}@{'default' if layout is None else f'{layout[0]}+{layout[1]}'}"
            if run.pcm.tobytes() != offline.tobytes():
                mismatches.append(label)
            durations.append(abs(len(run.pcm) - len(offline)) * 1000.0 / SAMPLE_RATE)
    gates["stream_vs_offline"] = gate(not mismatches, len(mismatches), 0, mismatched=mismatches)
    gates["duration"] = gate(max(durations) <= 0.0, round(max(durations), 3), 0.0, unit="ms")

    exactness = {}
    for name, res in results.items():
        run = res["runs"][0]
        single = decode_codes(decoder, run.codes, "single")
        same_len = len(single) == len(run.pcm)
        exactness[name] = (
            int(np.abs(single.astype(np.int32) - run.pcm).max())
            if same_len and len(single)
            else (0 if same_len else 32767)
        )
    worst = max(exactness.values())
    gates["decode_exactness"] = gate(
        worst <= DECODE_EXACTNESS_LSB, worst, DECODE_EXACTNESS_LSB, unit="lsb", per_case=exactness
    )

    loops = {name: longest_loop(res["runs"][0].codes) for name, res in results.items()}
    worst_loop = max(loops.values())
    gates["repeat"] = gate(
        worst_loop < REPEAT_LIMIT_FRAMES, worst_loop, REPEAT_LIMIT_FRAMES, unit="frames", per_case=loops
    )

    bad = {}
    for name, res in results.items():
        for i, run in enumerate([*res["runs"], *res["variants"].values()]):
            problems = audio_problems(run.pcm, run.metrics["nonfinite_samples"])
            if problems:
                bad[f"{name}#{i}"] = problems
    gates["bad_audio"] = gate(not bad, len(bad), 0, problems=bad)

    runaway, cap_hits = [], 0
    for name, res in results.items():
        for i, run in enumerate([*res["runs"], *res["variants"].values()]):
            m = run.metrics
            cap_hits += m["end_reason"] == "cap"
            if m["end_reason"] not in ("eos", "cap") or m["frames"] > m["max_frames"]:
                runaway.append(f"{name}#{i}: {m['end_reason']} after {m['frames']} frames (cap {m['max_frames']})")
    gates["runaway"] = gate(not runaway, len(runaway), 0, violations=runaway, cap_hits=cap_hits)

    if baseline is None:
        gates["snr_vs_baseline"] = skipped(baseline_reason, snr_threshold)
    else:
        per_case: dict[str, float | None] = {}
        for name, res in results.items():
            ref = baseline.get(name)
            per_case[name] = None if ref is None else snr_db(ref, res["runs"][0].pcm)
        missing = [name for name, value in per_case.items() if value is None]
        worst_snr = min((v for v in per_case.values() if v is not None), default=-IDENTICAL_SNR_DB)
        gates["snr_vs_baseline"] = gate(
            not missing and worst_snr >= snr_threshold,
            worst_snr,
            snr_threshold,
            unit="dB",
            per_case=per_case,
            missing_in_baseline=missing,
        )

    ttfas = [r.metrics["ttfa_ms"] for res in results.values() for r in res["runs"] if r.metrics["ttfa_ms"] is not None]
    if ttfa_target is None:
        gates["ttfa"] = skipped("CPU run: TTFA has no target on CPU")
    else:
        spread = percentiles(ttfas, digits=2)
        p95 = spread["p95"]
        gates["ttfa"] = gate(
            p95 is not None and p95 <= ttfa_target,
            p95,
            ttfa_target,
            unit="ms",
            p50=spread["p50"],
            samples=len(ttfas),
        )
    return gates


def load_baseline(path: str) -> tuple[dict[str, np.ndarray] | None, str]:
    """Case name -> PCM of a previous run (its summary.json and the WAVs beside it)."""

    if not path:
        return None, "no baseline configured (set TTS_REGRESSION_BASELINE or --baseline to a golden summary.json)"
    summary_path = Path(path)
    if summary_path.is_dir():
        summary_path = summary_path / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
        pcm = {}
        for case in summary["cases"]:
            pcm[case["name"]] = read_wav(summary_path.parent / case["wav"])[0]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"baseline {summary_path} is not a usable regression summary: {exc}") from None
    return pcm, ""


# ---- the command (its arguments: tts_engine/regression_cli.py) -------------------------------------
def run(args: argparse.Namespace) -> int:

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    mode = MODES[args.mode]
    out = Path(args.out)
    try:
        load_dotenv(args.env_file)
        config = EngineConfig.from_env(model_dir=args.model, device=args.device, dtype=args.dtype)
        baseline, baseline_reason = load_baseline(args.baseline or config.regression_baseline)
        if args.runs is not None and args.runs < 2:
            raise ConfigError(f"--runs={args.runs} is not allowed; determinism needs >= 2 runs")
        t0 = time.perf_counter()
        engine = Engine.load(config.model_dir or None, config)
    except (ConfigError, CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        cases = list(CASES[: mode["cases"]])
        results = asyncio.run(run_cases(engine, cases, args.runs or mode["runs"], mode["layouts"], args.max_frames))
        device_name = engine.stats()["device_name"]
        gates = evaluate(
            results,
            engine.model.codec,
            baseline,
            baseline_reason,
            config.gate_snr_baseline_db,
            ttfa_target_ms(device_name, args.ttfa_target_ms),
        )
    finally:
        engine.close()
    out.mkdir(parents=True, exist_ok=True)
    case_rows = []
    for case in cases:
        res = results[case["name"]]
        first: Run = res["runs"][0]
        wav_name, codes_name = f"{case['name']}.wav", f"{case['name']}.codes.npz"
        (out / wav_name).write_bytes(wav_bytes(first.pcm))
        write_code_dump(out / codes_name, first.codes, {**case, "end_reason": first.metrics["end_reason"]})
        ttfas = [r.metrics["ttfa_ms"] for r in res["runs"]]
        rtfs = [r.metrics["rtf"] for r in res["runs"] if r.metrics["rtf"] is not None]
        case_rows.append(
            {
                **case,
                "wav": wav_name,
                "codes": codes_name,
                "sha256": sha256(first.pcm),
                "frames": first.metrics["frames"],
                "samples": int(len(first.pcm)),
                "end_reason": first.metrics["end_reason"],
                "ttfa_ms_p50": round(float(np.median(ttfas)), 2),
                "rtf_p50": round(float(np.median(rtfs)), 4) if rtfs else None,
            }
        )
    summary = {
        "pass": all(g["pass"] for g in gates.values()),
        "gates": gates,
        "device": device_name,
        "config": {
            **dataclasses.asdict(config),
            "mode": args.mode,
            "max_frames": args.max_frames,
            "runs": args.runs or mode["runs"],
            "layouts": mode["layouts"],
        },
        "cases": case_rows,
        "elapsed_s": round(time.perf_counter() - t0, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    for name, g in gates.items():
        state = "SKIP" if g.get("skipped") else ("PASS" if g["pass"] else "FAIL")
        print(f"{state:4}  {name:18} value={g['value']} threshold={g['threshold']}")
    print(f"{'PASS' if summary['pass'] else 'FAIL'}: {out / 'summary.json'}")
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    from tts_engine.__main__ import main

    sys.exit(main(["regression", *sys.argv[1:]]))
