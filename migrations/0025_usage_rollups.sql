-- Usage rollups (docs/usage-analytics.md, "Rollups"): two tables the usage summary reads instead of
-- usage_records, kept exact by statement triggers on usage_records in the writing transaction; the
-- records already there are counted later, in batches (below).
CREATE TABLE "usage_rollup_days" (
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"day" timestamp with time zone NOT NULL,
	"end_user" text NOT NULL,
	"calls" bigint NOT NULL,
	"successful" bigint NOT NULL,
	"credits" bigint NOT NULL,
	"refunded" bigint NOT NULL,
	"input_tokens" bigint NOT NULL,
	"output_tokens" bigint NOT NULL,
	CONSTRAINT "usage_rollup_days_deployment_id_day_end_user_pk" PRIMARY KEY("deployment_id","day","end_user")
);
--> statement-breakpoint
CREATE TABLE "usage_rollup_hours" (
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"hour" timestamp with time zone NOT NULL,
	"tool_name" text NOT NULL,
	"action" text NOT NULL,
	"model" text NOT NULL,
	"calls" bigint NOT NULL,
	"successful" bigint NOT NULL,
	"credits" bigint NOT NULL,
	"refunded" bigint NOT NULL,
	"input_tokens" bigint NOT NULL,
	"output_tokens" bigint NOT NULL,
	CONSTRAINT "usage_rollup_hours_deployment_id_hour_tool_name_action_model_pk" PRIMARY KEY("deployment_id","hour","tool_name","action","model")
);
--> statement-breakpoint
CREATE INDEX "usage_rollup_days_org_idx" ON "usage_rollup_days" USING btree ("organization_id","day");--> statement-breakpoint
CREATE INDEX "usage_rollup_hours_org_idx" ON "usage_rollup_hours" USING btree ("organization_id","hour");--> statement-breakpoint
-- An AI call's tokens from its record's metadata (credits/ai-usage.ts writes them); anything else 0.
-- Checked before the cast, so no metadata a caller sent can make a write fail.
CREATE FUNCTION usage_record_tokens(metric text, metadata jsonb, field text) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN metric = 'ai_tokens' AND jsonb_typeof(metadata -> field) = 'number' AND (metadata ->> field) ~ '^[0-9]{1,15}$'
              THEN (metadata ->> field)::bigint ELSE 0 END
