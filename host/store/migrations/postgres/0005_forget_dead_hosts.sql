-- Schema 5. A host that died (stopped without ending its part: killed, its machine gone) left
-- its registration in `agentmesh_hosts` for ever, and while it was there every other host
-- announced each of its writes to it (see schema 4's `agentmesh_write`), a lone survivor too.
-- Now a host that renews itself forgets every host whose registration expired more than a
-- lease ago (its own lease period: hosts on one database share it). Leases are unaffected: a
-- host with no registration is as not live as one whose registration expired.
--
-- A host that was only stalled that long and comes back registers anew, and is told so
-- (`true`): it may have missed writes announced to nobody while it was forgotten, so it reads
-- again whatever it keeps of other hosts' tasks. Writes it missed committed before its new
-- registration did (the registration lock of schema 4), so what it reads then holds them.

-- Keeps host `p_host` live for `p_secs` more seconds; returns whether it registered it anew
-- (it was not registered: it starts, or it was forgotten).
DROP FUNCTION agentmesh_register_host(text, double precision);
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
    -- 0x6167656e74687374 spells "agenthst".
    PERFORM pg_advisory_xact_lock(7018690069354017652);
    INSERT INTO agentmesh_hosts (id, expires)
        VALUES (p_host, now() + make_interval(secs => p_secs))
        ON CONFLICT (id) DO UPDATE SET expires = excluded.expires;
    RETURN true;
END
$$;
