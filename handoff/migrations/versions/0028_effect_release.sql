REVOKE ALL ON FUNCTION handoff.effect_release, handoff.effect_release_for FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.effect_release, handoff.effect_release_for
    TO handoff_service;
