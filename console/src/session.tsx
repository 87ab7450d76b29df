import { createContext, type ReactNode, useCallback, useContext, useEffect, useState } from 'react';
import { onSignedOut, restoreSession, type SessionAnswer, signIn, signOut, signUp, type User } from './api';

type State = { status: 'loading' } | { status: 'signed-out'; reason?: string } | { status: 'signed-in'; user: User };

interface Session {
  state: State;
  signIn(email: string, password: string): Promise<void>;
  signUp(email: string, password: string, fullName?: string): Promise<void>;
  signOut(): Promise<void>;
  /** The user as the API now answers it (after verifying the address in another tab, say). */
  updateUser(user: User): void;
}

const SessionContext = createContext<Session | null>(null);

/** The signed-in user: restored from the HttpOnly cookie on load (one refresh), cleared on sign-out or a refused refresh. */
export function SessionProvider({ children }: { children: ReactNode }) {
  const [state, setState] = useState<State>({ status: 'loading' });
  const enter = useCallback((answer: SessionAnswer) => setState({ status: 'signed-in', user: answer.user }), []);
  const updateUser = useCallback((user: User) => setState((s) => (s.status === 'signed-in' && s.user.id === user.id ? { status: 'signed-in', user } : s)), []);

  useEffect(() => {
    let live = true;
    restoreSession()
      .then((answer) => {
        if (live) setState(answer ? { status: 'signed-in', user: answer.user } : { status: 'signed-out' });
      })
      .catch(() => {
        if (live) setState({ status: 'signed-out', reason: 'The service did not answer; sign in again.' });
      });
    const off = onSignedOut(() => setState({ status: 'signed-out', reason: 'Your session ended; sign in again.' }));
    return () => {
      live = false;
      off();
    };
  }, []);

  const session: Session = {
    state,
    signIn: async (email, password) => enter(await signIn(email, password)),
    signUp: async (email, password, fullName) => enter(await signUp(email, password, fullName)),
    signOut: async () => {
      await signOut();
      setState({ status: 'signed-out' });
    },
    updateUser,
  };
  return <SessionContext.Provider value={session}>{children}</SessionContext.Provider>;
}

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error('useSession outside SessionProvider');
  return session;
}

export function useUser(): User {
  const { state } = useSession();
  if (state.status !== 'signed-in') throw new Error('useUser while signed out');
  return state.user;
}
