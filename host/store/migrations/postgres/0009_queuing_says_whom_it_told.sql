-- Schema 9. Since schema 8 the queuing tells the holder of each task another host leases; the
-- queuing host did not know which tasks those were, so it also woke its own runner for each,
-- which found the lease elsewhere (a round trip) and told the holder again (another), and the
-- holder read its queue twice. Now the function says which tasks it told, and tells only
-- holders that are live (a dead one hears nothing; the queuing host's runner takes its task
-- over as before).

-- `Queues::queue_durably` by host `p_host`: schema 1's function, then the announcements.
-- `ids`: the queued inputs' ids in order (NULL for a duplicate delivery); `told`: the tasks
-- whose lease another live host holds, each told `q HOLDER TASK` on commit.
DROP FUNCTION agentmesh_queue_inputs(text, bigint, bigint, text[], bigint[], bytea[], text);
CREATE FUNCTION agentmesh_queue_inputs(
    p_delivery text, p_until bigint, p_now bigint,
    p_tasks text[], p_at bigint[], p_inputs bytea[], p_host text,
    OUT ids bigint[], OUT told text[]
) LANGUAGE plpgsql AS $$
DECLARE
    holder record;
BEGIN
    ids := agentmesh_queue_inputs(p_delivery, p_until, p_now, p_tasks, p_at, p_inputs);
    told := '{}';
    IF ids IS NULL THEN
        RETURN;
    END IF;
    FOR holder IN SELECT l.owner, l.task_id FROM agentmesh_leases l
                  JOIN agentmesh_hosts h ON h.id = l.owner AND h.expires > now()
                  WHERE l.task_id = ANY(p_tasks) AND l.owner <> p_host LOOP
        PERFORM pg_notify('agentmesh', 'q ' || holder.owner || ' ' || holder.task_id);
        told := told || holder.task_id;
    END LOOP;
END
$$;
