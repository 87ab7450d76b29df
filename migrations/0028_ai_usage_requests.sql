-- AI request ids in their own unpartitioned table (docs/usage-analytics.md, "Partitions"): usage_records
-- is partitioned by month, and a unique index there must include the month. The existing AI records'
-- ids are copied before the unique index on usage_records goes; a settle runs with its deployment's
-- balance row locked, so no second record of the same request can be written meanwhile.
CREATE TABLE "ai_usage_requests" (
	"deployment_id" uuid NOT NULL,
	"request_id" text NOT NULL,
	"usage_id" uuid NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	CONSTRAINT "ai_usage_requests_deployment_id_request_id_pk" PRIMARY KEY("deployment_id","request_id")
);
--> statement-breakpoint
INSERT INTO "ai_usage_requests" ("deployment_id", "request_id", "usage_id", "created_at")
SELECT "deployment_id", "invocation_id", "id", "timestamp" FROM "usage_records"
WHERE "metric" = 'ai_tokens' AND "invocation_id" IS NOT NULL
ON CONFLICT DO NOTHING;
--> statement-breakpoint
DROP INDEX "usage_records_ai_request";
