DROP FUNCTION handoff._fold_flow_marked(integer, interval);
