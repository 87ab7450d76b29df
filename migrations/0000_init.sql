CREATE TABLE "api_keys" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"name" text NOT NULL,
	"key_hash" text NOT NULL,
	"key_prefix" text NOT NULL,
	"scopes" text[] DEFAULT ARRAY['read']::text[] NOT NULL,
	"last_used_at" timestamp with time zone,
	"expires_at" timestamp with time zone,
	"created_by" uuid,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "organization_members" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"user_id" uuid NOT NULL,
	"role" text DEFAULT 'member' NOT NULL,
	"invited_by" uuid,
	"joined_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "organizations" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"name" text NOT NULL,
	"slug" text NOT NULL,
	"plan" text DEFAULT 'free' NOT NULL,
	"logo_url" text,
	"website" text,
	"subscription_status" text,
	"stripe_customer_id" text,
	"stripe_subscription_id" text,
	"deleted_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "organizations_stripe_customer_id_unique" UNIQUE("stripe_customer_id")
);
--> statement-breakpoint
CREATE TABLE "users" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"email" text NOT NULL,
	"external_id" text,
	"password_hash" text,
	"full_name" text,
	"avatar_url" text,
	"bio" text,
	"default_organization_id" uuid,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "audit_logs" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid,
	"user_id" uuid,
	"actor" text NOT NULL,
	"action" text NOT NULL,
	"resource_type" text NOT NULL,
	"resource_id" text,
	"metadata" jsonb NOT NULL,
	"ip_address" text,
	"user_agent" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "credit_balances" (
	"deployment_id" uuid PRIMARY KEY NOT NULL,
	"organization_id" uuid NOT NULL,
	"period_start" timestamp with time zone NOT NULL,
	"period_end" timestamp with time zone NOT NULL,
	"sync_before" timestamp with time zone NOT NULL,
	"monthly_allocation" bigint,
	"monthly_used" bigint DEFAULT 0 NOT NULL,
	"purchased_balance" bigint DEFAULT 0 NOT NULL,
	"reserved" bigint DEFAULT 0 NOT NULL,
	"ai_tokens_used" bigint DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "credit_balances_purchased_nonneg" CHECK ("credit_balances"."purchased_balance" >= 0),
	CONSTRAINT "credit_balances_used_nonneg" CHECK ("credit_balances"."monthly_used" >= 0),
	CONSTRAINT "credit_balances_reserved_nonneg" CHECK ("credit_balances"."reserved" >= 0),
	CONSTRAINT "credit_balances_allocation_nonneg" CHECK ("credit_balances"."monthly_allocation" IS NULL OR "credit_balances"."monthly_allocation" >= 0)
);
--> statement-breakpoint
CREATE TABLE "credit_costs" (
	"action" text PRIMARY KEY NOT NULL,
	"credits" integer NOT NULL,
	"description" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "credit_ledger" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"kind" text NOT NULL,
	"amount" bigint NOT NULL,
	"monthly_delta" bigint NOT NULL,
	"purchased_delta" bigint NOT NULL,
	"monthly_after" bigint,
	"purchased_after" bigint NOT NULL,
	"actor" text NOT NULL,
	"usage_id" uuid,
	"reason" text,
	"expires_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "credit_ledger_kind" CHECK ("credit_ledger"."kind" IN ('grant', 'deduct', 'refund', 'period_reset', 'expire', 'adjust'))
);
--> statement-breakpoint
CREATE TABLE "invocations" (
	"deployment_id" uuid NOT NULL,
	"invocation_id" text NOT NULL,
	"organization_id" uuid NOT NULL,
	"tool_name" text NOT NULL,
	"request_hash" text,
	"status" text NOT NULL,
	"reserved_amount" bigint DEFAULT 0 NOT NULL,
	"reservation_expires_at" timestamp with time zone,
	"usage_id" uuid,
	"response" jsonb,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "invocations_deployment_id_invocation_id_pk" PRIMARY KEY("deployment_id","invocation_id")
);
--> statement-breakpoint
CREATE TABLE "tool_actions" (
	"tool_name" text PRIMARY KEY NOT NULL,
	"action" text NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "usage_records" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"metric" text NOT NULL,
	"quantity" bigint NOT NULL,
	"tool_name" text NOT NULL,
	"mcp_user_id" text,
	"metadata" jsonb,
	"success" boolean NOT NULL,
	"error" text,
	"ledger_id" bigint,
	"invocation_id" text,
	"monthly_taken" bigint DEFAULT 0 NOT NULL,
	"purchased_taken" bigint DEFAULT 0 NOT NULL,
	"refunded" bigint DEFAULT 0 NOT NULL,
	"period_start" timestamp with time zone,
	"reported" boolean DEFAULT false NOT NULL,
	"processor_ref" text,
	"timestamp" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "usage_records_refund_bound" CHECK ("usage_records"."refunded" >= 0 AND "usage_records"."refunded" <= "usage_records"."quantity")
);
--> statement-breakpoint
CREATE TABLE "usage_refunds" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"usage_id" uuid NOT NULL,
	"organization_id" uuid NOT NULL,
	"deployment_id" uuid NOT NULL,
	"idempotency_key" text NOT NULL,
	"amount" bigint NOT NULL,
	"reason" text NOT NULL,
	"ledger_id" bigint,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "deployments" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"organization_id" uuid NOT NULL,
	"name" text NOT NULL,
	"tier" text NOT NULL,
	"status" text DEFAULT 'active' NOT NULL,
	"is_primary" boolean DEFAULT false NOT NULL,
	"secret_hash" text NOT NULL,
	"secret_prefix" text NOT NULL,
	"billing_anchor" timestamp with time zone NOT NULL,
	"flag_overrides" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"override_monthly_credits" bigint,
	"override_api_rate_limit" integer,
	"override_ai_tokens_limit" bigint,
	"override_expires_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_created_by_users_id_fk" FOREIGN KEY ("created_by") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "organization_members" ADD CONSTRAINT "organization_members_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "organization_members" ADD CONSTRAINT "organization_members_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "organization_members" ADD CONSTRAINT "organization_members_invited_by_users_id_fk" FOREIGN KEY ("invited_by") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "users" ADD CONSTRAINT "users_default_organization_id_organizations_id_fk" FOREIGN KEY ("default_organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_balances" ADD CONSTRAINT "credit_balances_deployment_id_deployments_id_fk" FOREIGN KEY ("deployment_id") REFERENCES "public"."deployments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_balances" ADD CONSTRAINT "credit_balances_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "tool_actions" ADD CONSTRAINT "tool_actions_action_credit_costs_action_fk" FOREIGN KEY ("action") REFERENCES "public"."credit_costs"("action") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "deployments" ADD CONSTRAINT "deployments_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "api_keys_key_hash_key" ON "api_keys" USING btree ("key_hash");--> statement-breakpoint
CREATE INDEX "api_keys_org_idx" ON "api_keys" USING btree ("organization_id");--> statement-breakpoint
CREATE UNIQUE INDEX "organization_members_org_user_key" ON "organization_members" USING btree ("organization_id","user_id");--> statement-breakpoint
CREATE INDEX "organization_members_user_idx" ON "organization_members" USING btree ("user_id");--> statement-breakpoint
CREATE UNIQUE INDEX "organizations_slug_key" ON "organizations" USING btree ("slug");--> statement-breakpoint
CREATE UNIQUE INDEX "users_email_key" ON "users" USING btree (lower("email"));--> statement-breakpoint
CREATE UNIQUE INDEX "users_external_id_key" ON "users" USING btree ("external_id");--> statement-breakpoint
CREATE INDEX "audit_logs_org_created_idx" ON "audit_logs" USING btree ("organization_id","created_at");--> statement-breakpoint
CREATE INDEX "credit_ledger_deployment_idx" ON "credit_ledger" USING btree ("deployment_id","id");--> statement-breakpoint
CREATE INDEX "invocations_reservation_expiry_idx" ON "invocations" USING btree ("reservation_expires_at") WHERE "invocations"."status" = 'reserved';--> statement-breakpoint
CREATE INDEX "usage_records_deployment_ts_idx" ON "usage_records" USING btree ("deployment_id","timestamp");--> statement-breakpoint
CREATE INDEX "usage_records_org_ts_idx" ON "usage_records" USING btree ("organization_id","timestamp");--> statement-breakpoint
CREATE UNIQUE INDEX "usage_refunds_key" ON "usage_refunds" USING btree ("usage_id","idempotency_key");--> statement-breakpoint
CREATE UNIQUE INDEX "deployments_primary_key" ON "deployments" USING btree ("organization_id") WHERE "deployments"."is_primary";--> statement-breakpoint
CREATE UNIQUE INDEX "deployments_secret_hash_key" ON "deployments" USING btree ("secret_hash");--> statement-breakpoint
CREATE INDEX "deployments_org_idx" ON "deployments" USING btree ("organization_id");