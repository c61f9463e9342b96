-- Migration 1: the schema's own metadata.
--
-- {schema} is replaced by the quoted schema name (postgres.schema) before this runs; it runs in
-- one transaction with the row that records it in {schema}.schema_migrations, under the
-- migration advisory lock (crates/postgres/src/migrate.rs).
--
-- meta: one row per fact about this schema that every node reads, e.g. which release created it.
--   key        the fact's name
--   value      its value
--   updated_at when it was last written (the database's clock)

CREATE TABLE {schema}.meta (
    key        text PRIMARY KEY,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

INSERT INTO {schema}.meta (key, value) VALUES ('created_by', 'delayq migration 1');
