-- Records older than the rollups are counted a batch at a time (docs/usage-analytics.md, "Rollups"):
-- `rolled_up` says whether a record is counted. Migration 0025 marks the records it found uncounted;
-- an installation whose 0025 counted them in one statement (before this) gets the column with every
-- record counted. The triggers count only counted records, and the update trigger adds a record whole
-- when its flag turns true: the usage-rollup-backfill worker (credits/rollup-backfill.ts) does that.
CREATE TABLE "usage_rollup_backfill" (
	"id" integer PRIMARY KEY NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"relation" text,
	"next_page" bigint DEFAULT 0 NOT NULL,
	"done_at" timestamp with time zone
);
--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN IF NOT EXISTS "rolled_up" boolean DEFAULT true NOT NULL;
--> statement-breakpoint
-- Done at once when no record waits (a new installation, or one whose 0025 counted them all).
INSERT INTO "usage_rollup_backfill" ("id", "started_at", "done_at")
SELECT 1, now(), CASE WHEN EXISTS (SELECT 1 FROM "usage_records" WHERE NOT "rolled_up") THEN NULL ELSE now() END;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION usage_records_rollup_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO usage_rollup_hours AS r (organization_id, deployment_id, hour, tool_name, action, model, calls, successful, credits, refunded, input_tokens, output_tokens)
  SELECT organization_id, deployment_id, date_bin('1 hour'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00'), tool_name, metric, CASE WHEN metric = 'ai_tokens' THEN tool_name ELSE '' END,
         count(*), count(*) FILTER (WHERE success), COALESCE(sum(quantity) FILTER (WHERE success), 0),
         COALESCE(sum(refunded) FILTER (WHERE success), 0),
         COALESCE(sum(usage_record_tokens(metric, metadata, 'input_tokens')), 0),
         COALESCE(sum(usage_record_tokens(metric, metadata, 'output_tokens')), 0)
  FROM inserted WHERE rolled_up GROUP BY 1, 2, 3, 4, 5, 6
  ON CONFLICT (deployment_id, hour, tool_name, action, model) DO UPDATE SET
    calls = r.calls + EXCLUDED.calls, successful = r.successful + EXCLUDED.successful, credits = r.credits + EXCLUDED.credits,
    refunded = r.refunded + EXCLUDED.refunded, input_tokens = r.input_tokens + EXCLUDED.input_tokens,
    output_tokens = r.output_tokens + EXCLUDED.output_tokens;
  INSERT INTO usage_rollup_days AS r (organization_id, deployment_id, day, end_user, calls, successful, credits, refunded, input_tokens, output_tokens)
  SELECT organization_id, deployment_id, date_bin('1 day'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00'), COALESCE(mcp_user_id, ''),
         count(*), count(*) FILTER (WHERE success), COALESCE(sum(quantity) FILTER (WHERE success), 0),
         COALESCE(sum(refunded) FILTER (WHERE success), 0),
         COALESCE(sum(usage_record_tokens(metric, metadata, 'input_tokens')), 0),
         COALESCE(sum(usage_record_tokens(metric, metadata, 'output_tokens')), 0)
  FROM inserted WHERE rolled_up GROUP BY 1, 2, 3, 4
  ON CONFLICT (deployment_id, day, end_user) DO UPDATE SET
    calls = r.calls + EXCLUDED.calls, successful = r.successful + EXCLUDED.successful, credits = r.credits + EXCLUDED.credits,
    refunded = r.refunded + EXCLUDED.refunded, input_tokens = r.input_tokens + EXCLUDED.input_tokens,
    output_tokens = r.output_tokens + EXCLUDED.output_tokens;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION usage_records_rollup_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  WITH d AS (
    -- What the record counts now less what it counted before; a record not rolled up counts nothing,
    -- so the backfill's flag turning true adds the whole record, once.
    SELECT n.organization_id, n.deployment_id, n."timestamp", n.tool_name, n.metric, n.mcp_user_id,
           n.rolled_up::int - o.rolled_up::int AS calls,
           (n.rolled_up AND n.success)::int - (o.rolled_up AND o.success)::int AS successful,
           CASE WHEN n.rolled_up AND n.success THEN n.quantity ELSE 0 END - CASE WHEN o.rolled_up AND o.success THEN o.quantity ELSE 0 END AS credits,
           CASE WHEN n.rolled_up AND n.success THEN n.refunded ELSE 0 END - CASE WHEN o.rolled_up AND o.success THEN o.refunded ELSE 0 END AS refunded,
           CASE WHEN n.rolled_up THEN usage_record_tokens(n.metric, n.metadata, 'input_tokens') ELSE 0 END
             - CASE WHEN o.rolled_up THEN usage_record_tokens(o.metric, o.metadata, 'input_tokens') ELSE 0 END AS input_tokens,
           CASE WHEN n.rolled_up THEN usage_record_tokens(n.metric, n.metadata, 'output_tokens') ELSE 0 END
             - CASE WHEN o.rolled_up THEN usage_record_tokens(o.metric, o.metadata, 'output_tokens') ELSE 0 END AS output_tokens
    FROM changed n JOIN unchanged o ON o.id = n.id
  ),
  moved AS (
    SELECT * FROM d WHERE calls <> 0 OR successful <> 0 OR credits <> 0 OR refunded <> 0 OR input_tokens <> 0 OR output_tokens <> 0
  ),
  hours AS (
    INSERT INTO usage_rollup_hours AS r (organization_id, deployment_id, hour, tool_name, action, model, calls, successful, credits, refunded, input_tokens, output_tokens)
    SELECT organization_id, deployment_id, date_bin('1 hour'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00'), tool_name, metric, CASE WHEN metric = 'ai_tokens' THEN tool_name ELSE '' END, sum(calls), sum(successful), sum(credits), sum(refunded), sum(input_tokens), sum(output_tokens)
    FROM moved GROUP BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (deployment_id, hour, tool_name, action, model) DO UPDATE SET
      calls = r.calls + EXCLUDED.calls, successful = r.successful + EXCLUDED.successful, credits = r.credits + EXCLUDED.credits,
      refunded = r.refunded + EXCLUDED.refunded, input_tokens = r.input_tokens + EXCLUDED.input_tokens,
      output_tokens = r.output_tokens + EXCLUDED.output_tokens
    RETURNING 1
  )
  INSERT INTO usage_rollup_days AS r (organization_id, deployment_id, day, end_user, calls, successful, credits, refunded, input_tokens, output_tokens)
  SELECT organization_id, deployment_id, date_bin('1 day'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00'), COALESCE(mcp_user_id, ''), sum(calls), sum(successful), sum(credits), sum(refunded), sum(input_tokens), sum(output_tokens)
  FROM moved GROUP BY 1, 2, 3, 4
  ON CONFLICT (deployment_id, day, end_user) DO UPDATE SET
    calls = r.calls + EXCLUDED.calls, successful = r.successful + EXCLUDED.successful, credits = r.credits + EXCLUDED.credits,
      refunded = r.refunded + EXCLUDED.refunded, input_tokens = r.input_tokens + EXCLUDED.input_tokens,
      output_tokens = r.output_tokens + EXCLUDED.output_tokens;
  RETURN NULL;
END;
$$;
