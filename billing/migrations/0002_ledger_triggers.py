"""Database-enforced ledger invariants.

PostgreSQL:
* `billing_posting_balanced` — a DEFERRABLE INITIALLY DEFERRED constraint trigger: at COMMIT
  every journal entry touched must have postings summing to zero per currency.
* `billing_entry_has_postings` — same, fired by the entry: an entry needs at least two postings.
* BEFORE UPDATE OR DELETE triggers refuse changes to postings, journal entries, settlements,
  prices, price versions and statements (TRUNCATE is not covered: it is an administrator's
  tool, and the test runner's flush uses it).
* `billing_posting_balance_cache` — AFTER INSERT on postings adds the amount to the account's
  cached balance when the account tracks it; the CHECK `account_tracked_balance_non_negative`
  then refuses an overdraft. `billing_account_guard` refuses any other change to an account
  (identity columns, deletion, or a balance written by anything but that trigger).

SQLite (embedded demo): the same append-only and balance-cache triggers exist, but SQLite has
no deferred constraint triggers, so the zero-sum rule is checked in Python only
(`billing.services.post_entry`) and by `manage.py check_ledger`.

Any later migration that rebuilds one of these tables on SQLite (Django copies the table)
drops its triggers and must run `install_triggers` again.
"""

from django.db import migrations

APPEND_ONLY_TABLES = [
    "billing_posting",
    "billing_journalentry",
    "billing_samplesettlement",
    "billing_price",
    "billing_priceversion",
    "billing_upstreamstatement",
    "billing_upstreamstatementline",
]

PG_FUNCTIONS = [
    s.strip()
    for s in r"""
CREATE OR REPLACE FUNCTION billing_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% rows are append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END $$;

CREATE OR REPLACE FUNCTION billing_assert_entry_balanced(eid bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT a.currency, sum(p.amount) AS total INTO bad
      FROM billing_posting p JOIN billing_account a ON a.id = p.account_id
     WHERE p.entry_id = eid
     GROUP BY a.currency
    HAVING sum(p.amount) <> 0
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'journal entry % is unbalanced: postings in % sum to %, not 0',
            eid, bad.currency, bad.total
            USING ERRCODE = 'check_violation';
    END IF;
END $$;

CREATE OR REPLACE FUNCTION billing_posting_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM billing_assert_entry_balanced(NEW.entry_id);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION billing_entry_has_postings() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    SELECT count(*) INTO n FROM billing_posting WHERE entry_id = NEW.id;
    IF n < 2 THEN
        RAISE EXCEPTION 'journal entry % has % posting(s); at least two are required', NEW.id, n
            USING ERRCODE = 'check_violation';
    END IF;
    PERFORM billing_assert_entry_balanced(NEW.id);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION billing_posting_balance_cache() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE billing_account SET balance = balance + NEW.amount
     WHERE id = NEW.account_id AND tracks_balance;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION billing_account_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'billing_account rows are never deleted'
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF (NEW.code, NEW.kind, NEW.currency, NEW.tenant_id, NEW.run_id, NEW.platform,
        NEW.tracks_balance, NEW.created_at)
       IS DISTINCT FROM
       (OLD.code, OLD.kind, OLD.currency, OLD.tenant_id, OLD.run_id, OLD.platform,
        OLD.tracks_balance, OLD.created_at) THEN
        RAISE EXCEPTION 'billing_account % identity is immutable', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    -- Depth 1 is a statement issued by a client; the balance cache trigger runs at depth 2.
    IF NEW.balance IS DISTINCT FROM OLD.balance AND pg_trigger_depth() < 2 THEN
        RAISE EXCEPTION 'billing_account % balance moves only by postings', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;
""".split("\n\n")
    if s.strip()
]

