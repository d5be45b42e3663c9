"""The audit trail is append-only in the database too: on PostgreSQL a trigger refuses UPDATE and
DELETE of audit rows, whatever code path tries. (SQLite, the demo database, relies on the model guard.)"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION allot_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % on quotas_auditevent is not allowed', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER quotas_auditevent_append_only
    BEFORE UPDATE OR DELETE ON quotas_auditevent
    FOR EACH ROW EXECUTE FUNCTION allot_audit_append_only();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS quotas_auditevent_append_only ON quotas_auditevent;
DROP FUNCTION IF EXISTS allot_audit_append_only();
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD, params=None)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD, params=None)


class Migration(migrations.Migration):
    dependencies = [("quotas", "0001_initial")]
    operations = [migrations.RunPython(forward, backward)]
