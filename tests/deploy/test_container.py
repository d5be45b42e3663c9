"""The container image: its Containerfile passes hadolint, and its entrypoint, run as a plain script,
starts each role with the right command (dry run) and really migrates a database."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "deploy" / "container" / "Containerfile"
ENTRYPOINT = REPO / "deploy" / "container" / "entrypoint.sh"


def entrypoint(*args: str, dry: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "ALLOT_APP_DIR": str(REPO),
        "PYTHON": sys.executable,
        "ALLOT_ROLE_FILE": env.pop("ALLOT_ROLE_FILE", os.devnull),
        **({"ALLOT_ENTRYPOINT_DRY_RUN": "1"} if dry else {}),
        **env,
    }
    return subprocess.run(["sh", str(ENTRYPOINT), *args], env=environment, capture_output=True, text=True, timeout=120)


def test_the_containerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    done = subprocess.run(
        [hadolint, "--failure-threshold", "warning", str(CONTAINERFILE)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_is_multi_stage_non_root_pinned_and_healthchecked():
    text = CONTAINERFILE.read_text()
    assert text.count("\nFROM ") == 2 and "AS build" in text and "--from=build /wheels" in text
    assert "ARG PYTHON_IMAGE=python:3.11" in text and ":latest" not in text
    assert "\nUSER 10001:10001" in text and "collectstatic" in text
    assert "HEALTHCHECK" in text and 'ENTRYPOINT ["allot"]' in text


@pytest.mark.parametrize(
    ("role", "command"),
    [
        ("web", "gunicorn config.wsgi -c deploy/gunicorn.conf.py"),
        ("webhook", "gunicorn config.wsgi -c deploy/gunicorn.conf.py"),
        ("worker", "celery -A config worker --loglevel INFO --concurrency 2 --hostname allot@%h"),
        ("beat", "-m config.beat --loglevel INFO"),
        ("migrate", "manage.py migrate --no-input"),
    ],
)
def test_each_role_runs_its_command(role, command):
    done = entrypoint(role)
    assert done.returncode == 0, done.stderr
    assert command in done.stdout


def test_the_webhook_role_serves_only_the_webhooks_behind_its_front(tmp_path):
    shim = tmp_path / "gunicorn"  # a stand-in that prints the environment gunicorn would get
    shim.write_text('#!/bin/sh\necho "$ALLOT_WEBHOOK_ONLY $GUNICORN_BIND $GUNICORN_WORKER_CLASS $*"\n')
    shim.chmod(0o755)
    done = entrypoint("webhook", dry=False, PATH=f"{tmp_path}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "true 127.0.0.1:8000 gthread config.wsgi -c deploy/gunicorn.conf.py"


def test_an_unknown_role_says_what_the_roles_are():
    done = entrypoint("serve")
    assert done.returncode == 64
    assert "unknown role 'serve'" in done.stderr and "wait-for-migrations" in done.stderr


def test_migrate_then_wait_for_migrations_on_a_real_database(tmp_path):
    base = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}  # a fresh SQLite file
    run_env = {
        **base,
        "ALLOT_VAR_DIR": str(tmp_path),
        "ALLOT_SECRET_KEY": "test-only",
        "ALLOT_MIGRATION_WAIT_SECONDS": "0",
    }
    waiting = subprocess.run(
        ["sh", str(ENTRYPOINT), "wait-for-migrations"],
        env={**run_env, "ALLOT_APP_DIR": str(REPO), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert waiting.returncode == 1 and "run the allot-migrate Job" in waiting.stderr  # nothing applied yet
    for role in ("migrate", "wait-for-migrations"):
        done = subprocess.run(
            ["sh", str(ENTRYPOINT), role],
            env={**run_env, "ALLOT_APP_DIR": str(REPO), "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert "migrations applied" in done.stdout and (tmp_path / "allot.sqlite3").exists()


def test_the_healthcheck_follows_the_role_the_container_runs(tmp_path):
    role_file = tmp_path / "role"
    entrypoint("worker", ALLOT_ROLE_FILE=str(role_file))
    assert role_file.read_text().strip() == "worker"
    done = entrypoint("healthcheck", ALLOT_ROLE_FILE=str(role_file))
    assert done.returncode == 0 and "celery -A config inspect ping" in done.stdout
    role_file.write_text("webhook\n")
    assert "/admission/healthz" in entrypoint("healthcheck", ALLOT_ROLE_FILE=str(role_file)).stdout


def test_dev_refuses_an_old_python_before_creating_anything(tmp_path):
    """./dev checks the Python version first and says what to install (it used to create a venv
    pip then refused, and reuse that broken venv on every later run)."""
    shutil.copy(REPO / "dev", tmp_path / "dev")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    old = tmp_path / "python3.10"
    old.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "Python 3.10.12"; exit 0; fi\nexit 1\n')
    old.chmod(0o755)
    done = subprocess.run(
        ["bash", str(tmp_path / "dev"), "test"],
        env={**os.environ, "PYTHON": str(old)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "is not Python 3.11 or newer" in done.stderr
    assert not (tmp_path / ".venv").exists()
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(old)  # a venv made by an old Python
    done = subprocess.run(
        ["bash", str(tmp_path / "dev"), "test"],
        env={**os.environ, "PYTHON": str(old)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "broken or older than Python 3.11: creating it again" in done.stdout
    assert done.returncode == 2 and not (tmp_path / ".venv").exists()  # removed, not reused
