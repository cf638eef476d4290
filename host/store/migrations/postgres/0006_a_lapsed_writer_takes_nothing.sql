-- Schema 6. A task write took over the lease of a holder no longer live whoever wrote, so a
-- host that had itself lapsed (not heard from within its lease: its turn is presumed dead)
-- could write into a task another host had taken over in the meantime, as soon as that one
-- lapsed too: two turns of the task overlapped. Now a write takes over a lease only while its
-- writer is live, as `agentmesh_take_lease` already required; otherwise AM002, writing nothing.

-- Function: `agentmesh_write`, the lease's takeover branch requiring a live writer (its current
-- text is in functions.sql).
