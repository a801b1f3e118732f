DROP FUNCTION handoff.effect_release_for, handoff.effect_release;
