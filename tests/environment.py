"""Loaded with ``-p`` before Django starts: test-only defaults for what production must set."""

import os

os.environ.setdefault("ALLOT_SECRET_KEY", "tests-only-not-a-secret")
os.environ.setdefault("ALLOT_VAR_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test"))
