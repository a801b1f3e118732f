DROP TABLE handoff.import_progress;
