DROP FUNCTION handoff.effect_pending();
