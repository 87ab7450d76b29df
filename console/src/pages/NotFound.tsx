import { useOrg } from '../org';
import { StatePage } from '../ui';

/** An organization's own path (`/console/orgs/{id}/…`), to lead back to its overview. */
const ORG_IN_PATH = /^\/console\/orgs\/([0-9a-f-]{36})(?:\/|$)/;

/**
 * An address the console has no page for. Inside an organization the link leads back to its overview,
 * elsewhere to the console's home (the default organization).
 */
export function NotFound() {
  const orgId = ORG_IN_PATH.exec(window.location.pathname)?.[1];
  return (
    <StatePage
      title="Page not found"
      link={orgId ? { href: `~/console/orgs/${orgId}`, label: 'Back to the overview' } : { href: '~/console/', label: 'Go to the console home' }}
    >
      There is no console page at this address. The link may be mistyped, or the page may have moved.
    </StatePage>
  );
}

/** An organization page the caller's role cannot read (the navigation hides it; a typed or shared link still leads here). */
export function NoAccess({ what }: { what: string }) {
  const { org } = useOrg();
  return (
    <StatePage title={`No access to ${what}`} link={{ href: `~/console/orgs/${org.id}`, label: 'Back to the overview' }}>
      Your role in {org.name} is {org.role}, which cannot see {what}. An owner or admin can change your role on the Members page.
    </StatePage>
  );
}
