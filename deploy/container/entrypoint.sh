#!/bin/sh
# Allot's container entrypoint: one image, the role is the first argument.
#   web                  the portal and API (gunicorn, gthread workers) on :8000
#   webhook              the admission webhooks only (ALLOT_WEBHOOK_ONLY), gthread workers on loopback behind nginx
#   worker               a Celery worker (acks late; see docs/operators/operations.md)
#   beat                 Celery beat, the only one: takes a Redis lock first (a second beat waits)
#   migrate              apply database migrations, once per release (a Job)
#   wait-for-migrations  wait until every migration is applied (an init container of the web and workers)
#   manage ARGS...       any manage.py command
#   healthcheck          the container healthcheck for the role this container runs
# ALLOT_ENTRYPOINT_DRY_RUN=1 prints the command instead of running it (used by the tests).
set -eu

role=${1:-web}
[ $# -gt 0 ] && shift
APP_DIR=${ALLOT_APP_DIR:-/app}
ROLE_FILE=${ALLOT_ROLE_FILE:-/tmp/allot-role}
PYTHON=${PYTHON:-python}

run() {
  if [ "${ALLOT_ENTRYPOINT_DRY_RUN:-0}" = 1 ]; then
    echo "$*"
  else
    exec "$@"
  fi
}

usage() {
  sed -n '2,11p' "$0" >&2
  exit 64
}

cd "$APP_DIR"
case "$role" in
  web|webhook|worker|beat) echo "$role" >"$ROLE_FILE" 2>/dev/null || true ;;
esac

case "$role" in
  web)
    run gunicorn config.wsgi -c deploy/gunicorn.conf.py "$@" ;;
  webhook)
    export ALLOT_WEBHOOK_ONLY=true
    export GUNICORN_BIND=${GUNICORN_BIND:-127.0.0.1:8000}
    export GUNICORN_WORKER_CLASS=${GUNICORN_WORKER_CLASS:-gthread}  # keeps nginx's upstream connections open
    run gunicorn config.wsgi -c deploy/gunicorn.conf.py "$@" ;;
  worker)
    run celery -A config worker --loglevel "${ALLOT_LOG_LEVEL:-INFO}" \
      --concurrency "${CELERY_CONCURRENCY:-2}" --hostname "allot@%h" "$@" ;;
  beat)
    run "$PYTHON" -m config.beat --loglevel "${ALLOT_LOG_LEVEL:-INFO}" "$@" ;;
  migrate)
    run "$PYTHON" manage.py migrate --no-input "$@" ;;
  wait-for-migrations)
    limit=${ALLOT_MIGRATION_WAIT_SECONDS:-600}
    waited=0
    until "$PYTHON" manage.py migrate --check >/dev/null 2>&1; do
      if [ "$waited" -ge "$limit" ]; then
        echo "migrations are still not applied after ${limit}s: run the allot-migrate Job of this release" >&2
        exit 1
      fi
      echo "waiting for this release's migrations (${waited}s)" >&2
      sleep 5
      waited=$((waited + 5))
    done
    echo "migrations applied" ;;
  manage)
    run "$PYTHON" manage.py "$@" ;;
  healthcheck)
    current=$(cat "$ROLE_FILE" 2>/dev/null || echo web)
    case "$current" in
      web) run "$PYTHON" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=4)" ;;
      webhook) run "$PYTHON" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/admission/healthz', timeout=4)" ;;
      worker) run celery -A config inspect ping --timeout 4 --destination "allot@$(hostname)" ;;
      beat) run "$PYTHON" -m config.beat --check ;;
    esac ;;
  -h|--help|help) usage ;;
  *)
    echo "allot: unknown role '$role'" >&2
    usage ;;
esac
