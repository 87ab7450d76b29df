import { lazy, type ReactNode, Suspense } from 'react';
import { Link, Redirect, Route, Router, Switch, useLocation, useParams } from 'wouter';
import { list } from './api';
import { absolute, type Organization, OrgProvider, orgPath, useOrg } from './org';
import { AcceptInvitation } from './pages/AcceptInvitation';
import { NewOrganization } from './pages/NewOrganization';
import { Overview } from './pages/Overview';
import { SignIn, SignUp } from './pages/SignIn';
import { useSession, useUser } from './session';
import { ErrorNote, Loading, useLoad } from './ui';
import { VerifyNotice } from './VerifyNotice';

// Pages beyond the overview load on first visit, so the overview's first paint carries less script.
const UsageExplorer = lazy(() => import('./pages/UsageExplorer').then((m) => ({ default: m.UsageExplorer })));
const ApiKeys = lazy(() => import('./pages/ApiKeys').then((m) => ({ default: m.ApiKeys })));
const Deployments = lazy(() => import('./pages/Deployments').then((m) => ({ default: m.Deployments })));
const Members = lazy(() => import('./pages/Members').then((m) => ({ default: m.Members })));
const Webhooks = lazy(() => import('./pages/Webhooks').then((m) => ({ default: m.Webhooks })));
const Billing = lazy(() => import('./pages/Billing').then((m) => ({ default: m.Billing })));
const Audit = lazy(() => import('./pages/Audit').then((m) => ({ default: m.Audit })));
const Operator = lazy(() => import('./pages/Operator').then((m) => ({ default: m.Operator })));

/** The organization pages in the side navigation: path, label, and the permission that shows it. */
export const ORG_PAGES: Array<{ page: string; label: string; permission: string }> = [
  { page: '', label: 'Overview', permission: 'organization.read' },
  { page: 'usage', label: 'Usage', permission: 'usage.read' },
  { page: 'api-keys', label: 'API keys', permission: 'api_keys.read' },
  { page: 'deployments', label: 'Deployments', permission: 'deployments.read' },
  { page: 'members', label: 'Members', permission: 'members.read' },
  { page: 'webhooks', label: 'Webhooks', permission: 'webhooks.read' },
  { page: 'billing', label: 'Billing', permission: 'billing.read' },
  { page: 'audit', label: 'Audit log', permission: 'audit.read' },
];

export function App() {
  return (
    <Router base="/console">
      <Switch>
        <Route path="/operator">
          <Suspense fallback={<Loading />}>
            <Operator />
          </Suspense>
        </Route>
        <Route path="/invitations/:token">{(params) => <AcceptInvitation token={params.token} />}</Route>
        <Route>
          <Signed />
        </Route>
      </Switch>
    </Router>
  );
}

/** Everything else needs a user: the sign-in and sign-up pages until there is one. */
function Signed() {
  const { state } = useSession();
  const [location] = useLocation();
  if (state.status === 'loading') return <Loading />;
  if (state.status === 'signed-out') {
    if (location === '/signup') return <SignUp />;
    return <SignIn reason={state.reason} />;
  }
  return (
    <Switch>
      <Route path="/signup">
        <Redirect to="/" />
      </Route>
      <Route path="/login">
        <Redirect to="/" />
      </Route>
      <Route path="/orgs/new">
        <Shell>
          <NewOrganization />
        </Shell>
      </Route>
      <Route path="/orgs/:orgId" nest>
        <OrgPages />
      </Route>
      <Route>
        <Home />
      </Route>
    </Switch>
  );
}

/** `/console/`: the user's default (or first) organization, or the form to make one. */
function Home() {
  const user = useUser();
  const { data, error } = useLoad(() => list<Organization>('/organizations', { limit: 100 }), [user.id]);
  if (error) return <ErrorNote error={error} />;
  if (!data) return <Loading />;
  const target = data.data.find((o) => o.id === user.default_organization_id) ?? data.data[0];
  return <Redirect to={target ? orgPath(target.id) : '/orgs/new'} replace />;
}

function OrgPages() {
  const { orgId } = useParams<{ orgId: string }>();
  return (
    <OrgProvider orgId={orgId}>
      <Shell orgId={orgId}>
        <Suspense fallback={<Loading />}>
          <Switch>
            <Route path="/">
              <Overview />
            </Route>
            <Route path="/usage">
              <UsageExplorer />
            </Route>
            <Route path="/api-keys">
              <ApiKeys />
            </Route>
            <Route path="/deployments">
              <Deployments />
            </Route>
            <Route path="/members">
              <Members />
            </Route>
            <Route path="/webhooks">
              <Webhooks />
            </Route>
            <Route path="/billing">
              <Billing />
            </Route>
            <Route path="/audit">
              <Audit />
            </Route>
            <Route>
              <p>No such page.</p>
            </Route>
          </Switch>
        </Suspense>
      </Shell>
    </OrgProvider>
  );
}

function OrgNav() {
  const { org, can } = useOrg();
  const [location] = useLocation();
  return (
    <nav aria-label="Organization">
      <ul>
        {ORG_PAGES.filter((p) => can(p.permission)).map((p) => {
          // Inside the nested router locations are relative: "/" is the overview.
          const here = p.page === '' ? location === '/' : location.startsWith(`/${p.page}`);
          return (
            <li key={p.page}>
              <Link href={p.page === '' ? '/' : `/${p.page}`} aria-current={here ? 'page' : undefined}>
                {p.label}
              </Link>
            </li>
          );
        })}
      </ul>
      <p className="muted small">
        Signed in as <strong>{org.role}</strong> of {org.name}
      </p>
    </nav>
  );
}

/** Header with the organization switcher and the user; side navigation inside an organization. */
function Shell({ children, orgId }: { children: ReactNode; orgId?: string }) {
  const user = useUser();
  const { signOut } = useSession();
  const [, navigate] = useLocation();
  const orgs = useLoad(() => list<Organization>('/organizations', { limit: 100 }), [user.id]);
  return (
    <div className="shell">
      <header className="topbar">
        <a className="brand" href="/console/">
          creditgate
        </a>
        <label className="org-switch">
          <span className="visually-hidden">Organization</span>
          <select
            value={orgId ?? ''}
            onChange={(e) => navigate(absolute(e.target.value === 'new' ? '/orgs/new' : orgPath(e.target.value)))}
          >
            {orgId ? null : <option value="">Choose an organization</option>}
            {(orgs.data?.data ?? []).map((o) => (
              <option key={o.id} value={o.id}>
                {o.name}
              </option>
            ))}
            <option value="new">+ New organization</option>
          </select>
        </label>
        <span className="spacer" />
        <span className="muted">{user.email}</span>
        <button type="button" className="secondary" onClick={() => void signOut()}>
          Sign out
        </button>
      </header>
      <div className="body">
        {orgId ? <OrgNav /> : null}
        <main>
          <VerifyNotice />
          {children}
        </main>
      </div>
    </div>
  );
}
