CREATE TABLE "template_deployments" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"template_id" uuid NOT NULL,
	"name" text NOT NULL,
	"subdomain" text NOT NULL,
	"custom_domain" text,
	"config" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"deployment_url" text,
	"last_error" text,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone,
	"leased_until" timestamp with time zone,
	"created_by" uuid,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "template_deployments_status" CHECK ("template_deployments"."status" IN ('pending', 'deploying', 'active', 'failed')),
	CONSTRAINT "template_deployments_attempts_nonneg" CHECK ("template_deployments"."attempts" >= 0)
);
--> statement-breakpoint
CREATE TABLE "templates" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"name" text NOT NULL,
	"slug" text NOT NULL,
	"description" text,
	"category" text,
	"icon_url" text,
	"config" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"is_active" boolean DEFAULT true NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
ALTER TABLE "template_deployments" ADD CONSTRAINT "template_deployments_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "template_deployments" ADD CONSTRAINT "template_deployments_template_id_templates_id_fk" FOREIGN KEY ("template_id") REFERENCES "public"."templates"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "template_deployments_subdomain_key" ON "template_deployments" USING btree ("subdomain");--> statement-breakpoint
CREATE UNIQUE INDEX "template_deployments_custom_domain_key" ON "template_deployments" USING btree ("custom_domain") WHERE "template_deployments"."custom_domain" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "template_deployments_org_idx" ON "template_deployments" USING btree ("organization_id","created_at");--> statement-breakpoint
CREATE INDEX "template_deployments_template_idx" ON "template_deployments" USING btree ("template_id");--> statement-breakpoint
CREATE INDEX "template_deployments_due_idx" ON "template_deployments" USING btree ("next_attempt_at") WHERE "template_deployments"."next_attempt_at" IS NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "templates_slug_key" ON "templates" USING btree ("slug");--> statement-breakpoint
CREATE INDEX "templates_active_idx" ON "templates" USING btree ("is_active","name");