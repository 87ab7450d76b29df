-- Custom domains are claimed, then verified by a DNS TXT record (docs/templates.md, Custom domains).
ALTER TABLE "template_deployments" ADD COLUMN "custom_domain_status" text;--> statement-breakpoint
ALTER TABLE "template_deployments" ADD COLUMN "custom_domain_challenge" text;--> statement-breakpoint
ALTER TABLE "template_deployments" ADD COLUMN "custom_domain_claimed_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "template_deployments" ADD COLUMN "custom_domain_verified_at" timestamp with time zone;--> statement-breakpoint
-- Existing domains were taken first-come without proof: each becomes a claim with a fresh challenge and
-- seven days from now to verify. The 32 base62 characters come from gen_random_uuid()'s bytes (the
-- LATERAL makes it one draw per row, not one for the whole statement).
UPDATE "template_deployments" d SET "custom_domain_status" = 'pending_verification', "custom_domain_claimed_at" = now(),
  "custom_domain_challenge" = 'creditgate-verify=' || (
    SELECT string_agg(substr('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz', 1 + get_byte(r.b, i) % 62, 1), '' ORDER BY i)
    FROM generate_series(0, 31) AS i
  )
FROM "template_deployments" s, LATERAL (SELECT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) AS b WHERE s.id IS NOT NULL) r
WHERE s.id = d.id AND d."custom_domain" IS NOT NULL;--> statement-breakpoint
-- The provisioner is given a custom domain only once it is verified: an active deployment that was
-- provisioned with one is provisioned again (deploying, due now), so the provisioner stops serving it
-- until it is proven; one audit row per transition, as the worker writes them.
WITH moved AS (
  UPDATE "template_deployments" SET "status" = 'deploying', "attempts" = 0, "next_attempt_at" = now(), "leased_until" = NULL, "updated_at" = now()
  WHERE "custom_domain" IS NOT NULL AND "status" = 'active' RETURNING "id", "organization_id"
)
INSERT INTO "audit_logs" ("organization_id", "actor", "action", "resource_type", "resource_id", "metadata", "created_at")
SELECT "organization_id", 'system', 'status_change', 'template_deployment', "id"::text,
  jsonb_build_object('from', 'active', 'to', 'deploying', 'attempts', 0, 'reason', 'custom_domain_unverified'), now()
FROM moved;--> statement-breakpoint
DROP INDEX "template_deployments_custom_domain_key";--> statement-breakpoint
-- Only a verified domain is exclusive: any number of deployments may claim one until someone proves it.
CREATE UNIQUE INDEX "template_deployments_custom_domain_key" ON "template_deployments" USING btree ("custom_domain") WHERE "template_deployments"."custom_domain_status" = 'verified';--> statement-breakpoint
CREATE INDEX "template_deployments_domain_claims_idx" ON "template_deployments" USING btree ("custom_domain_claimed_at") WHERE "template_deployments"."custom_domain_status" = 'pending_verification';--> statement-breakpoint
ALTER TABLE "template_deployments" ADD CONSTRAINT "template_deployments_custom_domain_status" CHECK ("template_deployments"."custom_domain_status" IN ('pending_verification', 'verified', 'lapsed'));--> statement-breakpoint
ALTER TABLE "template_deployments" ADD CONSTRAINT "template_deployments_custom_domain_claim" CHECK (("template_deployments"."custom_domain" IS NOT NULL) = (COALESCE("template_deployments"."custom_domain_status", 'none') IN ('pending_verification', 'verified')));
