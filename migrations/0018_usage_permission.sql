-- Issue 17: the usage analytics API (docs/usage-analytics.md) is read by every role; API keys need the read scope.
INSERT INTO "permissions" ("name", "resource", "action", "description") VALUES
  ('usage.read', 'usage', 'read', 'Read usage summaries and usage records')
ON CONFLICT ("name") DO NOTHING;
--> statement-breakpoint
INSERT INTO "role_permissions" ("role_id", "permission_id")
SELECT r.id, p.id FROM "roles" r JOIN "permissions" p ON p.name = 'usage.read'
WHERE r.name IN ('owner', 'admin', 'member', 'viewer')
ON CONFLICT DO NOTHING;
