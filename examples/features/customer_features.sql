-- The online features of examples/features/fraud.json, in a tenant's SQLite file, for the
-- lookup with "store": "sqlite" (as shipped, fraud.json reads the same customers from Feast's
-- local store: examples/features/feast/load.py):
--   sqlite3 features/acme.db < examples/features/customer_features.sql
--   SLUICE_LOOKUP_SQLITE='./features/{tenant}.db' sluice serve
-- event_time: epoch seconds (or an ISO-8601 time) of the record; the lookup's max_age_s
-- (two days) treats older records as missing, so they take the features' defaults.
CREATE TABLE IF NOT EXISTS customer_features (
    customer_id TEXT PRIMARY KEY,
    avg_amount_30d REAL,
    chargebacks_90d INTEGER,
    event_time REAL
);
INSERT OR REPLACE INTO customer_features VALUES
    ('c-1001', 42.5, 0, CAST(strftime('%s', 'now', '-1 hour') AS REAL)),
    ('c-1002', 310.0, 3, CAST(strftime('%s', 'now', '-6 hours') AS REAL)),
    ('c-1003', 18.0, 1, CAST(strftime('%s', 'now', '-30 days') AS REAL));
