-- Schema 8. Input queued for a task another host holds was announced to that host only by a
-- message the queuing host sent after its commit: a host that went down between the two left
-- the input, acknowledged, unseen by a holder that believed the task's queue empty, until
-- something else woke the task. Now the queuing itself tells the holder, in its transaction:
-- `q HOLDER TASK` is delivered on commit or not at all. A task whose lease the queuing host
-- holds, or nobody holds, is not announced (a host alone announces nothing).

-- `Queues::queue_durably` by host `p_host`: schema 1's function, then the announcements.
CREATE FUNCTION agentmesh_queue_inputs(
    p_delivery text, p_until bigint, p_now bigint,
    p_tasks text[], p_at bigint[], p_inputs bytea[], p_host text
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
    holder record;
BEGIN
    ids := agentmesh_queue_inputs(p_delivery, p_until, p_now, p_tasks, p_at, p_inputs);
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    FOR holder IN SELECT l.owner, l.task_id FROM agentmesh_leases l
                  WHERE l.task_id = ANY(p_tasks) AND l.owner <> p_host LOOP
        PERFORM pg_notify('agentmesh', 'q ' || holder.owner || ' ' || holder.task_id);
    END LOOP;
    RETURN ids;
END
$$;
