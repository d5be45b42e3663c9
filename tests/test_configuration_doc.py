"""The configuration reference is generated from the settings module (config/settings_doc.py): every
variable the settings read is on it, every variable the docs mention exists, and a setting added without
a help text stops the docs build."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accounting.policy.findings import Thresholds
from config.settings_doc import UndocumentedSetting, all_settings, configuration_markdown, declared_settings

REPO = Path(__file__).resolve().parent.parent
# Import the settings in a fresh interpreter with os.environ replaced by a mapping that records every
# name asked for, under the environments that take the optional branches (single sign-on, TLS, webhook).
RECORD = """
import json, os, sys
class Recorder(dict):
    asked = set()
    def get(self, key, default=None):
        self.asked.add(key); return super().get(key, default)
    def __getitem__(self, key):
        self.asked.add(key); return super().__getitem__(key)
    def __contains__(self, key):
        self.asked.add(key); return super().__contains__(key)
os.environ = Recorder(os.environ)
import config.settings, config.celery
print(json.dumps(sorted(n for n in Recorder.asked if n.startswith("ALLOT_") or n.endswith("_URL"))))
"""
BRANCHES = {
    "ALLOT_SECRET_KEY": "x",
    "ALLOT_HTTPS": "true",
    "ALLOT_HTTPS_PROXY_HEADER": "true",
    "ALLOT_OIDC_ENABLED": "true",
    **{f"ALLOT_OIDC_{n}": "x" for n in ("CLIENT_ID", "CLIENT_SECRET", "AUTHORIZATION_ENDPOINT", "TOKEN_ENDPOINT")},
    **{f"ALLOT_OIDC_{n}": "x" for n in ("USER_ENDPOINT", "JWKS_ENDPOINT")},
    "ALLOT_WEBHOOK_ONLY": "true",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    **{f"ALLOT_FINDINGS_{n.upper()}": str(getattr(Thresholds(), n)) for n in Thresholds.names()},
}


def documented() -> set[str]:
    return {s.name for s in all_settings()}


def test_every_variable_the_settings_read_is_documented():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | BRANCHES
    out = subprocess.run([sys.executable, "-c", RECORD], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    asked = set(json.loads(out.stdout.splitlines()[-1]))
    assert {
        "ALLOT_OIDC_JWKS_ENDPOINT",
        "ALLOT_HSTS_SECONDS",
        "ALLOT_FINDINGS_ZOMBIE_MINUTES",
    } <= asked  # branches taken
    assert asked - documented() == set()


def test_what_is_read_outside_python_is_where_the_reference_says():
    from config.settings_doc import OUTSIDE_PYTHON

    for setting in OUTSIDE_PYTHON:
        assert setting.name in (REPO / setting.where).read_text(), setting


def test_every_variable_the_docs_and_code_mention_exists():
    """A name in the README, the docs, a template or the code that is neither read nor a derived Django
    setting is stale (``ALLOT_OIDC_*``-style families count when some member exists)."""
    from django.conf import settings

    names = documented() | {n for n in dir(settings) if n.startswith("ALLOT_")}
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    tracked += subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    stale = set()
    for name in tracked:
        path = REPO / name
        if not path.is_file() or path.suffix not in {".md", ".py", ".html", ".yaml", ".yml", ".sh", ".txt", ""}:
            continue
        if name.startswith("tests/") or "/migrations/" in name:
            continue
        for found in re.findall(
            r"\bALLOT_[A-Z0-9_]*[A-Z0-9]\b\*?|\bALLOT_[A-Z0-9_]+_\*",
            path.read_text(errors="ignore").replace("env:ALLOT_", ""),
        ):
            if found.endswith(("*", "_")):
                if not any(n.startswith(found.rstrip("*")) for n in names):
                    stale.add(f"{name}: {found}")
            elif found not in names and not any(n.startswith(found + "_") for n in names):
                stale.add(f"{name}: {found}")
    assert stale == set()


def test_the_reference_lists_each_variable_once_with_its_default():
    page = configuration_markdown()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(rows) == len(documented()) == len(all_settings())
    assert "| `ALLOT_PORTAL_URL` | text | `http://127.0.0.1:8000` | The portal's address" in page
    assert "| `ALLOT_FINDINGS_ZOMBIE_MINUTES` | whole number | `60` |" in page
    assert "| `ALLOT_OIDC_CLIENT_ID` | text | required with ALLOT_OIDC_ENABLED |" in page


def test_a_setting_without_help_stops_the_build(tmp_path):
    source = tmp_path / "settings.py"
    source.write_text('X = env_int("ALLOT_NEW_THING", 5)\n')
    with pytest.raises(UndocumentedSetting, match=r"ALLOT_NEW_THING \(settings.py:1\) has no help text"):
        declared_settings((source,))
