-- Services send their own unawaited emits (emit_direct checks who they are).
GRANT EXECUTE ON FUNCTION handoff.emit_direct_or_raise TO handoff_service;
