DROP FUNCTION handoff.ui_session_open, handoff.ui_reader_session, handoff.ui_session;
DROP TABLE handoff.ui_form_uses, handoff.ui_sessions;
