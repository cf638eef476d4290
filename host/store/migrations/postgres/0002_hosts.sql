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

-- Functions: `agentmesh_take_lease`, which takes a task's lease unless another live host holds
-- it; `agentmesh_orphans`, the tasks a live host must take over; and `agentmesh_write` fenced
-- by the lease and announced to the other hosts. Their current text is in functions.sql.
