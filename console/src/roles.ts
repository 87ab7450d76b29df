/**
 * What each system role may do (migrations 0005, 0017, 0018). The console shows and enables controls
 * by this table; the server still decides every request (a forged write gets 403 FORBIDDEN).
 */
export type Role = 'owner' | 'admin' | 'member' | 'viewer';

const READ_ALL = ['organization.read', 'members.read', 'api_keys.read', 'deployments.read', 'usage.read', 'templates.read'];
const ADMIN = [
  ...READ_ALL,
  'organization.update',
  'members.invite',
  'members.update',
  'members.remove',
  'api_keys.manage',
  'deployments.manage',
  'billing.read',
  'billing.manage',
  'audit.read',
  'webhooks.read',
  'webhooks.manage',
  'templates.manage',
];

const TABLE: Record<Role, ReadonlySet<string>> = {
  owner: new Set([...ADMIN, 'organization.delete']),
  admin: new Set(ADMIN),
  member: new Set([...READ_ALL, 'billing.read', 'webhooks.read']),
  viewer: new Set(READ_ALL),
};

export function can(role: string | null | undefined, permission: string): boolean {
  return role !== null && role !== undefined && (TABLE[role as Role]?.has(permission) ?? false);
}
