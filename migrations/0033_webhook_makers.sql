-- Organization webhooks made through an API key belong to the key's maker (docs/accounts.md, Powers). Those
-- made before had no maker: found by the audit row of their creation, they get the key's. Then every active
-- webhook whose maker is no longer a member of its organization is turned off, as a removal now does.
UPDATE "webhooks" w SET "created_by" = k."created_by"
FROM "audit_logs" a JOIN "api_keys" k ON a."actor" = 'api_key:' || k."id"::text
WHERE w."created_by" IS NULL AND k."created_by" IS NOT NULL AND k."organization_id" = w."organization_id"
  AND a."resource_type" = 'webhook' AND a."action" = 'create' AND a."resource_id" = w."id"::text;--> statement-breakpoint
UPDATE "webhooks" w SET "is_active" = false, "disabled_reason" = 'its creator no longer manages webhooks in this organization', "updated_at" = now()
WHERE w."is_active" AND w."created_by" IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM "organization_members" m WHERE m."organization_id" = w."organization_id" AND m."user_id" = w."created_by");
