"""Pure policy core of the admission app (no Django; filled in by its issue)."""
