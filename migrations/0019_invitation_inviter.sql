-- An invitation acts for a member (docs/accounts.md, "Invitations act for a member"): `invited_by` is the
-- member it acts for (the key's maker when an API key sent it), `api_key_id` the key used, if any, and
-- `withdrawn_reason` says why the service (not a person) withdrew it.
ALTER TABLE "invitations" ADD COLUMN "api_key_id" uuid;
--> statement-breakpoint
ALTER TABLE "invitations" ADD COLUMN "withdrawn_reason" text;
--> statement-breakpoint
ALTER TABLE "invitations" ADD CONSTRAINT "invitations_api_key_id_api_keys_id_fk" FOREIGN KEY ("api_key_id") REFERENCES "public"."api_keys"("id") ON DELETE no action ON UPDATE no action;
--> statement-breakpoint
CREATE INDEX "invitations_api_key_idx" ON "invitations" USING btree ("api_key_id") WHERE "invitations"."api_key_id" IS NOT NULL;
--> statement-breakpoint
CREATE INDEX "invitations_inviter_idx" ON "invitations" USING btree ("organization_id","invited_by") WHERE "invitations"."accepted_at" IS NULL AND "invitations"."revoked_at" IS NULL;
--> statement-breakpoint
-- Old open invitations sent with an API key recorded no inviter; the audit row of the invite names the
-- key (actor `api_key:<id>`), and the key names its maker: fill both in, so the accept rule applies.
UPDATE "invitations" i SET "api_key_id" = k."id", "invited_by" = k."created_by"
FROM "audit_logs" a JOIN "api_keys" k ON a."actor" = 'api_key:' || k."id"::text
WHERE i."invited_by" IS NULL AND i."accepted_at" IS NULL AND i."revoked_at" IS NULL
  AND a."action" = 'invite' AND a."resource_type" = 'invitation' AND a."resource_id" = i."id"::text
  AND k."organization_id" = i."organization_id";
--> statement-breakpoint
-- What is still without an inviter (an operator-made key, a lost audit row) can never be accepted:
-- withdraw it, so lists say so. Likewise open invitations of a revoked key or of an inviter who left.
UPDATE "invitations" i SET "revoked_at" = now(), "withdrawn_reason" = CASE
    WHEN i."invited_by" IS NULL THEN 'inviter_unknown'
    WHEN i."api_key_id" IS NOT NULL AND EXISTS (SELECT 1 FROM "api_keys" k WHERE k."id" = i."api_key_id" AND k."revoked_at" IS NOT NULL) THEN 'api_key_revoked'
    ELSE 'inviter_lost_power' END
WHERE i."accepted_at" IS NULL AND i."revoked_at" IS NULL AND (
  i."invited_by" IS NULL
  OR (i."api_key_id" IS NOT NULL AND EXISTS (SELECT 1 FROM "api_keys" k WHERE k."id" = i."api_key_id" AND k."revoked_at" IS NOT NULL))
  OR NOT EXISTS (SELECT 1 FROM "organization_members" m WHERE m."organization_id" = i."organization_id" AND m."user_id" = i."invited_by")
);