$$;
--> statement-breakpoint
-- Every statement that inserts usage records adds them to both rollups, grouped: one upsert per
-- rollup per statement (the money engine's batch writes its records in one statement).
CREATE FUNCTION usage_records_rollup_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO usage_rollup_hours AS r (organization_id, deployment_id, hour, tool_name, action, model, calls, successful, credits, refunded, input_tokens, output_tokens)
  SELECT organization_id, deployment_id, date_bin('1 hour'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00'), tool_name, metric, CASE WHEN metric = 'ai_tokens' THEN tool_name ELSE '' END,
         count(*), count(*) FILTER (WHERE success), COALESCE(sum(quantity) FILTER (WHERE success), 0),
         COALESCE(sum(refunded) FILTER (WHERE success), 0),
         COALESCE(sum(usage_record_tokens(metric, metadata, 'input_tokens')), 0),
         COALESCE(sum(usage_record_tokens(metric, metadata, 'output_tokens')), 0)
  FROM inserted GROUP BY 1, 2, 3, 4, 5, 6
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
  FROM inserted GROUP BY 1, 2, 3, 4
  ON CONFLICT (deployment_id, day, end_user) DO UPDATE SET
    calls = r.calls + EXCLUDED.calls, successful = r.successful + EXCLUDED.successful, credits = r.credits + EXCLUDED.credits,
    refunded = r.refunded + EXCLUDED.refunded, input_tokens = r.input_tokens + EXCLUDED.input_tokens,
    output_tokens = r.output_tokens + EXCLUDED.output_tokens;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
-- A statement that changes what a record counts (a refund's `refunded`) adds each record's difference.
-- A record's keys (time, deployment, tool, action, end user) are never changed.
CREATE FUNCTION usage_records_rollup_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  WITH d AS (
    SELECT n.organization_id, n.deployment_id, n."timestamp", n.tool_name, n.metric, n.mcp_user_id,
           n.success::int - o.success::int AS successful,
           CASE WHEN n.success THEN n.quantity ELSE 0 END - CASE WHEN o.success THEN o.quantity ELSE 0 END AS credits,
           CASE WHEN n.success THEN n.refunded ELSE 0 END - CASE WHEN o.success THEN o.refunded ELSE 0 END AS refunded,
           usage_record_tokens(n.metric, n.metadata, 'input_tokens') - usage_record_tokens(o.metric, o.metadata, 'input_tokens') AS input_tokens,
           usage_record_tokens(n.metric, n.metadata, 'output_tokens') - usage_record_tokens(o.metric, o.metadata, 'output_tokens') AS output_tokens
    FROM changed n JOIN unchanged o ON o.id = n.id
  ),
  moved AS (
    SELECT * FROM d WHERE successful <> 0 OR credits <> 0 OR refunded <> 0 OR input_tokens <> 0 OR output_tokens <> 0
  ),
  hours AS (
    INSERT INTO usage_rollup_hours AS r (organization_id, deployment_id, hour, tool_name, action, model, calls, successful, credits, refunded, input_tokens, output_tokens)
    SELECT organization_id, deployment_id, date_bin('1 hour'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00'), tool_name, metric, CASE WHEN metric = 'ai_tokens' THEN tool_name ELSE '' END, 0, sum(successful), sum(credits), sum(refunded), sum(input_tokens), sum(output_tokens)
    FROM moved GROUP BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (deployment_id, hour, tool_name, action, model) DO UPDATE SET
      calls = r.calls + EXCLUDED.calls, successful = r.successful + EXCLUDED.successful, credits = r.credits + EXCLUDED.credits,
      refunded = r.refunded + EXCLUDED.refunded, input_tokens = r.input_tokens + EXCLUDED.input_tokens,
      output_tokens = r.output_tokens + EXCLUDED.output_tokens
    RETURNING 1
  )
  INSERT INTO usage_rollup_days AS r (organization_id, deployment_id, day, end_user, calls, successful, credits, refunded, input_tokens, output_tokens)
  SELECT organization_id, deployment_id, date_bin('1 day'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00'), COALESCE(mcp_user_id, ''), 0, sum(successful), sum(credits), sum(refunded), sum(input_tokens), sum(output_tokens)
  FROM moved GROUP BY 1, 2, 3, 4
  ON CONFLICT (deployment_id, day, end_user) DO UPDATE SET
    calls = r.calls + EXCLUDED.calls, successful = r.successful + EXCLUDED.successful, credits = r.credits + EXCLUDED.credits,
      refunded = r.refunded + EXCLUDED.refunded, input_tokens = r.input_tokens + EXCLUDED.input_tokens,
      output_tokens = r.output_tokens + EXCLUDED.output_tokens;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER usage_records_rollup_insert AFTER INSERT ON "usage_records"
  REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION usage_records_rollup_insert();
--> statement-breakpoint
CREATE TRIGGER usage_records_rollup_update AFTER UPDATE ON "usage_records"
  REFERENCING OLD TABLE AS unchanged NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION usage_records_rollup_update();
--> statement-breakpoint
-- The records already there are not counted here, in one long statement whose locks would stop writes
-- for as long as it reads them: they are marked uncounted (a column default, no rewrite) and counted a
-- batch at a time by the usage-rollup-backfill worker (migration 0029, credits/rollup-backfill.ts).
ALTER TABLE "usage_records" ADD COLUMN "rolled_up" boolean DEFAULT false NOT NULL;
--> statement-breakpoint
ALTER TABLE "usage_records" ALTER COLUMN "rolled_up" SET DEFAULT true;
