"""The webhook's decision lines (admission.lines): kept by the request, written in one write per flush, at a
capacity, and at exit — JSON objects, one a line, each with its decision's time."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from admission import lines as lines_module
from admission.lines import Lines

ROOT = Path(__file__).resolve().parents[2]


class Counting(io.StringIO):
    """A stream that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_lines_wait_for_a_flush_and_are_written_in_one_write_each_a_json_object_with_its_time():
    stream = Counting()
    kept = Lines(stream)
    before = datetime.now(UTC).replace(microsecond=0)
    for i in range(3):
        kept.add({"event": "admission", "uid": f"u{i}", "allowed": False, "reason": "unknown_owner"})
    assert stream.getvalue() == "" and stream.writes == 0  # the request only appended
    assert kept.flush() == 3
    assert stream.writes == 1
    written = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [w["uid"] for w in written] == ["u0", "u1", "u2"]
    assert all(w["reason"] == "unknown_owner" and w["allowed"] is False for w in written)
    at = datetime.fromisoformat(written[0]["at"].replace("Z", "+00:00"))
    assert written[0]["at"].endswith("Z") and before <= at <= datetime.now(UTC)
    assert kept.flush() == 0 and stream.writes == 1  # nothing waits: nothing written


def test_a_full_list_is_written_without_waiting_for_the_loop(monkeypatch):
    monkeypatch.setattr(lines_module, "CAPACITY", 4)
    stream = Counting()
    kept = Lines(stream)
    for i in range(5):
        kept.add({"uid": f"u{i}"})
    assert stream.writes == 1 and len(stream.getvalue().splitlines()) == 4
    assert kept.flush() == 1


def test_the_lines_still_waiting_are_written_when_the_process_exits():
    """No background loop runs here: the process's exit (a worker's graceful stop) writes them."""
    code = (
        "import django; django.setup()\n"
        "from admission.lines import LINES\n"
        "LINES.add({'event': 'admission', 'uid': 'at-exit'})\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "ALLOT_SECRET_KEY": "x"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["uid"] for line in done.stderr.splitlines() if '"uid"' in line] == ["at-exit"]
