-- Porting from the AWS design (handoff import dynamodb): where each parallel
-- scan segment of an import got to, so a stopped or failed import resumes
-- instead of starting over (its inserts are idempotent as well).
CREATE TABLE handoff.import_progress (
    source      text        NOT NULL,   -- e.g. dynamodb:<table>
    segment     integer     NOT NULL,
    segments    integer     NOT NULL,
    last_key    jsonb,                  -- the scan's LastEvaluatedKey; NULL before the first page
    items       bigint      NOT NULL DEFAULT 0,
    done        boolean     NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, segment)
);
