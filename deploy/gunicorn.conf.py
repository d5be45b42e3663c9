"""Production gunicorn settings, for both deployments (the portal/API and the admission webhook).

The webhook deployment sets ALLOT_WEBHOOK_ONLY=true (only /admission/, no middleware) and runs one
worker process per core with a few threads each: a decision is pure CPU on an in-memory policy, so
more processes than cores only add context switches, while threads keep a slow or idle keep-alive
connection from holding a whole process. TLS is terminated here (GUNICORN_CERTFILE/KEYFILE, a certificate
whose SAN is <service>.<namespace>.svc) or by a sidecar in front. Scale out with replicas.
"""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8443" if os.environ.get("GUNICORN_CERTFILE") else "0.0.0.0:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
# gthread, not sync: a sync worker serves one connection at a time, so a client that sends slowly
# stalls every admission behind it and keep-alive is ignored (the API server then opens a new TLS
# connection per call: 12.7 ms added per create, measured, against 3.3 ms with gthread). With gthread
# each worker keeps idle connections in a poller and serves GUNICORN_THREADS requests at once.
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")  # (sync with threads > 1 would be gthread anyway)
threads = int(os.environ.get("GUNICORN_THREADS", "8"))
keepalive = 75  # the API server keeps webhook connections open; honoured by gthread
timeout = 30
graceful_timeout = 20
accesslog = os.environ.get("GUNICORN_ACCESSLOG")  # off by default: each decision already logs one line
certfile = os.environ.get("GUNICORN_CERTFILE")
keyfile = os.environ.get("GUNICORN_KEYFILE")


if os.environ.get("ALLOT_WEBHOOK_ONLY") == "true":
    # The admission webhook: the policy is loaded once in the master before it forks, so every worker starts
    # able to decide; each worker then publishes its state and readiness needs all of them (admission.workers).
    preload_app = True

    def when_ready(server):  # in the master, after the application is loaded, before any worker is forked
        from admission.runtime import STATE

        STATE.preload()

    def post_worker_init(worker):
        import gc

        from admission.runtime import STATE

        STATE.worker_started()
        # what the worker holds for its life (Django, the preloaded policy) out of the collector's sight: a
        # full collection then walks only what requests allocate, not every object of the process
        gc.freeze()

    def child_exit(server, worker):
        from admission import workers as shared

        shared.forget(worker.pid)
