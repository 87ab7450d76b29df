CREATE TABLE "ai_reservations" (
	"id" uuid PRIMARY KEY NOT NULL,
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"model" text NOT NULL,
	"model_class" text NOT NULL,
	"prompt_tokens" bigint NOT NULL,
	"output_allowance" bigint NOT NULL,
	"tokens_held" bigint NOT NULL,
	"credits_held" bigint NOT NULL,
	"status" text NOT NULL,
	"usage_id" uuid,
	"expires_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "ai_reservations_status" CHECK ("ai_reservations"."status" IN ('held', 'settled', 'released', 'expired')),
	CONSTRAINT "ai_reservations_nonneg" CHECK ("ai_reservations"."tokens_held" >= 0 AND "ai_reservations"."credits_held" >= 0)
);
--> statement-breakpoint
ALTER TABLE "credit_balances" ADD COLUMN "ai_tokens_over_limit" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "credit_balances" ADD COLUMN "ai_tokens_reserved" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "credit_balances" ADD COLUMN "ai_credits_reserved" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "ai_reservations" ADD CONSTRAINT "ai_reservations_deployment_id_deployments_id_fk" FOREIGN KEY ("deployment_id") REFERENCES "public"."deployments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "ai_reservations_held_expiry_idx" ON "ai_reservations" USING btree ("expires_at") WHERE "ai_reservations"."status" = 'held';--> statement-breakpoint
CREATE INDEX "ai_reservations_created_idx" ON "ai_reservations" USING btree ("created_at");--> statement-breakpoint
ALTER TABLE "credit_balances" ADD CONSTRAINT "credit_balances_ai_reserved_nonneg" CHECK ("credit_balances"."ai_tokens_reserved" >= 0 AND "credit_balances"."ai_credits_reserved" >= 0);--> statement-breakpoint
ALTER TABLE "credit_balances" ADD CONSTRAINT "credit_balances_ai_credits_within_reserved" CHECK ("credit_balances"."ai_credits_reserved" <= "credit_balances"."reserved");--> statement-breakpoint
ALTER TABLE "credit_balances" ADD CONSTRAINT "credit_balances_ai_over_bound" CHECK ("credit_balances"."ai_tokens_over_limit" >= 0 AND "credit_balances"."ai_tokens_over_limit" <= "credit_balances"."ai_tokens_used");