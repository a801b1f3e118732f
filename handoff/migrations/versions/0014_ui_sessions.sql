-- Sessions for the web UI, instead of the service credential in a cookie (issue 22).
--
-- The cookie used to hold the raw credential, which is also the service's
-- database password. Now it holds an opaque random id; only sha256(id) is
-- stored. A session belongs to one service and remembers the credential it
-- was opened with (its hash, as the services table holds it): rotating the
-- credential, revoking it or removing the service ends every session of it,
-- as do sign-out, the absolute expiry and the idle timeout.
CREATE TABLE handoff.ui_sessions (
    id_hash      bytea       PRIMARY KEY,
    tenant_id    text        NOT NULL,
    service      text        NOT NULL,
    secret_hash  bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    idle         interval    NOT NULL,
    FOREIGN KEY (tenant_id, service) REFERENCES handoff.services (tenant_id, name)
        ON DELETE CASCADE
) WITH (fillfactor = 70);  -- last_seen_at is updated in place (HOT)
CREATE INDEX ui_sessions_of_service ON handoff.ui_sessions (tenant_id, service);
CREATE INDEX ui_sessions_by_expiry ON handoff.ui_sessions (expires_at);

-- The one-time forms of a session (the operate page's actions): a form's
-- nonce is recorded when it is used, and a second use is refused.
CREATE TABLE handoff.ui_form_uses (
    session_hash bytea       NOT NULL REFERENCES handoff.ui_sessions ON DELETE CASCADE,
    nonce        text        NOT NULL,
    used_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_hash, nonce)
);

-- A live session's service, or no row: unknown, expired, idle too long, or
-- its credential rotated, revoked or removed since. Its last use is noted
-- at most once a minute (a write per page view would be a write per read).
CREATE FUNCTION handoff.ui_session(p_id_hash bytea)
RETURNS TABLE (tenant_id text, service text, db_role text, secret_hash bytea)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
DECLARE
    v record;
BEGIN
    SELECT u.tenant_id, u.service, s.db_role, s.secret_hash, u.last_seen_at INTO v
      FROM ui_sessions u
      JOIN services s ON s.tenant_id = u.tenant_id AND s.name = u.service
     WHERE u.id_hash = p_id_hash AND s.secret_hash = u.secret_hash AND s.revoked_at IS NULL
       AND u.expires_at > now() AND u.last_seen_at > now() - u.idle;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v.last_seen_at < now() - interval '1 minute' THEN
        UPDATE ui_sessions SET last_seen_at = now() WHERE id_hash = p_id_hash;
    END IF;
    RETURN QUERY SELECT v.tenant_id, v.service, v.db_role, v.secret_hash;
END
$$;

-- The reader's form of it: accepts a session for this transaction as
-- reader_session accepts a credential (sets the tenant the reader may see).
CREATE FUNCTION handoff.ui_reader_session(p_id_hash bytea)
RETURNS TABLE (tenant_id text, service text)
LANGUAGE sql SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT set_config('handoff.tenant', s.tenant_id, true), s.service
      FROM handoff.ui_session(p_id_hash) s;
$$;

-- Sign-in: a session for an active credential, or no row.
CREATE FUNCTION handoff.ui_session_open(p_role text, p_secret_hash bytea, p_id_hash bytea,
                                        p_lifetime interval, p_idle interval)
RETURNS TABLE (tenant_id text, service text)
LANGUAGE sql SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    INSERT INTO handoff.ui_sessions AS u (id_hash, tenant_id, service, secret_hash, expires_at,
                                          idle)
    SELECT p_id_hash, s.tenant_id, s.name, s.secret_hash, now() + p_lifetime, p_idle
      FROM handoff.services s
     WHERE s.db_role = p_role AND s.secret_hash = p_secret_hash AND s.revoked_at IS NULL
    RETURNING u.tenant_id, u.service;
$$;

REVOKE ALL ON FUNCTION handoff.ui_session, handoff.ui_reader_session, handoff.ui_session_open
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.ui_reader_session TO handoff_reader;
