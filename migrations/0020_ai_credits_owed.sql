-- What a provider's over-report left unpaid (docs/ai-proxy.md, "What a provider's over-report costs").
ALTER TABLE "credit_balances" ADD COLUMN "credits_owed" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "credit_balances" ADD CONSTRAINT "credit_balances_owed_nonneg" CHECK ("credit_balances"."credits_owed" >= 0);--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "credits_short" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_records" ADD CONSTRAINT "usage_records_short_nonneg" CHECK ("usage_records"."credits_short" >= 0);--> statement-breakpoint
CREATE INDEX "usage_records_owing_idx" ON "usage_records" USING btree ("deployment_id","timestamp","id") WHERE "usage_records"."credits_short" > 0;
