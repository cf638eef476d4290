-- Schema 9. Since schema 8 the queuing tells the holder of each task another host leases; the
-- queuing host did not know which tasks those were, so it also woke its own runner for each,
-- which found the lease elsewhere (a round trip) and told the holder again (another), and the
-- holder read its queue twice. Now the function says which tasks it told, and tells only
-- holders that are live (a dead one hears nothing; the queuing host's runner takes its task
-- over as before).

-- Function: `agentmesh_queue_inputs` returns `ids`, the queued inputs' ids in order (NULL for a
-- duplicate delivery), and `told`, the tasks whose lease another live host holds, each told
-- `q HOLDER TASK` on commit. Its current text is in functions.sql.
