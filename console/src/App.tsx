import { lazy, type ReactNode, Suspense, useEffect, useRef, useState } from 'react';
import { Link, Redirect, Route, Router, Switch, useLocation, useParams } from 'wouter';
import { api } from './api';
import { absolute, OrgProvider, orgPath, useOrg } from './org';
import { AcceptInvitation } from './pages/AcceptInvitation';
import { NewOrganization } from './pages/NewOrganization';
import { NotFound } from './pages/NotFound';
import { ORG_PAGES } from './org-pages';
import { Overview } from './pages/Overview';
import { SignIn, SignUp } from './pages/SignIn';
import { useSession, useUser } from './session';
import { type ThemePreference, usePreference } from './theme';
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
const Budgets = lazy(() => import('./pages/Budgets').then((m) => ({ default: m.Budgets })));
const Prices = lazy(() => import('./pages/Prices').then((m) => ({ default: m.Prices })));
const AutoTopUp = lazy(() => import('./pages/AutoTopUp').then((m) => ({ default: m.AutoTopUp })));
const TemplateDeployments = lazy(() => import('./pages/TemplateDeployments').then((m) => ({ default: m.TemplateDeployments })));
const OperatorMailbox = lazy(() => import('./pages/OperatorMailbox').then((m) => ({ default: m.OperatorMailbox })));

export function App() {
  return (
    <Router base="/console">
      <Switch>
        <Route path="/operator">
          <Suspense fallback={<Loading />}>
            <Operator />
          </Suspense>
        </Route>
        <Route path="/operator/mailbox">
          <Suspense fallback={<Loading />}>
            <OperatorMailbox />
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
      <Route path="/">
        <Home />
      </Route>
      <Route>
        <Shell>
          <NotFound />
        </Shell>
      </Route>
    </Switch>
  );
}

/** `/console/`: the user's default (or first) organization, or the form to make one. */
function Home() {
  const user = useUser();
  const { data, error } = useLoad(() => api.list('/organizations', { params: { query: { limit: 100 } } }), [user.id]);
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
            <Route path="/budgets">
              <Budgets />
            </Route>
            <Route path="/prices">
              <Prices />
            </Route>
            <Route path="/auto-top-up">
              <AutoTopUp />
            </Route>
            <Route path="/templates">
              <TemplateDeployments />
            </Route>
            <Route>
              <NotFound />
            </Route>
          </Switch>
        </Suspense>
      </Shell>
    </OrgProvider>
  );
}

/** The organization's pages; a link followed from the open menu (narrow screens) closes it. */
function OrgNav({ open, onNavigate }: { open: boolean; onNavigate: () => void }) {
  const { org, can } = useOrg();
  const [location] = useLocation();
  return (
    <nav id="org-nav" aria-label="Organization" className={open ? 'org-nav open' : 'org-nav'}>
      <ul>
        {ORG_PAGES.filter((p) => can(p.permission)).map((p) => {
          // Inside the nested router locations are relative: "/" is the overview.
          const here = p.page === '' ? location === '/' : location.startsWith(`/${p.page}`);
          return (
            <li key={p.page}>
              <Link href={p.page === '' ? '/' : `/${p.page}`} aria-current={here ? 'page' : undefined} onClick={onNavigate}>
                {p.label}
              </Link>
            </li>
          );
        })}
      </ul>
      <p className="muted small">
        Signed in as <strong>{org.role}</strong> of{' '}
        <span className="truncate" title={org.name}>
          {org.name}
        </span>
      </p>
    </nav>
  );
}

/** System, light or dark (docs/console.md "Theme"); only a pick of light or dark is stored. */
function ThemeSwitch() {
  const [preference, choose] = usePreference();
  return (
    <label className="theme-switch">
      <span className="visually-hidden">Theme</span>
      <select value={preference} onChange={(e) => choose(e.target.value as ThemePreference)}>
        <option value="system">System theme</option>
        <option value="light">Light theme</option>
        <option value="dark">Dark theme</option>
      </select>
    </label>
  );
}

/**
 * Header with the organization switcher, the theme and the user; side navigation inside an
 * organization. On a narrow screen the navigation folds behind a Menu button (docs/console.md
 * "Layout"): opening it moves focus to its links, Escape closes it and returns focus to the button,
 * and following a link closes it and moves focus to the page.
 */
function Shell({ children, orgId }: { children: ReactNode; orgId?: string }) {
  const user = useUser();
  const { signOut } = useSession();
  const [, navigate] = useLocation();
  const orgs = useLoad(() => api.list('/organizations', { params: { query: { limit: 100 } } }), [user.id]);
  const [menuOpen, setMenuOpen] = useState(false);
  const menuButton = useRef<HTMLButtonElement>(null);
  const main = useRef<HTMLElement>(null);
  const current = orgs.data?.data.find((o) => o.id === orgId);

  useEffect(() => {
    if (!menuOpen) return;
    const nav = document.getElementById('org-nav');
    (nav?.querySelector<HTMLElement>('a[aria-current="page"]') ?? nav?.querySelector<HTMLElement>('a'))?.focus();
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== 'Escape') return;
      setMenuOpen(false);
      menuButton.current?.focus();
    };
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, [menuOpen]);

  const followed = () => {
    if (!menuOpen) return;
    setMenuOpen(false);
    main.current?.focus();
  };

  return (
    <div className="shell">
      <header className="topbar">
        {orgId ? (
          <button
            ref={menuButton}
            type="button"
            className="secondary menu-button"
            aria-expanded={menuOpen}
            aria-controls="org-nav"
            onClick={() => setMenuOpen((open) => !open)}
          >
            <span className="menu-icon" aria-hidden="true" />
            Menu
          </button>
        ) : null}
        <a className="brand" href="/console/">
          creditgate
        </a>
        <label className="org-switch">
          <span className="visually-hidden">Organization</span>
          <select
            value={orgId ?? ''}
            title={current?.name}
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
        <span className="muted user-email truncate" title={user.email}>
          {user.email}
        </span>
        <ThemeSwitch />
        <button type="button" className="secondary sign-out" onClick={() => void signOut()}>
          Sign out
        </button>
      </header>
      <div className="body">
        {orgId ? <OrgNav open={menuOpen} onNavigate={followed} /> : null}
        <main id="main" ref={main} tabIndex={-1}>
          <VerifyNotice />
          {children}
        </main>
      </div>
    </div>
  );
}
