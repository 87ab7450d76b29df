import { createContext, type ReactNode, useContext } from 'react';
import { api } from './api';
import { can } from './roles';
import { ErrorNote, Loading, useLoad } from './ui';
import type { Schemas } from './types';

export type Organization = Schemas['Organization'];

interface OrgContextValue {
  org: Organization;
  /** Whether the caller's role holds a permission (what to show and enable; the server decides). */
  can(permission: string): boolean;
  reload(): void;
}

const OrgContext = createContext<OrgContextValue | null>(null);

export function OrgProvider({ orgId, children }: { orgId: string; children: ReactNode }) {
  const { data, error, reload } = useLoad(() => api.GET('/organizations/{id}', { params: { path: { id: orgId } } }), [orgId]);
  if (error) return <ErrorNote error={error} />;
  if (!data) return <Loading />;
  return <OrgContext.Provider value={{ org: data, can: (p) => can(data.role, p), reload }}>{children}</OrgContext.Provider>;
}

export function useOrg(): OrgContextValue {
  const value = useContext(OrgContext);
  if (!value) throw new Error('useOrg outside OrgProvider');
  return value;
}

/**
 * A console path for `navigate` from anywhere, nested routes included (wouter's "~" leaves every base,
 * so the console's own /console goes back in front).
 */
export const absolute = (path: string) => `~/console${path}`;

/** The path of an organization's page, relative to the console. */
export const orgPath = (orgId: string, page = '') => `/orgs/${orgId}${page ? `/${page}` : ''}`;
