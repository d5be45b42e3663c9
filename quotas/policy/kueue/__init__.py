"""Compile the organisation tree to Kueue ``v1beta2`` objects, validate them, diff them.

Pure Python: inputs are an :class:`~quotas.policy.snapshot.OrgSnapshot` and a :class:`KueueTarget`;
outputs are plain dicts, sorted and deterministic (same input, byte-identical output).
"""

from .target import API_VERSION, MANAGED_BY, KueueFlavor, KueueTarget, object_key
from .translate import compile_kueue, render_yaml

__all__ = ["API_VERSION", "MANAGED_BY", "KueueFlavor", "KueueTarget", "compile_kueue", "object_key", "render_yaml"]
