"""Keyed chain links, and accounts open at a zero balance.

* `JournalEntry.chain_version`: NULL for the unkeyed sha256 links written so far, 2 for the
  HMAC links `post_entry` writes from now on (billing/ledger_chain.py). A nullable column
  without a default: SQLite adds it in place, so the triggers of 0002/0003 stay.
* `billing_account_opens_at_zero` — BEFORE INSERT on accounts refuses a non-zero cached
  balance: a balance moves only by postings (the balance cache trigger of 0002), so an
  `available` account inserted with 1000.00 for a tenant never topped up is refused by the
  database, for the application role as for anyone whose triggers fire.
"""

from django.db import migrations, models

PG_STATEMENTS = [
    r"""
CREATE OR REPLACE FUNCTION billing_account_opens_at_zero() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.balance <> 0 THEN
        RAISE EXCEPTION 'billing_account % opens at a zero balance (got %): balances move only '
            'by postings', NEW.code, NEW.balance
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;
""",
    """
CREATE TRIGGER billing_account_opens_at_zero BEFORE INSERT ON billing_account
    FOR EACH ROW EXECUTE FUNCTION billing_account_opens_at_zero();
""",
]

PG_DROP = [
    "DROP TRIGGER IF EXISTS billing_account_opens_at_zero ON billing_account;",
    "DROP FUNCTION IF EXISTS billing_account_opens_at_zero();",
]

SQLITE_STATEMENTS = [
    """
CREATE TRIGGER IF NOT EXISTS billing_account_opens_at_zero BEFORE INSERT ON billing_account
WHEN NEW.balance <> 0
BEGIN SELECT RAISE(ABORT, 'billing_account opens at a zero balance: balances move only by postings');
END;
""",
]

SQLITE_DROP = ["DROP TRIGGER IF EXISTS billing_account_opens_at_zero;"]


def install_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    statements = {"postgresql": PG_STATEMENTS, "sqlite": SQLITE_STATEMENTS}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, None)


def remove_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    statements = {"postgresql": PG_DROP, "sqlite": SQLITE_DROP}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, None)


class Migration(migrations.Migration):
    dependencies = [("billing", "0005_tenant_to_tenancy")]

    operations = [
        migrations.AddField(
            model_name="journalentry",
            name="chain_version",
            field=models.SmallIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(install_triggers, remove_triggers, elidable=False),
    ]
