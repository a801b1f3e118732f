DROP INDEX handoff.receipts_by_age, handoff.consumer_guards_by_age,
           handoff.rejections_by_age, handoff.quarantine_closed_by_age;
DROP TABLE handoff.retention;
