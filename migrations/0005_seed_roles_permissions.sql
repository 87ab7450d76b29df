-- System roles and permissions (seed: Roles and permissions; SPEC §8 RBAC). Names are <resource>.<action>.
INSERT INTO "roles" ("name", "description", "is_system") VALUES
  ('owner', 'Full access, including deleting the organization and managing owners', true),
  ('admin', 'Manage members, settings, API keys, deployments, billing and webhooks', true),
  ('member', 'Standard access: view the organization, its members, keys and deployments', true),
  ('viewer', 'Read-only access', true)
ON CONFLICT ("name") DO NOTHING;
--> statement-breakpoint
INSERT INTO "permissions" ("name", "resource", "action", "description") VALUES
  ('organization.read', 'organization', 'read', 'View the organization'),
  ('organization.update', 'organization', 'update', 'Change the organization''s settings'),
  ('organization.delete', 'organization', 'delete', 'Delete the organization'),
  ('members.read', 'members', 'read', 'List members and invitations'),
  ('members.invite', 'members', 'invite', 'Invite people'),
  ('members.update', 'members', 'update', 'Change roles and permissions'),
  ('members.remove', 'members', 'remove', 'Remove members'),
  ('api_keys.read', 'api_keys', 'read', 'List API keys'),
  ('api_keys.manage', 'api_keys', 'manage', 'Create and revoke API keys'),
  ('deployments.read', 'deployments', 'read', 'List deployments'),
  ('deployments.manage', 'deployments', 'manage', 'Rotate deployment secrets'),
  ('billing.read', 'billing', 'read', 'View subscription, usage and invoices'),
  ('billing.manage', 'billing', 'manage', 'Change the subscription'),
  ('audit.read', 'audit', 'read', 'Read the audit log'),
  ('webhooks.read', 'webhooks', 'read', 'List webhooks and deliveries'),
  ('webhooks.manage', 'webhooks', 'manage', 'Create, change and delete webhooks')
ON CONFLICT ("name") DO NOTHING;
--> statement-breakpoint
INSERT INTO "role_permissions" ("role_id", "permission_id")
SELECT r.id, p.id FROM "roles" r JOIN "permissions" p ON
  (r.name = 'owner')
  OR (r.name = 'admin' AND p.name <> 'organization.delete')
  OR (r.name = 'member' AND p.name IN ('organization.read', 'members.read', 'api_keys.read', 'deployments.read', 'billing.read', 'webhooks.read'))
  OR (r.name = 'viewer' AND p.name IN ('organization.read', 'members.read', 'api_keys.read', 'deployments.read'))
ON CONFLICT DO NOTHING;
