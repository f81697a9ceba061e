"""History cannot be extended: postings join an entry only while it is being written.

PostgreSQL:
* `billing_journalentry_stamp_xact` — BEFORE INSERT on entries records the creating
  transaction's id in `created_xact` (whatever the INSERT said).
* `billing_posting_same_xact` / `billing_samplesettlement_same_xact` — BEFORE INSERT refuses
  a posting or settlement whose entry was created by another transaction, i.e. an entry that
  is already committed. (Appending a balanced pair to an old top-up passed the zero-sum
  trigger and raised a balance; now it is refused.)

SQLite (embedded demo) has no transaction ids; writers are serialised, so the same guarantee
takes two triggers: a posting or settlement may only go to the newest entry, and never to an
entry whose postings already balance (`post_entry` inserts credits before debits, so no
proper prefix of an entry balances). `billing_account_balance_derived` refuses a cached
balance that differs from the sum of the account's postings (the balance cache trigger of
0002 always writes that sum; a direct UPDATE does not).

The entries' hash chain (`chain_prev`, `chain_hash`) is written by `billing.ledger_chain`
and verified by `manage.py check_ledger`.
"""

from django.db import migrations

PG_STATEMENTS = [
    r"""
CREATE OR REPLACE FUNCTION billing_entry_stamp_xact() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.created_xact := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END $$;
""",
    r"""
CREATE OR REPLACE FUNCTION billing_same_xact_as_entry() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    creator bigint;
BEGIN
    SELECT created_xact INTO creator FROM billing_journalentry WHERE id = NEW.entry_id;
    IF creator IS DISTINCT FROM pg_current_xact_id()::text::bigint THEN
        RAISE EXCEPTION 'journal entry % is committed: % rows are added only by the '
            'transaction that created it', NEW.entry_id, TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;
""",
    """
CREATE TRIGGER billing_journalentry_stamp_xact BEFORE INSERT ON billing_journalentry
    FOR EACH ROW EXECUTE FUNCTION billing_entry_stamp_xact();
""",
    """
CREATE TRIGGER billing_posting_same_xact BEFORE INSERT ON billing_posting
    FOR EACH ROW EXECUTE FUNCTION billing_same_xact_as_entry();
""",
    """
CREATE TRIGGER billing_samplesettlement_same_xact BEFORE INSERT ON billing_samplesettlement
    FOR EACH ROW EXECUTE FUNCTION billing_same_xact_as_entry();
""",
]

PG_DROP = [
    "DROP TRIGGER IF EXISTS billing_journalentry_stamp_xact ON billing_journalentry;",
    "DROP TRIGGER IF EXISTS billing_posting_same_xact ON billing_posting;",
    "DROP TRIGGER IF EXISTS billing_samplesettlement_same_xact ON billing_samplesettlement;",
    "DROP FUNCTION IF EXISTS billing_entry_stamp_xact();",
    "DROP FUNCTION IF EXISTS billing_same_xact_as_entry();",
]

SQLITE_STATEMENTS = [
    *(
        f"""
CREATE TRIGGER IF NOT EXISTS {table}_newest_entry BEFORE INSERT ON {table}
WHEN NEW.entry_id IS NOT (SELECT max(id) FROM billing_journalentry)
BEGIN SELECT RAISE(ABORT, '{table}: rows are added only to the entry being written'); END;
"""
        for table in ("billing_posting", "billing_samplesettlement")
    ),
    """
CREATE TRIGGER IF NOT EXISTS billing_posting_entry_complete BEFORE INSERT ON billing_posting
WHEN (SELECT count(*) FROM billing_posting WHERE entry_id = NEW.entry_id) >= 2
 AND NOT EXISTS (
    SELECT 1 FROM billing_posting p JOIN billing_account a ON a.id = p.account_id
     WHERE p.entry_id = NEW.entry_id GROUP BY a.currency HAVING sum(p.amount) <> 0)
BEGIN SELECT RAISE(ABORT, 'billing_posting: the entry is complete; postings are not appended');
END;
""",
    """
CREATE TRIGGER IF NOT EXISTS billing_account_balance_derived
BEFORE UPDATE OF balance ON billing_account
WHEN NEW.balance IS NOT (
    SELECT coalesce(sum(amount), 0) FROM billing_posting WHERE account_id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'billing_account balance moves only by postings'); END;
""",
]

SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS billing_posting_newest_entry;",
    "DROP TRIGGER IF EXISTS billing_samplesettlement_newest_entry;",
    "DROP TRIGGER IF EXISTS billing_posting_entry_complete;",
    "DROP TRIGGER IF EXISTS billing_account_balance_derived;",
]


def install_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    statements = {"postgresql": PG_STATEMENTS, "sqlite": SQLITE_STATEMENTS}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, None)


def remove_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    statements = {"postgresql": PG_DROP, "sqlite": SQLITE_DROP}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, None)


class Migration(migrations.Migration):
    dependencies = [("billing", "0002_ledger_triggers")]

    operations = [
        migrations.RunPython(install_triggers, remove_triggers, elidable=False),
    ]
