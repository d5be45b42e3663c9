from django.apps import AppConfig


class AccountingConfig(AppConfig):
    name = "accounting"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Its parts of the portal's pages (accounting/portal/panels.py)."""
        from accounting.portal.panels import register

        register()
