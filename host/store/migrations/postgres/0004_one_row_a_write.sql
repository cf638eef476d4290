-- Schema 4. A task write's events are one row of `agentmesh_events`, as sled keeps them: `seq`
-- is the last one's number and `body` the JSON array of them (rows written before stay one
-- event each, their `body` that event's JSON object; readers take both). A write is one index
-- entry and one row however many events it appends.
--
-- And a write tells the other hosts of itself (`pg_notify`, which wakes every listening
-- session, this host's own too) only when another host is registered on the database. A host
-- registers, once it listens, under the lock `agentmesh_register_host` takes exclusively and
-- every write holds shared while it looks: a write that looked before a host registered has
-- committed before that host reads anything, and one that looks later sees it.

-- Keeps host `p_host` live for `p_secs` more seconds, registering it when it is not.
CREATE FUNCTION agentmesh_register_host(p_host text, p_secs double precision)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE agentmesh_hosts SET expires = now() + make_interval(secs => p_secs)
        WHERE id = p_host;
    IF NOT FOUND THEN
        -- 0x6167656e74687374 spells "agenthst".
        PERFORM pg_advisory_xact_lock(7018690069354017652);
        INSERT INTO agentmesh_hosts (id, expires)
            VALUES (p_host, now() + make_interval(secs => p_secs))
            ON CONFLICT (id) DO UPDATE SET expires = excluded.expires;
    END IF;
END
$$;

-- As in schema 3 (returns 0: the entry to take is gone, nothing written; 1: written, input
-- still queued; 2: written, nothing queued), with events `p_first`..`p_last` as one row
-- (`p_events`, their JSON array; NULL for none).
DROP FUNCTION agentmesh_write(text, bytea, bigint, bytea, bigint[], bytea[], bigint, text, boolean);
CREATE FUNCTION agentmesh_write(
    p_task text, p_head bytea, p_parts bigint, p_part bytea,
    p_first bigint, p_last bigint, p_events bytea, p_take bigint, p_owner text, p_active boolean
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    log_end bigint;
BEGIN
    IF p_owner IS NOT NULL THEN
        -- Taken before any row lock, so that a host registering waits for no write that
        -- waits for another.
        PERFORM pg_advisory_xact_lock_shared(7018690069354017652);
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
    IF p_owner IS NOT NULL
       AND EXISTS (SELECT 1 FROM agentmesh_hosts WHERE id <> p_owner) THEN
        PERFORM pg_notify('agentmesh', 'w ' || p_owner || ' ' || p_task);
    END IF;
    IF EXISTS (SELECT 1 FROM agentmesh_queue WHERE task_id = p_task) THEN
        RETURN 1;
    END IF;
    RETURN 2;
END
$$;
