REVOKE ALL ON FUNCTION handoff.effect_pending FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.effect_pending TO handoff_service;
