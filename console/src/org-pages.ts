/**
 * An organization's pages in the navigation, in order: the path under `/orgs/{id}` ('' is the
 * overview) and the permission that shows the link. The browser tests that visit every page read
 * this list, so a new page is checked for layout and accessibility without being listed twice.
 */
export const ORG_PAGES: Array<{ page: string; label: string; permission: string }> = [
  { page: '', label: 'Overview', permission: 'organization.read' },
  { page: 'usage', label: 'Usage', permission: 'usage.read' },
  { page: 'api-keys', label: 'API keys', permission: 'api_keys.read' },
  { page: 'deployments', label: 'Deployments', permission: 'deployments.read' },
  { page: 'members', label: 'Members', permission: 'members.read' },
  { page: 'webhooks', label: 'Webhooks', permission: 'webhooks.read' },
  { page: 'billing', label: 'Billing', permission: 'billing.read' },
  { page: 'budgets', label: 'Budgets', permission: 'usage.read' },
  { page: 'prices', label: 'Prices', permission: 'organization.read' },
  { page: 'auto-top-up', label: 'Auto top-up', permission: 'billing.manage' },
  { page: 'templates', label: 'Templates', permission: 'templates.read' },
  { page: 'audit', label: 'Audit log', permission: 'audit.read' },
];
