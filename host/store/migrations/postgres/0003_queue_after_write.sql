-- A task write says whether the task's queue is empty once it is done (host/store/src/lib.rs,
-- `Written::queue_empty`), so that the host that runs the task's turns need not ask again:
-- `agentmesh_write` returns 0 (the entry to take is gone: nothing written), 1 (written, input
-- still queued) or 2 (written, nothing queued). Otherwise as in schema 2.
CREATE OR REPLACE FUNCTION agentmesh_write(
    p_task text, p_head bytea, p_parts bigint, p_part bytea,
    p_seqs bigint[], p_events bytea[], p_take bigint, p_owner text, p_active boolean
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    log_end bigint;
BEGIN
    IF p_owner IS NOT NULL THEN
        -- The lease row's lock orders this write against a takeover: one that committed first
        -- fences it; one that comes later waits for it and then reads it.
        INSERT INTO agentmesh_leases AS l (task_id, owner, active)
            VALUES (p_task, p_owner, p_active)
            ON CONFLICT (task_id) DO UPDATE SET owner = excluded.owner, active = excluded.active
            WHERE l.owner = excluded.owner
               OR NOT EXISTS (SELECT 1 FROM agentmesh_hosts h
                              WHERE h.id = l.owner AND h.expires > now());
        IF NOT FOUND THEN
            RAISE EXCEPTION 'task `%`: this host no longer holds its lease', p_task
                USING ERRCODE = 'AM002';
        END IF;
    END IF;
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
    IF p_owner IS NOT NULL THEN
        PERFORM pg_notify('agentmesh', 'w ' || p_owner || ' ' || p_task);
    END IF;
    IF EXISTS (SELECT 1 FROM agentmesh_queue WHERE task_id = p_task) THEN
        RETURN 1;
    END IF;
    RETURN 2;
END
$$;
