from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request


class ReadAuthenticatedWriteAdmin(BasePermission):
    """Any signed-in user reads; platform admins (staff) write. Per-unit roles come with the portal."""

    message = "Only platform admins may change this. Ask a platform admin, or use a change request."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or bool(user.is_staff)
