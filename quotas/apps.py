from typing import Any

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from axes.signals import user_locked_out

        user_locked_out.connect(_locked_out, dispatch_uid="allot-signin-locked-out")


def _locked_out(sender: Any, request: Any = None, username: str = "", ip_address: str = "", **_: Any) -> None:
    from quotas.services.signin import record_lockout

    record_lockout(username=username or "", ip_address=ip_address or "")
