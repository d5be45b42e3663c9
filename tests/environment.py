"""Loaded with ``-p`` before Django starts: test-only defaults for what production must set."""

import os

os.environ.setdefault("ALLOT_SECRET_KEY", "tests-only-not-a-secret")
# The test client and the browser tests speak plain http on loopback: no https redirect, no Secure-only
# cookies, no HSTS (tests/portal/test_security.py checks the production defaults in another process).
os.environ.setdefault("ALLOT_HTTPS", "false")
os.environ.setdefault("ALLOT_VAR_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test"))
# WhiteNoise serves STATIC_ROOT (filled by collectstatic in the image); the tests need it to exist.
os.makedirs(os.path.join(os.environ["ALLOT_VAR_DIR"], "static"), exist_ok=True)
