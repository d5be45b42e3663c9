from typing import Any

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """The hooks, connected once: sign-in lockouts into the audit trail; an audit row that changes
        the policy starts enforcement (quotas.services.enforce), which the tasks module queues."""
        from axes.signals import user_locked_out

        from quotas.services.audit import audit_written
        from quotas.services.enforce import enforce_soon, enforcement_due
        from quotas.tasks import queue_enforcement

        user_locked_out.connect(_locked_out, dispatch_uid="allot-signin-locked-out")
        audit_written.connect(enforce_soon, dispatch_uid="allot-enforce-on-audit")
        enforcement_due.connect(queue_enforcement, dispatch_uid="allot-queue-enforcement")


def _locked_out(sender: Any, request: Any = None, username: str = "", ip_address: str = "", **_: Any) -> None:
    from quotas.services.signin import record_lockout

    record_lockout(username=username or "", ip_address=ip_address or "")
