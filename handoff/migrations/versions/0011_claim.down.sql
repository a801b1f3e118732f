DROP FUNCTION handoff.consumer_claim(jsonb, text[], text);
ALTER FUNCTION handoff.reader_session(text, bytea) RESET search_path;
ALTER FUNCTION handoff.reader_services() RESET search_path;
ALTER FUNCTION handoff.relay_backlog(integer) RESET search_path;
