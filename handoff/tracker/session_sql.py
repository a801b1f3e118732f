"""Statements of the web UI's sessions (migration 0014)."""

from __future__ import annotations

OPEN = """
SELECT tenant_id, service FROM handoff.ui_session_open(
    %(role)s, %(secret_hash)s, %(id_hash)s, %(lifetime)s, %(idle)s)
"""
FIND = "SELECT tenant_id, service, db_role, secret_hash FROM handoff.ui_session(%(id_hash)s)"
# The reader transaction's identity statement (read_model.py), for a session.
READER = "SELECT tenant_id, service FROM handoff.ui_reader_session(%(id_hash)s)"
USE_FORM = """
INSERT INTO handoff.ui_form_uses (session_hash, nonce)
SELECT id_hash, %(nonce)s FROM handoff.ui_sessions WHERE id_hash = %(id_hash)s
ON CONFLICT DO NOTHING
RETURNING 1
"""
END = "DELETE FROM handoff.ui_sessions WHERE id_hash = %(id_hash)s"
# The ended sessions picked by a subquery: on Citus (where ui_sessions is a local
# table in the metadata) a DELETE whose own condition mixes now() with a column is
# refused ("STABLE functions used in UPDATE queries cannot be called with column
# references"), and the sweep failed every round.
PURGE = """
DELETE FROM handoff.ui_sessions
 WHERE id_hash IN (SELECT id_hash FROM handoff.ui_sessions
                    WHERE expires_at < now() OR last_seen_at < now() - idle)
"""