PG_TRIGGERS = (
    [
        f"""
CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION billing_refuse_change();
"""
        for table in APPEND_ONLY_TABLES
    ]
    + [
        """
CREATE CONSTRAINT TRIGGER billing_posting_balanced AFTER INSERT ON billing_posting
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION billing_posting_balanced();
""",
        """
CREATE CONSTRAINT TRIGGER billing_entry_has_postings AFTER INSERT ON billing_journalentry
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION billing_entry_has_postings();
""",
        """
CREATE TRIGGER billing_posting_balance_cache AFTER INSERT ON billing_posting
    FOR EACH ROW EXECUTE FUNCTION billing_posting_balance_cache();
""",
        """
CREATE TRIGGER billing_account_guard BEFORE UPDATE OR DELETE ON billing_account
    FOR EACH ROW EXECUTE FUNCTION billing_account_guard();
""",
    ]
)

PG_DROP = (
    [f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};" for table in APPEND_ONLY_TABLES]
    + [
        "DROP TRIGGER IF EXISTS billing_posting_balanced ON billing_posting;",
        "DROP TRIGGER IF EXISTS billing_entry_has_postings ON billing_journalentry;",
        "DROP TRIGGER IF EXISTS billing_posting_balance_cache ON billing_posting;",
        "DROP TRIGGER IF EXISTS billing_account_guard ON billing_account;",
        "DROP FUNCTION IF EXISTS billing_refuse_change();",
        "DROP FUNCTION IF EXISTS billing_posting_balanced();",
        "DROP FUNCTION IF EXISTS billing_entry_has_postings();",
        "DROP FUNCTION IF EXISTS billing_assert_entry_balanced(bigint);",
        "DROP FUNCTION IF EXISTS billing_posting_balance_cache();",
        "DROP FUNCTION IF EXISTS billing_account_guard();",
    ]
)

SQLITE_TRIGGERS = (
    [
        f"""
CREATE TRIGGER IF NOT EXISTS {table}_no_update BEFORE UPDATE ON {table}
BEGIN SELECT RAISE(ABORT, '{table} rows are append-only: UPDATE refused'); END;
"""
        for table in APPEND_ONLY_TABLES
    ]
    + [
        f"""
CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table}
BEGIN SELECT RAISE(ABORT, '{table} rows are append-only: DELETE refused'); END;
"""
        for table in APPEND_ONLY_TABLES
    ]
    + [
        """
CREATE TRIGGER IF NOT EXISTS billing_posting_balance_cache AFTER INSERT ON billing_posting
BEGIN
    UPDATE billing_account SET balance = balance + NEW.amount
     WHERE id = NEW.account_id AND tracks_balance;
END;
""",
        """
CREATE TRIGGER IF NOT EXISTS billing_account_identity
BEFORE UPDATE OF code, kind, currency, tenant_id, run_id, platform, tracks_balance
ON billing_account
BEGIN SELECT RAISE(ABORT, 'billing_account identity is immutable'); END;
""",
        """
CREATE TRIGGER IF NOT EXISTS billing_account_no_delete BEFORE DELETE ON billing_account
BEGIN SELECT RAISE(ABORT, 'billing_account rows are never deleted'); END;
""",
    ]
)

SQLITE_DROP = (
    [f"DROP TRIGGER IF EXISTS {t}_no_update;" for t in APPEND_ONLY_TABLES]
    + [f"DROP TRIGGER IF EXISTS {t}_no_delete;" for t in APPEND_ONLY_TABLES]
    + [
        "DROP TRIGGER IF EXISTS billing_posting_balance_cache;",
        "DROP TRIGGER IF EXISTS billing_account_identity;",
        "DROP TRIGGER IF EXISTS billing_account_no_delete;",
    ]
)


def install_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for statement in [*PG_FUNCTIONS, *PG_TRIGGERS]:
            schema_editor.execute(statement, None)
    elif vendor == "sqlite":
        for statement in SQLITE_TRIGGERS:
            schema_editor.execute(statement, None)


def remove_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    statements = {"postgresql": PG_DROP, "sqlite": SQLITE_DROP}.get(vendor, [])
    for statement in statements:
        schema_editor.execute(statement, None)


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(install_triggers, remove_triggers, elidable=False)]
