CREATE TABLE "credit_purchases" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"pack" text NOT NULL,
	"credits" bigint NOT NULL,
	"stripe_checkout_session_id" text NOT NULL,
	"stripe_price_id" text NOT NULL,
	"stripe_payment_intent_id" text,
	"amount_total" bigint,
	"currency" text,
	"granted_at" timestamp with time zone,
	"ledger_id" bigint,
	"refund_share" bigint DEFAULT 0 NOT NULL,
	"credits_taken_back" bigint DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	CONSTRAINT "credit_purchases_credits_positive" CHECK ("credit_purchases"."credits" > 0),
	CONSTRAINT "credit_purchases_refund_bound" CHECK ("credit_purchases"."credits_taken_back" >= 0 AND "credit_purchases"."credits_taken_back" <= "credit_purchases"."refund_share" AND "credit_purchases"."refund_share" <= "credit_purchases"."credits")
);
--> statement-breakpoint
CREATE TABLE "meter_event_outbox" (
	"identifier" uuid PRIMARY KEY NOT NULL,
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"stripe_customer_id" text NOT NULL,
	"value" bigint NOT NULL,
	"event_at" timestamp with time zone NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone NOT NULL,
	"processor_ref" text,
	"reported_at" timestamp with time zone,
	"last_error" text,
	CONSTRAINT "meter_event_outbox_status" CHECK ("meter_event_outbox"."status" IN ('pending', 'reported', 'failed'))
);
--> statement-breakpoint
CREATE TABLE "stripe_events" (
	"id" text PRIMARY KEY NOT NULL,
	"type" text NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"payload" jsonb NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone,
	"last_error" text,
	"organization_id" uuid,
	"received_at" timestamp with time zone NOT NULL,
	"processed_at" timestamp with time zone,
	CONSTRAINT "stripe_events_status" CHECK ("stripe_events"."status" IN ('pending', 'processed', 'ignored'))
);
--> statement-breakpoint
ALTER TABLE "subscriptions" ADD COLUMN "last_event_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "credit_purchases" ADD CONSTRAINT "credit_purchases_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_purchases" ADD CONSTRAINT "credit_purchases_deployment_id_deployments_id_fk" FOREIGN KEY ("deployment_id") REFERENCES "public"."deployments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "credit_purchases_session_key" ON "credit_purchases" USING btree ("stripe_checkout_session_id");--> statement-breakpoint
CREATE UNIQUE INDEX "credit_purchases_payment_intent_key" ON "credit_purchases" USING btree ("stripe_payment_intent_id");--> statement-breakpoint
CREATE INDEX "credit_purchases_org_idx" ON "credit_purchases" USING btree ("organization_id","created_at");--> statement-breakpoint
CREATE INDEX "meter_event_outbox_due_idx" ON "meter_event_outbox" USING btree ("next_attempt_at") WHERE "meter_event_outbox"."status" = 'pending';--> statement-breakpoint
CREATE INDEX "stripe_events_due_idx" ON "stripe_events" USING btree ("next_attempt_at") WHERE "stripe_events"."status" = 'pending';