-- pgtasks 0016: the store's identity (several stores behind one App).
-- Placeholders: {schema} (quoted identifier).
--
-- One row: the store's number and a uid, made once. Job and workflow ids of store N
-- lie in [N << 48, (N + 1) << 48): an id names its store, and an App with several
-- stores routes get_job(id), cancel(id) and the dashboard by the id alone. An existing
-- install is store 0 and keeps its ids; the sequences gain a maximum, so a store that
-- used up its range fails loudly instead of issuing another store's ids. `pgtasks
-- migrate` renumbers a store that has issued no id yet (the second store of an App
-- starts as 0 here and becomes 1 there); see pgtasks/_app/stores.py.

-- pgtasks:step transaction
CREATE TABLE {schema}.instance (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    store_no   integer     NOT NULL DEFAULT 0 CHECK (store_no BETWEEN 0 AND 32766),
    uid        uuid        NOT NULL DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {schema}.instance DEFAULT VALUES;
ALTER SEQUENCE {schema}.jobs_id_seq MAXVALUE 281474976710655;
ALTER SEQUENCE {schema}.workflows_id_seq MAXVALUE 281474976710655;
