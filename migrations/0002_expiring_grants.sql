CREATE TABLE "credit_grants" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"amount" bigint NOT NULL,
	"remaining" bigint NOT NULL,
	"consumed_mark" bigint NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"expired_at" timestamp with time zone,
	"reason" text,
	"created_at" timestamp with time zone NOT NULL,
	CONSTRAINT "credit_grants_remaining_bound" CHECK ("credit_grants"."remaining" >= 0 AND "credit_grants"."remaining" <= "credit_grants"."amount")
);
--> statement-breakpoint
ALTER TABLE "credit_balances" ADD COLUMN "purchased_consumed" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX "credit_grants_active_idx" ON "credit_grants" USING btree ("deployment_id","expires_at") WHERE "credit_grants"."expired_at" IS NULL;