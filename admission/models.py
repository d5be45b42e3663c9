"""The bounded decision log: "why was my job refused?". Written off the hot path, in batches."""

from __future__ import annotations

from django.db import models


class AdmissionDecision(models.Model):
    at = models.DateTimeField(db_index=True)
    cluster = models.CharField(max_length=63)
    webhook = models.CharField(max_length=16)
    uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63, blank=True)
    kind = models.CharField(max_length=64)
    name = models.CharField(max_length=253, blank=True)
    operation = models.CharField(max_length=16)
    allowed = models.BooleanField()
    reason = models.CharField(max_length=32, db_index=True)
    message = models.TextField(blank=True)
    unit_path = models.CharField(max_length=1000, blank=True, db_index=True)
    owner = models.CharField(max_length=150, blank=True)
    latency_ms = models.FloatField()

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.at:%H:%M:%S} {self.namespace}/{self.name} {self.reason}"
