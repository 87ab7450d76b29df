-- SPEC §12: template deployments are managed by owners and admins and read by every role (docs/templates.md).
INSERT INTO "permissions" ("name", "resource", "action", "description") VALUES
  ('templates.read', 'templates', 'read', 'List template deployments'),
  ('templates.manage', 'templates', 'manage', 'Create, change, retry and delete template deployments')
ON CONFLICT ("name") DO NOTHING;
--> statement-breakpoint
INSERT INTO "role_permissions" ("role_id", "permission_id")
SELECT r.id, p.id FROM "roles" r JOIN "permissions" p ON
  (r.name IN ('owner', 'admin') AND p.name IN ('templates.read', 'templates.manage'))
  OR (r.name IN ('member', 'viewer') AND p.name = 'templates.read')
ON CONFLICT DO NOTHING;
