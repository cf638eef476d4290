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

-- One task write (`TaskLogs::write_buffered`) in one statement: take the queue entry (0, writing
-- nothing, when it is gone), append the events where the log ends (SQLSTATE AM001, writing
-- nothing, when they do not continue it), write the part and the head.
CREATE FUNCTION agentmesh_write(
    p_task text, p_head bytea, p_parts bigint, p_part bytea,
    p_seqs bigint[], p_events bytea[], p_take bigint
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    log_end bigint;
BEGIN
    IF p_take IS NOT NULL THEN
        DELETE FROM agentmesh_queue WHERE id = p_take;
        IF NOT FOUND THEN
            RETURN 0;
        END IF;
    END IF;
    IF cardinality(p_seqs) > 0 THEN
        SELECT coalesce(max(seq), 0) INTO log_end FROM agentmesh_events WHERE task_id = p_task;
        IF log_end + 1 <> p_seqs[1] THEN
            RAISE EXCEPTION 'task `%`: events from % do not continue its log', p_task, p_seqs[1]
                USING ERRCODE = 'AM001';
        END IF;
        INSERT INTO agentmesh_events (task_id, seq, body)
            SELECT p_task, s, b FROM unnest(p_seqs, p_events) AS e(s, b);
    END IF;
    IF p_part IS NOT NULL THEN
        INSERT INTO agentmesh_task_parts (task_id, n, body) VALUES (p_task, p_parts, p_part)
            ON CONFLICT (task_id, n) DO UPDATE SET body = excluded.body;
    END IF;
    INSERT INTO agentmesh_tasks (id, head, parts) VALUES (p_task, p_head, p_parts)
        ON CONFLICT (id) DO UPDATE SET head = excluded.head, parts = excluded.parts;
    RETURN 1;
END
$$;

-- `Queues::queue_durably` in one statement: remember the delivery id (NULL, queueing nothing,
-- when it is remembered until after `p_now`), queue the inputs in order, commit durably.
CREATE FUNCTION agentmesh_queue_inputs(
    p_delivery text, p_until bigint, p_now bigint,
    p_tasks text[], p_at bigint[], p_inputs bytea[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[] := '{}';
    new_id bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    IF p_delivery IS NOT NULL THEN
        INSERT INTO agentmesh_deliveries AS d (id, until_ms) VALUES (p_delivery, p_until)
            ON CONFLICT (id) DO UPDATE SET until_ms = excluded.until_ms
            WHERE d.until_ms <= p_now;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(p_tasks), 0) LOOP
        INSERT INTO agentmesh_queue (task_id, queued_at, input)
            VALUES (p_tasks[i], p_at[i], p_inputs[i]) RETURNING agentmesh_queue.id INTO new_id;
        ids := ids || new_id;
    END LOOP;
    RETURN ids;
END
$$;

-- `Durability::flush`: a transaction with an id, committed durably, waits until the write-ahead
-- log is on disk up to its commit, which covers every commit before it, whatever its session.
-- Concurrent callers share the server's fsyncs.
CREATE FUNCTION agentmesh_flush() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    PERFORM pg_current_xact_id();
END
$$;
