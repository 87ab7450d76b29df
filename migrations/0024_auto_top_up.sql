-- Auto top-up (docs/billing.md, "Auto top-up"): an organization's setting, one row per top-up, an
-- auto top-up's credit purchase (no Checkout Session), and the line on each balance row with the
-- trigger that asks for a top-up when a deduction crosses it.
CREATE TABLE "auto_top_up_settings" (
	"organization_id" uuid PRIMARY KEY NOT NULL,
	"enabled" boolean DEFAULT false NOT NULL,
	"below_credits" bigint NOT NULL,
	"pack" text NOT NULL,
	"max_per_month" integer NOT NULL,
	"consecutive_failures" integer DEFAULT 0 NOT NULL,
	"disabled_reason" text,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "auto_top_up_settings_below_positive" CHECK ("auto_top_up_settings"."below_credits" >= 1),
	CONSTRAINT "auto_top_up_settings_max_positive" CHECK ("auto_top_up_settings"."max_per_month" >= 1)
);
--> statement-breakpoint
CREATE TABLE "auto_top_ups" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"status" text NOT NULL,
	"pack" text,
	"credits" bigint,
	"stripe_price_id" text,
	"amount" bigint,
	"currency" text,
	"stripe_payment_intent_id" text,
	"failure_code" text,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone,
	"last_error" text,
	"requested_at" timestamp with time zone NOT NULL,
	"started_at" timestamp with time zone,
	"settled_at" timestamp with time zone,
	CONSTRAINT "auto_top_ups_status" CHECK ("auto_top_ups"."status" IN ('requested', 'starting', 'started', 'succeeded', 'failed', 'skipped'))
);
--> statement-breakpoint
ALTER TABLE "credit_purchases" ALTER COLUMN "stripe_checkout_session_id" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "credit_balances" ADD COLUMN "auto_top_up_below" bigint;--> statement-breakpoint
ALTER TABLE "credit_balances" ADD COLUMN "auto_top_up_due_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "credit_purchases" ADD COLUMN "auto_top_up_id" uuid;--> statement-breakpoint
ALTER TABLE "auto_top_up_settings" ADD CONSTRAINT "auto_top_up_settings_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "auto_top_ups" ADD CONSTRAINT "auto_top_ups_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "auto_top_ups" ADD CONSTRAINT "auto_top_ups_deployment_id_deployments_id_fk" FOREIGN KEY ("deployment_id") REFERENCES "public"."deployments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "auto_top_ups_open_key" ON "auto_top_ups" USING btree ("deployment_id") WHERE "auto_top_ups"."status" IN ('requested', 'starting', 'started');--> statement-breakpoint
CREATE UNIQUE INDEX "auto_top_ups_payment_intent_key" ON "auto_top_ups" USING btree ("stripe_payment_intent_id");--> statement-breakpoint
CREATE INDEX "auto_top_ups_due_idx" ON "auto_top_ups" USING btree ("next_attempt_at") WHERE "auto_top_ups"."status" IN ('requested', 'starting');--> statement-breakpoint
CREATE INDEX "auto_top_ups_org_idx" ON "auto_top_ups" USING btree ("organization_id","requested_at");--> statement-breakpoint
CREATE UNIQUE INDEX "credit_purchases_auto_top_up_key" ON "credit_purchases" USING btree ("auto_top_up_id");--> statement-breakpoint
ALTER TABLE "credit_purchases" ADD CONSTRAINT "credit_purchases_one_source" CHECK (("credit_purchases"."stripe_checkout_session_id" IS NULL) <> ("credit_purchases"."auto_top_up_id" IS NULL));--> statement-breakpoint
-- A spending change of a balance row (more monthly used, fewer purchased credits, more held) that
-- leaves its available credits below the organization's line asks for one auto top-up: when it
-- crossed the line, or when the row was marked due (enabled below the line; an hour after a failure).
-- One open top-up per deployment (auto_top_ups_open_key): a second ask while one is open does nothing.
-- A BEFORE trigger, so the mark is cleared in the same row version the deduction writes.
CREATE FUNCTION credit_balances_auto_top_up() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  after_available bigint;
  before_available bigint;
  asked uuid;
BEGIN
  IF NEW.monthly_allocation IS NULL
     OR NOT (NEW.monthly_used > OLD.monthly_used OR NEW.purchased_balance < OLD.purchased_balance OR NEW.reserved > OLD.reserved) THEN
    RETURN NEW;
  END IF;
  after_available := GREATEST(0, NEW.monthly_allocation - NEW.monthly_used) + NEW.purchased_balance - NEW.reserved;
  IF after_available >= NEW.auto_top_up_below THEN
    RETURN NEW;
  END IF;
  before_available := CASE WHEN OLD.monthly_allocation IS NULL THEN NULL
                           ELSE GREATEST(0, OLD.monthly_allocation - OLD.monthly_used) + OLD.purchased_balance - OLD.reserved END;
  IF before_available IS NULL OR before_available >= NEW.auto_top_up_below
     OR (NEW.auto_top_up_due_at IS NOT NULL AND NEW.updated_at >= NEW.auto_top_up_due_at) THEN
    INSERT INTO auto_top_ups (organization_id, deployment_id, status, requested_at, next_attempt_at)
    VALUES (NEW.organization_id, NEW.deployment_id, 'requested', NEW.updated_at, NEW.updated_at)
    ON CONFLICT DO NOTHING
    RETURNING id INTO asked;
    IF asked IS NOT NULL THEN
      NEW.auto_top_up_due_at := NULL;
    END IF;
  END IF;
  RETURN NEW;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER credit_balances_auto_top_up
  BEFORE UPDATE ON "credit_balances"
  FOR EACH ROW WHEN (NEW.auto_top_up_below IS NOT NULL)
  EXECUTE FUNCTION credit_balances_auto_top_up();
