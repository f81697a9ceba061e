-- The database role the application runs as: not a superuser, not the owner of any table.
--
-- Run once per database as its owner (the role that runs `manage.py migrate`), after the
-- migrations, and again after migrations that add tables (or rely on the default privileges
-- below, which cover tables the owner creates later):
--
--     psql "$OWNER_DATABASE_URL" -f deploy/app_role.sql
--     psql "$OWNER_DATABASE_URL" -c "ALTER ROLE geo_app PASSWORD '...'"
--
-- Then web, workers and dispatcher use DATABASE_URL=postgres://geo_app:...@host/db.
--
-- What it cannot do, by construction (tests/ops/test_app_role.py):
-- * SET session_replication_role (superuser only), so the ledger's triggers always fire;
-- * TRUNCATE (not granted; the triggers guard UPDATE and DELETE row by row, TRUNCATE
--   bypasses row triggers), DROP or ALTER any table (owner only), CREATE in the schema.
-- * setval / ALTER SEQUENCE: sequences get USAGE (nextval) and SELECT, not UPDATE, so ids
--   never go back (an id a deleted ledger row had would be handed out again);
-- * ALTER TABLE ... DISABLE TRIGGER (owner only); `check_ledger` also reports a disabled one.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'geo_app') THEN
        CREATE ROLE geo_app LOGIN;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO geo_app', current_database());
END $$;

ALTER ROLE geo_app NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;

REVOKE CREATE ON SCHEMA public FROM geo_app;
GRANT USAGE ON SCHEMA public TO geo_app;
REVOKE TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA public FROM geo_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO geo_app;
REVOKE UPDATE ON ALL SEQUENCES IN SCHEMA public FROM geo_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO geo_app;

ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO geo_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    REVOKE UPDATE ON SEQUENCES FROM geo_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO geo_app;
