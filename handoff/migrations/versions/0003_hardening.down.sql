-- The lifecycle columns stay (the upgrade adds them IF NOT EXISTS): the
-- credential checks that read them keep working, and no revocation is
-- silently undone by a downgrade.
DROP FUNCTION handoff._emit;
ALTER FUNCTION handoff._emit_checked RENAME TO _emit;
DROP FUNCTION handoff._id_problem, handoff._label_problem, handoff._instant_problem,
              handoff._service_lock;
ALTER TABLE handoff.services DROP CONSTRAINT services_name_rule,
                             DROP CONSTRAINT services_tenant_rule;
