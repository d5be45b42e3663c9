"""The mail backend when none is configured outside debug: nothing is sent, and nothing of a message's
body is written anywhere (Django's console backend would print one-time password links to the web
server's log). Each unsent message is logged by its subject and recipients only, so an operator sees
that notifications are not going out and sets ``ALLOT_MAIL_BACKEND``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.core.mail.backends.base import BaseEmailBackend

log = logging.getLogger("allot.mail")


class UnsentBackend(BaseEmailBackend):
    def send_messages(self, email_messages: Sequence[Any]) -> int:
        for message in email_messages:
            log.warning(
                "mail not sent (set ALLOT_MAIL_BACKEND to send it): %r to %s",
                message.subject,
                ", ".join(message.recipients()),
            )
        return 0
