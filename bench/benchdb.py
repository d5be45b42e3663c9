"""The benchmarks' own PostgreSQL database (allot_bench beside DATABASE_URL's, or on 127.0.0.1),
created empty and migrated for each run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def database_url(bench: str) -> str:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/allot")
    if not base.startswith("postgres"):
        sys.exit(f"bench/{bench}.py needs PostgreSQL (DATABASE_URL=postgres://…)")
    return base.rsplit("/", 1)[0] + "/allot_bench"


def setup_database(url: str) -> None:
    """Drop and create allot_bench, migrate it, and point this process's Django at it."""
    import psycopg

    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS allot_bench")
        conn.execute("CREATE DATABASE allot_bench")
    os.environ.update(
        {"DATABASE_URL": url, "ALLOT_SECRET_KEY": "bench-only", "DJANGO_SETTINGS_MODULE": "config.settings"}
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=dict(os.environ), check=True)
