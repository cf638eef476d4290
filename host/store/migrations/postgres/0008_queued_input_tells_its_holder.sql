-- Schema 8. Input queued for a task another host holds was announced to that host only by a
-- message the queuing host sent after its commit: a host that went down between the two left
-- the input, acknowledged, unseen by a holder that believed the task's queue empty, until
-- something else woke the task. Now the queuing itself tells the holder, in its transaction:
-- `q HOLDER TASK` is delivered on commit or not at all. A task whose lease the queuing host
-- holds, or nobody holds, is not announced (a host alone announces nothing).

-- Function: `agentmesh_queue_inputs` with the queuing host `p_host`: schema 1's function, then the
-- announcements (its current text is in functions.sql).
