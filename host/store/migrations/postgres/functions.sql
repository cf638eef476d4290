-- The store's functions, as the newest schema version has them: each a multi-step operation of
-- the backend traits (host/store/src/backend.rs) in one statement, so one round trip.
--
-- The migrations hold the tables and say what each version changed; this file holds only the
-- functions' current text. The transaction that brings a database to the newest version drops
-- every `agentmesh_` function and runs this file (host/store/src/postgres.rs,
-- `apply_migrations`), so a database that was at any version ends with these and no other. A
-- database already at the newest version is not touched: a change here comes with a new
-- migration (a comment saying what changed is enough), which the unit test
-- `functions_change_only_with_a_new_schema_version` holds to.

-- Host `p_host`'s task write (`TaskLogs::write_buffered`), fenced by task `p_task`'s lease.
--
-- With `p_owner`, SQLSTATE AM002, writing nothing, when the writer may not write the task: a
-- live writer takes a free lease, or one of a holder no longer live, and keeps its own; a
-- writer that has itself lapsed (not heard from within its lease: its turn is presumed dead)
-- writes only a task whose lease it still holds, since another host may have taken the task
-- over, run a turn and let the lease go meanwhile. `p_active` (mid-turn) is recorded on the
-- lease.
--
-- Then: take the queue entry `p_take` (returns 0, writing nothing, when it is gone); append
-- events `p_first`..`p_last` as one row (`p_events`, their JSON array, NULL for none; SQLSTATE
-- AM001, writing nothing, when they do not continue the log); write the part and the head.
-- Returns 1 when input is still queued for the task, 2 when nothing is (`Written::queue_empty`).
--
-- The write is announced on the channel `agentmesh` as `w OWNER TASK` only when another host
-- is registered. A host registers, once it listens, under the lock `agentmesh_register_host`
-- takes exclusively and every write holds shared while it looks: a write that looked before a
-- host registered has committed before that host reads anything, and one that looks later
-- sees it. Whether the writer is live is read in the same look at the hosts.
CREATE FUNCTION agentmesh_write(
    p_task text, p_head bytea, p_parts bigint, p_part bytea,
    p_first bigint, p_last bigint, p_events bytea, p_take bigint, p_owner text, p_active boolean
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    log_end bigint;
    writer_live boolean := false;
    others boolean := false;
BEGIN
    IF p_owner IS NOT NULL THEN
        -- Taken before any row lock, so that a host registering waits for no write that
        -- waits for another. 0x6167656e74687374 spells "agenthst".
        PERFORM pg_advisory_xact_lock_shared(7018690069354017652);
        SELECT coalesce(bool_or(id = p_owner AND expires > now()), false),
               coalesce(bool_or(id <> p_owner), false)
            INTO writer_live, others
            FROM agentmesh_hosts;
        -- The lease row's lock orders this write against a takeover: one that committed first
        -- fences it; one that comes later waits for it and then reads it.
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

-- `Queues::queue_durably` by host `p_host` in one statement, committed durably: remember the
-- delivery id (`ids` NULL, queueing nothing, when it is remembered until after `p_now`), queue
-- the inputs in order (`ids`: theirs), and tell the holder of each task another live host
-- leases, in this transaction (`q HOLDER TASK`, delivered on commit or not at all; `told`:
-- those tasks). A task whose lease the queuing host holds, nobody holds or a dead host holds is
-- not announced: the queuing host's runner takes it (over).
CREATE FUNCTION agentmesh_queue_inputs(
    p_delivery text, p_until bigint, p_now bigint,
    p_tasks text[], p_at bigint[], p_inputs bytea[], p_host text,
    OUT ids bigint[], OUT told text[]
) LANGUAGE plpgsql AS $$
DECLARE
    new_id bigint;
    holder record;
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    told := '{}';
    IF p_delivery IS NOT NULL THEN
        INSERT INTO agentmesh_deliveries AS d (id, until_ms) VALUES (p_delivery, p_until)
            ON CONFLICT (id) DO UPDATE SET until_ms = excluded.until_ms
            WHERE d.until_ms <= p_now;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    ids := '{}';
    FOR i IN 1 .. coalesce(cardinality(p_tasks), 0) LOOP
        INSERT INTO agentmesh_queue (task_id, queued_at, input)
            VALUES (p_tasks[i], p_at[i], p_inputs[i]) RETURNING agentmesh_queue.id INTO new_id;
        ids := ids || new_id;
    END LOOP;
    FOR holder IN SELECT l.owner, l.task_id FROM agentmesh_leases l
                  JOIN agentmesh_hosts h ON h.id = l.owner AND h.expires > now()
                  WHERE l.task_id = ANY(p_tasks) AND l.owner <> p_host LOOP
        PERFORM pg_notify('agentmesh', 'q ' || holder.owner || ' ' || holder.task_id);
        told := told || holder.task_id;
    END LOOP;
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

-- Keeps host `p_host` live for `p_secs` more seconds; returns whether it registered it anew (it
-- was not registered: it starts, or it was forgotten, and may have missed writes announced to
-- nobody meanwhile). Forgets every other host whose registration expired more than `p_secs`
-- ago (hosts on one database share their lease period), so that writes are not announced to
-- dead hosts for ever; a host with no registration is as not live as one whose registration
-- expired. Registering takes the lock `agentmesh_write` holds shared while it looks.
CREATE FUNCTION agentmesh_register_host(p_host text, p_secs double precision)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM agentmesh_hosts
        WHERE id <> p_host AND expires < now() - make_interval(secs => p_secs);
    UPDATE agentmesh_hosts SET expires = now() + make_interval(secs => p_secs)
        WHERE id = p_host;
    IF FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(7018690069354017652);
    INSERT INTO agentmesh_hosts (id, expires)
        VALUES (p_host, now() + make_interval(secs => p_secs))
        ON CONFLICT (id) DO UPDATE SET expires = excluded.expires;
    RETURN true;
END
$$;
