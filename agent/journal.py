"""Open calls on disk: what a worker that dies without a word (kill -9, OOM, a crash in native code) was doing.

Contract
- `CallJournal(traces_dir, room=, agent_identity=, job_id=, session_id=)`: one per job, opened by the worker when
  the job starts. It writes `<traces_dir>/.open/<host>-<pid>-<job id>.json` at once (room, agent identity, worker
  pid and its start time) and, once `watch(collector)` is called, rewrites it whenever a turn opens or marks a
  point and when a turn's record is written, so the file always holds every turn still open as its trace record
  would read now. `close()` removes the file (the job ended and the collector wrote its own records).
- `recover(traces_dir, pids=None, reason=)`: every entry of this host whose worker process is gone (with `pids`:
  only those pids, gone or not) is claimed (an atomic rename, so two recoverers never both write), each open turn
  is appended to the traces as its record with outcome `worker_lost` and the reason in `errors`, and the entry is
  removed. Returns the `LostCall`s, so the caller can take the dead agents out of their rooms.
- Who recovers: the supervisor that saw the worker die (`python -m agent recover`, scripts/run_worker.sh,
  the systemd unit's ExecStopPost) and, for a worker killed with no supervisor, the next worker on the machine
  when it starts. The journal folder must be local to the machine (pids are this host's).
Only the worker and its recovery use this; the writes are small (about 1 KB, a few per turn) and atomic.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.tracing import WRITES, Outcome, TraceCollector, TurnTrace, append_record, publish

logger = logging.getLogger("agent.journal")

OPEN_DIR = ".open"
WORKER_LOST = Outcome.WORKER_LOST.value  # the outcome of a turn whose worker died


@dataclass(frozen=True)
class LostCall:
    room: str
    agent_identity: str
    job_id: str
    session_id: str
    turns: int  # open turns closed as worker_lost


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time since boot): a pid the kernel gave to another program differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_running(pid: int, start_ticks: int | None) -> bool:
    ticks = process_start_ticks(pid)
    if ticks is None:
        return False
    return start_ticks is None or ticks == start_ticks


def journal_dir(traces_dir: str | Path) -> Path:
    return Path(traces_dir) / OPEN_DIR


class CallJournal:
    """The on-disk entry of one live call; see the module docstring."""

    def __init__(
        self, traces_dir: str | Path, *, room: str, agent_identity: str, job_id: str, session_id: str
    ) -> None:
        self.pid = os.getpid()
        self.path = journal_dir(traces_dir) / f"{socket.gethostname()}-{self.pid}-{job_id}.json"
        self.entry: dict[str, Any] = {
            "host": socket.gethostname(),
            "pid": self.pid,
            "pid_start_ticks": process_start_ticks(self.pid),
            "room": room,
            "agent_identity": agent_identity,
            "job_id": job_id,
            "session_id": session_id,
            "started": round(time.time(), 3),
        }
        self.turns: dict[str, TurnTrace] = {}  # open turns by id
        self._lock = threading.Lock()
        self._closed = False
        self._write()

    def watch(self, collector: TraceCollector) -> None:
        """Follow the collector's turns: each new turn, each first mark of a point, each written record."""
        collector.on_open = self._opened
        collector.sinks.append(self._finished)

    def _opened(self, turn: TurnTrace) -> None:
        observer = turn.observer

        def marked(point: str, t: float) -> None:
            if observer is not None:
                observer(point, t)
            self._write()

        turn.observer = marked
        with self._lock:
            self.turns[turn.turn_id] = turn
        self._write()

    def _finished(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.turns.pop(record.get("turn_id", ""), None)
        self._write()

    def _write(self) -> None:
        with self._lock:
            if self._closed:
                return
            data = dict(self.entry, turns=[turn.to_record() for turn in self.turns.values() if not turn.finished])
            tmp = self.path.with_suffix(".tmp")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
                os.replace(tmp, self.path)
            except OSError as exc:  # a full disk must not end a call; recovery then knows less
                WRITES.failed(self.path, "the call journal", exc)  # warned once a minute, counted for health
            else:
                WRITES.written(self.path)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.turns.clear()
            self.path.unlink(missing_ok=True)
            self.path.with_suffix(".tmp").unlink(missing_ok=True)


def recover(traces_dir: str | Path, *, pids: set[int] | None = None, reason: str = "") -> list[LostCall]:
    """Close the open turns of dead workers on this host; see the module docstring."""
    folder = journal_dir(traces_dir)
    if not folder.is_dir():
        return []
    host = socket.gethostname()
    lost: list[LostCall] = []
    for path in sorted(folder.glob(f"{host}-*.json")):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            logger.warning("skipping unreadable call journal %s: %s", path, exc)
            continue
        pid = int(entry.get("pid", -1))
        if pids is not None and pid not in pids:
            continue
        if pids is None and is_running(pid, entry.get("pid_start_ticks")):
            continue  # a live worker's call
        claimed = path.with_name(f"{path.name}.claimed-{os.getpid()}")
        try:
            os.rename(path, claimed)  # another recoverer may have taken it first
        except FileNotFoundError:
            continue
        why = f"{WORKER_LOST}: the worker (pid {pid}) died" + (f": {reason}" if reason else "")
        for record in entry.get("turns", []):
            record.update(outcome=WORKER_LOST, errors=[*record.get("errors", []), why])
            append_record(Path(traces_dir), record)
            publish(record)  # OpenTelemetry too, where the process installed it (agent/recovery.py)
        claimed.unlink(missing_ok=True)
        path.with_suffix(".tmp").unlink(missing_ok=True)
        lost.append(
            LostCall(
                room=str(entry.get("room", "")),
                agent_identity=str(entry.get("agent_identity", "")),
                job_id=str(entry.get("job_id", "")),
                session_id=str(entry.get("session_id", "")),
                turns=len(entry.get("turns", [])),
            )
        )
    return lost
