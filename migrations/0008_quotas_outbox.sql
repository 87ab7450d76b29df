CREATE TABLE "outbox_events" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid,
	"type" text NOT NULL,
	"data" jsonb NOT NULL,
	"dedupe_key" text,
	"created_at" timestamp with time zone NOT NULL,
	"dispatched_at" timestamp with time zone
);
--> statement-breakpoint
ALTER TABLE "outbox_events" ADD CONSTRAINT "outbox_events_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "outbox_events_dedupe_key" ON "outbox_events" USING btree ("dedupe_key");--> statement-breakpoint
CREATE INDEX "outbox_events_pending_idx" ON "outbox_events" USING btree ("created_at") WHERE "outbox_events"."dispatched_at" IS NULL;--> statement-breakpoint
CREATE INDEX "outbox_events_org_idx" ON "outbox_events" USING btree ("organization_id","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "usage_records_ai_request" ON "usage_records" USING btree ("deployment_id","invocation_id") WHERE "usage_records"."metric" = 'ai_tokens';