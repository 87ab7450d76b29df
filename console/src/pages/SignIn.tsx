import { type FormEvent, useState } from 'react';
import { Link } from 'wouter';
import { useSession } from '../session';
import { ErrorNote, Field, useAction } from '../ui';

export function SignIn({ reason, onDone }: { reason?: string | undefined; onDone?: () => void }) {
  const { signIn } = useSession();
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const action = useAction();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (await action.run(() => signIn(email, password))) onDone?.();
  };
  return (
    <main className="auth-card">
      <h1>Sign in to creditgate</h1>
      {reason ? <p className="muted">{reason}</p> : null}
      <form onSubmit={submit}>
        <Field label="Email">
          <input type="email" autoComplete="username" required value={email} onChange={(e) => setEmail(e.target.value)} />
        </Field>
        <Field label="Password">
          <input type="password" autoComplete="current-password" required value={password} onChange={(e) => setPassword(e.target.value)} />
        </Field>
        <ErrorNote error={action.error} />
        <button type="submit" disabled={action.busy}>
          Sign in
        </button>
      </form>
      <p>
        No account yet? <Link href="/signup">Create one</Link>
      </p>
    </main>
  );
}

export function SignUp({ email: invitedEmail, onDone }: { email?: string; onDone?: () => void }) {
  const { signUp } = useSession();
  const [email, setEmail] = useState(invitedEmail ?? '');
  const [fullName, setFullName] = useState('');
  const [password, setPassword] = useState('');
  const action = useAction();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (await action.run(() => signUp(email, password, fullName.trim() || undefined))) onDone?.();
  };
  return (
    <main className="auth-card">
      <h1>Create your creditgate account</h1>
      <form onSubmit={submit}>
        <Field label="Name">
          <input autoComplete="name" value={fullName} onChange={(e) => setFullName(e.target.value)} />
        </Field>
        <Field label="Email">
          <input type="email" autoComplete="username" required value={email} onChange={(e) => setEmail(e.target.value)} />
        </Field>
        <Field label="Password" hint="8 or more characters; not a common password">
          <input type="password" autoComplete="new-password" required minLength={8} value={password} onChange={(e) => setPassword(e.target.value)} />
        </Field>
        <ErrorNote error={action.error} />
        <button type="submit" disabled={action.busy}>
          Create account
        </button>
      </form>
      <p>
        Already have an account? <Link href="/">Sign in</Link>
      </p>
    </main>
  );
}
