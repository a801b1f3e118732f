REVOKE ALL ON FUNCTION handoff.emit_direct_for, handoff.emit_http_for,
                       handoff.credential_tenant, handoff.lock_service_for FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.emit_direct_for TO handoff_service;
