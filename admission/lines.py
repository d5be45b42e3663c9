"""The webhook's JSON line per decision (ALLOT_ADMISSION_LOG_LINES: refusals by default), written like an
access log: one JSON object per line on stderr, with the decision's own time (``at``, UTC).

Through ``logging`` a line cost more than the decision it reports — a LogRecord, the formatter and a write
with a flush, during which the request thread gives up the interpreter and queues to get it back behind the
others: under load the refusal lines alone took the webhook's throughput from 0.85–0.89 of the no-op's to
0.69–0.76 (issue #40.6, ``bench/admission.py``). Here a decision only appends its fields to a list; the
process's background loop (``admission.runtime``, every 0.2 s) writes all that wait in one write, as does a
list reaching ``CAPACITY`` and the process's exit. A process killed outright loses the last fraction of a
second of lines, as it loses its unwritten decision-log rows; the decision log and the metrics keep every
decision either way.
"""

from __future__ import annotations

import atexit
import json
import sys
import threading
import time
from collections import deque
from typing import Any, TextIO

CAPACITY = 5000
"""Lines kept before they are written whatever the time (bounds the memory a stalled loop can take)."""


class Lines:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        """Where the lines go; None: the process's stderr at the time of writing."""
        self.waiting: deque[tuple[float, dict[str, Any]]] = deque()  # appended by request threads, taken by flush
        self.lock = threading.Lock()
        self._second = -1
        self._stamp = ""

    def add(self, fields: dict[str, Any]) -> None:
        """Keep one line's fields (JSON-serialisable), stamped with the time now."""
        self.waiting.append((time.time(), fields))  # deque.append is atomic: no lock on the request's path
        if len(self.waiting) >= CAPACITY:
            self.flush()

    def flush(self) -> int:
        """Write every waiting line in one write; returns how many."""
        with self.lock:
            # taken one by one (popleft is atomic too): a line appended meanwhile stays for the next flush
            waiting = [self.waiting.popleft() for _ in range(len(self.waiting))]
            if not waiting:
                return 0
            text = "".join(json.dumps({"at": self._at(at), **fields}) + "\n" for at, fields in waiting)
            stream = self.stream or sys.stderr
            stream.write(text)
            stream.flush()
            return len(waiting)

    def _at(self, at: float) -> str:
        """``2026-12-07T06:20:43.123Z``: the second is formatted once for all the lines within it."""
        second = int(at)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int((at - second) * 1000):03d}Z"


LINES = Lines()
atexit.register(LINES.flush)  # a worker's graceful exit (SIGTERM, gunicorn's max-requests) writes what waits
