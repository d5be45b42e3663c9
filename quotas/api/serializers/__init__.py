"""Serializers translate and check shape only; domain rules run in the services and the core.

Output serializers (``*Out``) render rows; input serializers (``*In``) turn JSON into the keyword
arguments of one service call. Quantities accept Kubernetes syntax ("64", "500m", "512Gi") and
durations accept seconds or "15m" / "1h30m" / "PT15M". One module per resource.
"""
