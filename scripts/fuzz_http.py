"""Fuzz the HTTP surfaces (TTS server, token server) with schemathesis against the OpenAPI documents they publish.

Usage: .venv/bin/python scripts/fuzz_http.py [--requests N] [--surface tts|token|both] [--workers W] [--seed S]
                                           [--model DIR] [--out summary.json]

Starts each server as a real process on a loopback port (`python -m tts_engine serve` on a tiny random checkpoint,
CPU, with an API key; `python -m token_server --dev`), loads `GET /openapi.json` with schemathesis, generates at least
N requests per surface (schema-valid and schema-violating cases of every operation, plus raw hostile bodies with odd
content types, plus on the TTS server requests of every operation with no key or a wrong one, which must be 401 in
the route's error shape, /healthz excepted), and sends them from W threads at once (the TTS server's per-client
limit is the default, so a client past its share gets the documented 429). A /tts/stream answer is mostly read to
its first chunk and then dropped (a client that hangs up), sometimes read to the end. Each answer must be a documented
status with a documented content type, errors must be the route's JSON shape naming a field (OpenAI's where the
document says so), schema-violating input must get a 4xx, and no answer may be a 500 or take longer than the timeout
(a hang). Afterwards each server must still serve,
the TTS server's counters (open/running streams, HTTP streams in flight) must be back to 0, and each server's RSS
at the end must be within 10 % of its RSS after the first 10 % of requests. Prints a JSON summary; exit 1 on any
failure. The TTS server runs with TTS_DEEP_STREAM_MAX_POSITIONS=128 and --max-text-chars 48 so that a valid request
costs at most ~100 frames on a CPU (the input space is the same; only the audio is shorter).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TIMEOUT_S = 60.0
STREAMED = ("/tts/stream", "/v1/audio/speech")  # answers read to the first chunk, then dropped (mostly)
FIELD_NAMES = ["text", "speaker", "language", "instruct", "seed", "max_frames", "packet_frames", "model", "input",
               "voice", "response_format", "stream_format", "speed", "room", "identity", "name", "room_name",
               "participant_identity", "participant_name", "participant_metadata", "participant_attributes",
               "room_config"]
API_KEY = "fuzz-key-0123456789"  # the TTS server runs with this TTS_API_KEY
RAW_TYPES = ["application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
             "application/json; charset=latin-1", ""]


class Served:
    def __init__(self, name: str, cmd: list[str], env: dict[str, str], pattern: str, log: Path,
                 headers: dict[str, str] | None = None) -> None:
        self.name, self.log = name, log
        self.headers = headers or {}  # sent with every request of the fuzz (the API key)
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        deadline, lines = time.monotonic() + 180, []
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{name} exited before listening:\n" + "".join(lines[-20:]))
            lines.append(line)
            if found := re.search(pattern, line):
                self.base = f"http://127.0.0.1:{found.group(1)}"
                break
        else:
            raise RuntimeError(f"{name} did not listen within 180 s")
        self._drain = threading.Thread(target=self._copy, args=(lines,), daemon=True)
        self._drain.start()

    def _copy(self, head: list[str]) -> None:
        with self.log.open("w") as fh:
            fh.writelines(head)
            for line in self.proc.stdout:
                fh.write(line)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def generate(base: str, budget: int, seed: int, headers: dict[str, str]) -> list[tuple[str, Any]]:
    """At least `budget` (mode, case) pairs from the published document; schema-valid, schema-violating, raw, and
    (on a server with a key) every operation without it or with a wrong one."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    from schemathesis.generation import GenerationMode

    keyed = bool(headers)
    schema = schemathesis.openapi.from_url(base + "/openapi.json", headers=dict(headers))  # it adds to the dict
    operations = [result.ok() for result in schema.get_all_operations()]
    posts = [(op.method.upper(), op.path) for op in operations if op.method.lower() == "post"]
    # raw hostile bodies: bytes, text, JSON at the parser's limits, JSON objects of known field names with values
    # of any type (NaN, huge numbers, lone surrogates "\ud800" included)
    any_text = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=40)
    value = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_text,
                      st.lists(st.integers(), max_size=3), st.dictionaries(any_text, st.integers(), max_size=2))
    objects = st.dictionaries(st.sampled_from(FIELD_NAMES), value, max_size=5).map(
        lambda d: json.dumps(d).encode())
    bodies = st.one_of(st.binary(max_size=512), st.text(max_size=256).map(str.encode), objects,
                       st.integers(1, 200_000).map(lambda n: b"[" * n),
                       st.integers(4_000, 6_000).map(lambda n: b'{"seed": 1' + b"0" * n + b"}"))
    raw = st.tuples(st.sampled_from(posts), st.sampled_from(RAW_TYPES), bodies)
    def draw(strategy: Any, count: int, seed_value: int) -> list[Any]:
        found: list[Any] = []

        @hseed(seed_value)
        @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def collect(value: Any) -> None:
            found.append(value)

        try:
            collect()
        except Exception:  # noqa: BLE001 - e.g. nothing to violate in a parameterless GET
            pass
        return found

    cases: list[tuple[str, Any]] = []
    rounds = 0
    while len(cases) < budget:
        run_seed = seed * 1_000_003 + rounds
        for op in operations:
            body_op = op.method.lower() == "post"
            # string path parameters and headers have no schema-violating values: negatives only for bodies
            for mode in GenerationMode if body_op else [GenerationMode.POSITIVE]:
                # valid speech requests cost real synthesis: fewer of them per round
                if body_op and mode is GenerationMode.POSITIVE:
                    count = min(25, max(2, budget // 50))
                else:
                    count = min(100, max(20, budget // 10))
                cases += [(mode.value, case) for case in draw(op.as_strategy(generation_mode=mode), count, run_seed)]
        cases += [("raw", item) for item in draw(raw, min(100, max(20, budget // 10)), run_seed)]
        if keyed:  # no key, a wrong one, another scheme: 401 everywhere but /healthz
            keys = st.sampled_from([{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {API_KEY}"},
                                    {"Authorization": "Bearer"}, {"Authorization": f"bearer {API_KEY}x"}])
            auth = st.tuples(st.sampled_from([(op.method.upper(), op.path) for op in operations]), keys)
            cases += [("auth", item) for item in draw(auth, min(100, max(10, budget // 20)), run_seed)]
        rounds += 1
    return cases


class Fuzzer:
    def __init__(self, served: Served, expected_statuses: dict[tuple[str, str], set[str]],
                 openai_shaped: set[str]) -> None:
        self.served = served
        self.expected = expected_statuses
        self.openai_shaped = openai_shaped  # paths whose errors the document gives in OpenAI's shape
        self.local = threading.local()
        self.lock = threading.Lock()
        self.statuses: Counter[str] = Counter()
        self.failures: list[dict[str, Any]] = []
        self.counts: Counter[str] = Counter()
        self.hangs = self.server_errors = self.done = self.warm_at = self.rss_after_warmup = 0

    def session(self) -> requests.Session:
        if not hasattr(self.local, "session"):
            self.local.session = requests.Session()
        return self.local.session

    def send(self, item: tuple[str, Any]) -> None:
        try:
            self._send(item)
        except BaseException as exc:  # noqa: BLE001 - a harness fault is a failure to report, not a crash
            with self.lock:
                self.done += 1
                self.failures.append({"mode": item[0], "request": "?", "status": "harness",
                                      "problem": f"{type(exc).__name__}: {exc}"[:600], "body": ""})
        if self.done == self.warm_at:  # the RSS baseline: after the first 10 % of the requests
            self.rss_after_warmup = self.served.rss_kib()

    def _send(self, item: tuple[str, Any]) -> None:
        from schemathesis import checks

        mode, case = item
        problem: str | None = None
        status = "-"
        try:
            if mode == "auth":
                (method, path), headers = case
                label = f"{method} {path}"
                resp = self.session().request(method, self.served.base + path.replace("{request_id}", "x"),
                                              headers=headers, json={}, timeout=(5, TIMEOUT_S))
                if path == "/healthz":
                    problem = None if resp.status_code == 200 else f"/healthz needs no key, got {resp.status_code}"
                elif resp.status_code != 401 or resp.headers.get("WWW-Authenticate") != "Bearer":
                    problem = f"without the key: {resp.status_code}, expected 401 + WWW-Authenticate: Bearer"
                else:
                    problem = self._check_error_shape(resp, path)
            elif mode == "raw":
                (method, path), ctype, body = case
                headers = {"Content-Type": ctype} if ctype else {}
                resp = self.session().request(method, self.served.base + path, data=body,
                                              headers={**headers, **self.served.headers}, timeout=(5, TIMEOUT_S))
                problem = self._check_error_shape(resp, path) if resp.status_code >= 400 else None
                label = f"{method} {path}"
            else:
                label = f"{case.method.upper()} {case.operation.path}"
                kwargs = case.as_transport_kwargs(base_url=self.served.base, headers=self.served.headers)
                streamed = case.operation.path in STREAMED and hash(case.id) % 10 != 0
                resp = self.session().request(**kwargs, stream=streamed, timeout=(5, TIMEOUT_S))
                if streamed and resp.status_code == 200:
                    resp.raw.read(4096)  # first chunk, then hang up: the server must cancel the stream
                    resp.close()
                    allowed = "200" in self.expected.get((case.method.upper(), case.operation.path), set())
                    problem = None if allowed else "undocumented 200"
                else:
                    try:
                        case.validate_response(resp, checks=[
                            checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
                            checks.response_schema_conformance, checks.negative_data_rejection,
                        ])
                    except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - failed checks, with the case
                        problem = " ".join(str(exc).split())[:600]
                    if problem is None and resp.status_code >= 400:
                        problem = self._check_error_shape(resp, case.operation.path)
            status = str(resp.status_code)
        except requests.Timeout:
            problem, status = f"no answer within {TIMEOUT_S:.0f} s (hang)", "hang"
            label = label if "label" in locals() else "?"
        except requests.RequestException as exc:
            problem, status = f"connection failed: {exc}", "conn"
            label = label if "label" in locals() else "?"
        with self.lock:
            self.done += 1
            self.counts[mode] += 1
            self.statuses[f"{mode} {label} {status}"] += 1
            self.hangs += status == "hang"
            self.server_errors += status.startswith("5") and status != "503"
            if problem and len(self.failures) < 50:
                body = {"raw": lambda: case[2][:200], "auth": lambda: case[1]}.get(mode, lambda: case.body)()
                self.failures.append({"mode": mode, "request": label, "status": status, "problem": problem,
                                      "body": repr(body)[:300]})
            elif problem:
                self.failures.append({"problem": "(more)"}) if len(self.failures) == 50 else None

    def _check_error_shape(self, resp: requests.Response, path: str) -> str | None:
        try:
            body = resp.json()
        except ValueError:
            return f"{resp.status_code} error is not JSON: {resp.text[:120]!r}"
        if path in self.openai_shaped:  # {"error": {"message", "type", "param", "code"}}, for OpenAI clients
            error = body.get("error") if isinstance(body, dict) else None
            if not (isinstance(error, dict) and error.get("message") and "param" in error):
                return f"{resp.status_code} error lacks error.message/param: {str(body)[:120]}"
            return None
        if not (isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"] and "field" in body):
            return f"{resp.status_code} error lacks error/field: {str(body)[:120]}"
        return None


def expected_statuses(base: str, headers: dict[str, str]) -> tuple[dict[tuple[str, str], set[str]], set[str]]:
    """Per operation the documented statuses, and the paths whose documented errors are OpenAI's shape."""
    doc = requests.get(base + "/openapi.json", headers=headers, timeout=10).json()
    statuses = {(m.upper(), p): set(op["responses"]) for p, ops in doc["paths"].items() for m, op in ops.items()}
    openai_shaped = {p for p, ops in doc["paths"].items() if "#/components/schemas/OpenAIError" in json.dumps(ops)}
    return statuses, openai_shaped


def fuzz(served: Served, budget: int, workers: int, seed: int) -> dict[str, Any]:
    t0 = time.monotonic()
    cases = generate(served.base, budget, seed, served.headers)
    generated_s = time.monotonic() - t0
    fuzzer = Fuzzer(served, *expected_statuses(served.base, served.headers))
    rss: dict[str, int] = {"start_kib": served.rss_kib()}
    fuzzer.warm_at = max(1, len(cases) // 10)
    peak = [rss["start_kib"]]

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], served.rss_kib())
            stop.wait(0.5)

    stop = threading.Event()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t1 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(fuzzer.send, cases))
    sent_s = time.monotonic() - t1
    stop.set()
    sampler.join()
    after = after_checks(served)
    rss["end_kib"] = served.rss_kib()
    rss["peak_kib"] = max(peak[0], rss["end_kib"])
    rss["after_warmup_kib"] = fuzzer.rss_after_warmup
    growth = rss["end_kib"] / rss["after_warmup_kib"] - 1.0
    return {
        "surface": served.name, "requests": fuzzer.done, "by_mode": dict(fuzzer.counts),
        "server_errors": fuzzer.server_errors, "hangs": fuzzer.hangs,
        "failures": len([f for f in fuzzer.failures if "mode" in f]), "failure_examples": fuzzer.failures[:20],
        "statuses": dict(sorted(fuzzer.statuses.items())), "after": after,
        "rss": rss, "rss_growth_after_warmup": round(growth, 4),
        "generate_s": round(generated_s, 1), "send_s": round(sent_s, 1), "workers": workers,
    }


def after_checks(served: Served) -> dict[str, Any]:
    """The server still serves and, for the TTS server, its stream counters return to 0."""
    if served.name == "token":
        token = requests.post(served.base + "/api/token", json={}, timeout=10)
        return {"serves": token.status_code == 200 and requests.get(served.base + "/healthz", timeout=10).ok}
    deadline, key = time.monotonic() + 30, served.headers
    while True:
        health = requests.get(served.base + "/healthz", timeout=10).json()
        metrics = requests.get(served.base + "/metrics", headers=key, timeout=10).text
        gauges = {name: float(re.search(rf"^{name} (\S+)$", metrics, re.M).group(1))
                  for name in ("tts_engine_open_streams", "tts_engine_running_streams", "tts_http_streams_in_flight")}
        if (health["open_streams"] == 0 and not any(gauges.values())) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    speakers = requests.get(served.base + "/v1/speakers", headers=key, timeout=10).json()["speakers"]
    probe = requests.post(served.base + "/synthesize", json={"text": "hello", "speaker": speakers[0], "max_frames": 2},
                          headers=key, timeout=60)
    return {"serves": probe.status_code == 200 and len(probe.content) == 44 + 2 * 1920 * 2,
            "open_streams": health["open_streams"], **gauges}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="generated requests per surface (at least)")
    parser.add_argument("--surface", choices=("tts", "token", "both"), default="both")
    parser.add_argument("--workers", type=int, default=8, help="concurrent clients")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", help="checkpoint for the TTS server (default: a tiny random one, built once)")
    parser.add_argument("--out", type=Path, help="write the JSON summary here too")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="fuzz_http_"))
    results = []
    if args.surface in ("tts", "both"):
        model = args.model or str(tmp / "tiny")
        if not args.model:
            subprocess.run([PYTHON, "-m", "tts_engine", "make-checkpoint", "--preset", "tiny", "--out", model],
                           cwd=ROOT, check=True, capture_output=True)
        served = Served("tts", [PYTHON, "-m", "tts_engine", "serve", "--model", model, "--device", "cpu",
                                "--host", "127.0.0.1", "--port", "0", "--max-text-chars", "48",
                                "--env-file", os.devnull],
                        {"TTS_DEEP_STREAM_MAX_POSITIONS": "128", "TTS_API_KEY": API_KEY},
                        r"listening on http://127\.0\.0\.1:(\d+)", tmp / "tts.log",
                        headers={"Authorization": f"Bearer {API_KEY}"})
        try:
            results.append(fuzz(served, args.requests, args.workers, args.seed))
        finally:
            served.stop()
    if args.surface in ("token", "both"):
        served = Served("token", [PYTHON, "-m", "token_server", "--dev", "--host", "127.0.0.1", "--port", "0",
                                  "--env-file", os.devnull],
                        {"TOKEN_RATE_LIMIT_PER_MIN": "100000", "ALLOWED_ORIGINS": "https://app.example.test"},
                        r"Running on http://127\.0\.0\.1:(\d+)", tmp / "token.log")
        try:
            results.append(fuzz(served, args.requests, args.workers, args.seed))
        finally:
            served.stop()
    ok = all(r["server_errors"] == 0 and r["hangs"] == 0 and r["failures"] == 0 and r["after"]["serves"]
             and r["rss_growth_after_warmup"] <= 0.10
             and all(r["after"].get(k, 0) == 0 for k in ("open_streams", "tts_engine_open_streams",
                                                        "tts_engine_running_streams", "tts_http_streams_in_flight"))
             for r in results)
    summary = {"ok": ok, "logs": str(tmp), "surfaces": results}
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
