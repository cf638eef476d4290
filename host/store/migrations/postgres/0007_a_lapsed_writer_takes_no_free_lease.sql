-- Schema 7. Schema 6 kept a lapsed host (not heard from within its lease: its turn is presumed
-- dead) from taking a lease over, but a lease nobody held any more it still took: when another
-- host had taken the task over meanwhile, finished its turn and stopped (which lets an idle
-- task's lease go), the lapsed host's stale write landed after that host's turn. Now a lapsed
-- writer writes only a task whose lease it still holds; a live one takes a free lease, or one
-- of a holder no longer live, as before. Otherwise AM002, writing nothing.
--
-- Whether the writer is live is read together with whether other hosts are registered (the
-- announcement's question), in one look at the hosts after the registration lock.

CREATE OR REPLACE FUNCTION agentmesh_write(
    p_task text, p_head bytea, p_parts bigint, p_part bytea,
    p_first bigint, p_last bigint, p_events bytea, p_take bigint, p_owner text, p_active boolean
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    log_end bigint;
    writer_live boolean := false;
    others boolean := false;
BEGIN
    IF p_owner IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(7018690069354017652);
        SELECT coalesce(bool_or(id = p_owner AND expires > now()), false),
               coalesce(bool_or(id <> p_owner), false)
            INTO writer_live, others
            FROM agentmesh_hosts;
        IF writer_live THEN
            INSERT INTO agentmesh_leases AS l (task_id, owner, active)
                VALUES (p_task, p_owner, p_active)
                ON CONFLICT (task_id) DO UPDATE SET owner = excluded.owner, active = excluded.active
                WHERE l.owner = excluded.owner
                   OR NOT EXISTS (SELECT 1 FROM agentmesh_hosts h
                                  WHERE h.id = l.owner AND h.expires > now());
        ELSE
            UPDATE agentmesh_leases SET active = p_active
                WHERE task_id = p_task AND owner = p_owner;
        END IF;
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
    IF p_events IS NOT NULL THEN
        SELECT coalesce(max(seq), 0) INTO log_end FROM agentmesh_events WHERE task_id = p_task;
        IF log_end + 1 <> p_first THEN
            RAISE EXCEPTION 'task `%`: events from % do not continue its log', p_task, p_first
                USING ERRCODE = 'AM001';
        END IF;
        INSERT INTO agentmesh_events (task_id, seq, body) VALUES (p_task, p_last, p_events);
    END IF;
    IF p_part IS NOT NULL THEN
        INSERT INTO agentmesh_task_parts (task_id, n, body) VALUES (p_task, p_parts, p_part)
            ON CONFLICT (task_id, n) DO UPDATE SET body = excluded.body;
    END IF;
    INSERT INTO agentmesh_tasks (id, head, parts) VALUES (p_task, p_head, p_parts)
        ON CONFLICT (id) DO UPDATE SET head = excluded.head, parts = excluded.parts;
    IF others THEN
        PERFORM pg_notify('agentmesh', 'w ' || p_owner || ' ' || p_task);
    END IF;
    IF EXISTS (SELECT 1 FROM agentmesh_queue WHERE task_id = p_task) THEN
        RETURN 1;
    END IF;
    RETURN 2;
END
$$;
