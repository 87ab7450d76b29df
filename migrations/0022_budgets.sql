-- Budgets (docs/budgets.md): caps per organization, deployment, API key, end user or tool, and the window rows
-- the money engine counts them in; usage records and invocations name the windows they were counted in;
-- a balance row is marked when its organization has budgets, so a check reads them.
CREATE TABLE "budget_windows" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"budget_id" uuid NOT NULL,
	"subject" text DEFAULT '' NOT NULL,
	"window_start" timestamp with time zone NOT NULL,
	"window_end" timestamp with time zone NOT NULL,
	"spent_credits" bigint DEFAULT 0 NOT NULL,
	"spent_ai_tokens" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "budget_windows_spent" CHECK ("budget_windows"."spent_credits" >= 0 AND "budget_windows"."spent_ai_tokens" >= 0)
);
--> statement-breakpoint
CREATE TABLE "budgets" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"scope" text NOT NULL,
	"deployment_id" uuid,
	"api_key_id" uuid,
	"end_user_id" text,
	"tool_name" text,
	"limit_credits" bigint,
	"limit_ai_tokens" bigint,
	"window_kind" text NOT NULL,
	"mode" text NOT NULL,
	"alert_thresholds" integer[] DEFAULT '{80,100}' NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "budgets_scope" CHECK ("budgets"."scope" IN ('organization', 'deployment', 'api_key', 'end_user', 'tool')),
	CONSTRAINT "budgets_window" CHECK ("budgets"."window_kind" IN ('hour', 'day', 'week', 'month', 'period')),
	CONSTRAINT "budgets_mode" CHECK ("budgets"."mode" IN ('block', 'alert')),
	CONSTRAINT "budgets_limits" CHECK (("budgets"."limit_credits" IS NULL OR "budgets"."limit_credits" > 0) AND ("budgets"."limit_ai_tokens" IS NULL OR "budgets"."limit_ai_tokens" > 0)
      AND ("budgets"."limit_credits" IS NOT NULL OR "budgets"."limit_ai_tokens" IS NOT NULL)),
	CONSTRAINT "budgets_scope_ids" CHECK (("budgets"."scope" <> 'deployment' OR "budgets"."deployment_id" IS NOT NULL) AND (("budgets"."scope" = 'api_key') = ("budgets"."api_key_id" IS NOT NULL))
      AND (("budgets"."scope" = 'end_user') = ("budgets"."end_user_id" IS NOT NULL)) AND (("budgets"."scope" = 'tool') = ("budgets"."tool_name" IS NOT NULL)))
);
--> statement-breakpoint
ALTER TABLE "credit_balances" ADD COLUMN "has_budgets" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "invocations" ADD COLUMN "budget_windows" uuid[];--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "budget_windows" uuid[];--> statement-breakpoint
ALTER TABLE "budget_windows" ADD CONSTRAINT "budget_windows_budget_id_budgets_id_fk" FOREIGN KEY ("budget_id") REFERENCES "public"."budgets"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "budgets" ADD CONSTRAINT "budgets_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "budgets" ADD CONSTRAINT "budgets_deployment_id_deployments_id_fk" FOREIGN KEY ("deployment_id") REFERENCES "public"."deployments"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "budgets" ADD CONSTRAINT "budgets_api_key_id_api_keys_id_fk" FOREIGN KEY ("api_key_id") REFERENCES "public"."api_keys"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "budget_windows_key" ON "budget_windows" USING btree ("budget_id","subject","window_start");--> statement-breakpoint
CREATE INDEX "budget_windows_end_idx" ON "budget_windows" USING btree ("window_end");--> statement-breakpoint
CREATE INDEX "budgets_organization_idx" ON "budgets" USING btree ("organization_id");