"""The admission pillar's API resources (composed into the one API in config/api.py)."""

from rest_framework.routers import BaseRouter

from admission.api import AdmissionDecisionViewSet


def register(router: BaseRouter) -> None:
    router.register("admission-decisions", AdmissionDecisionViewSet)
