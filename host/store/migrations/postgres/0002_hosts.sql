-- Several hosts on one database (host/store/src/backend.rs, `Leases`): which hosts are live,
-- which host runs each task's turns, and the notices hosts send each other on the channel
-- `agentmesh`.

-- Each host, live while `expires` has not passed; it renews it while it runs.
CREATE TABLE agentmesh_hosts (
    id      text        PRIMARY KEY,
    expires timestamptz NOT NULL
);

-- Which host runs each task's turns: the lease holds while its owner is live. `active`: the
-- task is mid-turn (or waits in a review), so a host that takes it over must bring it back.
CREATE TABLE agentmesh_leases (
    task_id text    PRIMARY KEY,
    owner   text    NOT NULL,
    active  boolean NOT NULL DEFAULT false
);
CREATE INDEX agentmesh_leases_owner ON agentmesh_leases (owner);

-- Takes task `p_task`'s lease for host `p_host` unless another live host holds it. Returns the
-- holder afterwards, whether the task was mid-turn, and the host it was taken from (one no
-- longer live; NULL when the lease was free or `p_host`'s already). SQLSTATE AM002 when
-- `p_host` itself is not live (it must not take what it could not keep).
CREATE FUNCTION agentmesh_take_lease(
    p_task text, p_host text, OUT holder text, OUT was_active boolean, OUT taken_from text
) LANGUAGE plpgsql AS $$
DECLARE
    current text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM agentmesh_hosts WHERE id = p_host AND expires > now()) THEN
        RAISE EXCEPTION 'this host''s leases expired: it was not heard from in time'
            USING ERRCODE = 'AM002';
    END IF;
    SELECT owner, active INTO current, was_active FROM agentmesh_leases
        WHERE task_id = p_task FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO agentmesh_leases (task_id, owner) VALUES (p_task, p_host)
            ON CONFLICT (task_id) DO NOTHING;
        IF FOUND THEN
            holder := p_host;
            was_active := false;
        ELSE
            -- Another host inserted it meanwhile.
            SELECT owner, active INTO holder, was_active FROM agentmesh_leases
                WHERE task_id = p_task;
        END IF;
        RETURN;
    END IF;
    IF current = p_host THEN
        holder := p_host;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM agentmesh_hosts WHERE id = current AND expires > now()) THEN
        holder := current;
        RETURN;
    END IF;
    UPDATE agentmesh_leases SET owner = p_host WHERE task_id = p_task;
    holder := p_host;
    taken_from := current;
END
$$;

-- One task write, as in schema 1, fenced by the lease: with `p_owner`, SQLSTATE AM002, writing
-- nothing, when another live host holds task `p_task`'s lease (a host that lost it — it was not
-- heard from in time and another took the task over — writes nothing more); a free lease, or
-- one of a host no longer live, `p_owner` takes;
-- `p_active` is recorded on the lease; the write is announced on the channel `agentmesh` as
-- `w OWNER TASK`.
DROP FUNCTION agentmesh_write(text, bytea, bigint, bytea, bigint[], bytea[], bigint);
CREATE FUNCTION agentmesh_write(
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
    RETURN 1;
END
$$;

-- The tasks a live host must take over: those whose lease holder is no longer live and that
-- were mid-turn or have queued input, then those with queued input and no lease; at most
-- `p_limit`, skipping leases another host is taking right now.
CREATE FUNCTION agentmesh_orphans(p_host text, p_limit integer) RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY SELECT l.task_id FROM agentmesh_leases l
        WHERE l.owner <> p_host
          AND NOT EXISTS (SELECT 1 FROM agentmesh_hosts h
                          WHERE h.id = l.owner AND h.expires > now())
          AND (l.active OR EXISTS (SELECT 1 FROM agentmesh_queue q WHERE q.task_id = l.task_id))
        LIMIT p_limit FOR UPDATE SKIP LOCKED;
    RETURN QUERY SELECT DISTINCT q.task_id FROM agentmesh_queue q
        WHERE NOT EXISTS (SELECT 1 FROM agentmesh_leases l WHERE l.task_id = q.task_id)
        LIMIT p_limit;
END
$$;
