"""Production gunicorn settings, for both deployments (the portal/API and the admission webhook).

The webhook deployment sets ALLOT_WEBHOOK_ONLY=true (only /admission/, no middleware) and runs one
worker process per core: each decision is pure CPU on an in-memory policy, so more processes than
cores only add context switches. TLS is terminated here (GUNICORN_CERTFILE/KEYFILE, a certificate
whose SAN is <service>.<namespace>.svc) or by a sidecar in front. Scale out with replicas.
"""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8443" if os.environ.get("GUNICORN_CERTFILE") else "0.0.0.0:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "sync")
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
keepalive = 75  # the API server keeps webhook connections open
timeout = 30
graceful_timeout = 20
accesslog = os.environ.get("GUNICORN_ACCESSLOG")  # off by default: each decision already logs one line
certfile = os.environ.get("GUNICORN_CERTFILE")
keyfile = os.environ.get("GUNICORN_KEYFILE")
