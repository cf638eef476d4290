-- The store's tables: one per area of the backend traits (host/store/src/backend.rs).
-- Values are the JSON bytes their callers encode, kept as given.

-- Task records: the head as last written, and how many parts it counts.
CREATE TABLE agentmesh_tasks (
    id     text   PRIMARY KEY,
    head   bytea  NOT NULL,
    parts  bigint NOT NULL
);

-- A record's parts, numbered from 1; a record reads the first `parts` of them.
CREATE TABLE agentmesh_task_parts (
    task_id text   NOT NULL,
    n       bigint NOT NULL,
    body    bytea  NOT NULL,
    PRIMARY KEY (task_id, n)
);

-- Each task's append-only event log.
CREATE TABLE agentmesh_events (
    task_id text   NOT NULL,
    seq     bigint NOT NULL,
    body    bytea  NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- Each task's queue of inputs, in `queued_at` order, then arrival (`id`).
CREATE TABLE agentmesh_queue (
    id        bigserial PRIMARY KEY,
    task_id   text   NOT NULL,
    queued_at bigint NOT NULL,
    input     bytea  NOT NULL
);
CREATE INDEX agentmesh_queue_order ON agentmesh_queue (task_id, queued_at, id);

-- Delivery ids, remembered until `until_ms` (epoch milliseconds).
CREATE TABLE agentmesh_deliveries (
    id       text   PRIMARY KEY,
    until_ms bigint NOT NULL
);
CREATE INDEX agentmesh_deliveries_until ON agentmesh_deliveries (until_ms);

-- The host's own records, by namespace and key.
CREATE TABLE agentmesh_state (
    ns    text  NOT NULL,
    key   text  NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (ns, key)
);

-- The plugins' key-value store, by scope.
CREATE TABLE agentmesh_kv (
    scope text  NOT NULL,
    key   text  NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (scope, key)
);

-- Unique ids, growing across restarts: each value starts a block of 1024 that one store handle
-- hands out without a round trip.
CREATE SEQUENCE agentmesh_ids INCREMENT BY 1024;

-- Functions: `agentmesh_write`, one task write (`TaskLogs::write_buffered`) in one statement;
-- `agentmesh_queue_inputs`, `Queues::queue_durably` in one statement; `agentmesh_flush`,
-- `Durability::flush`. Their current text is in functions.sql.
