import { useCallback, useEffect, useRef, useState } from 'react';
import type { Page } from '../api';
import { countOf } from '../plural';
import { markLoadFailure } from '../ui';

export interface Pages<T> {
  items: T[];
  /** The next page's cursor; null when everything is loaded. */
  next: string | null;
  error: unknown;
  /** The first page is on its way (after a change of inputs, or reload). */
  loading: boolean;
  /** A further page is on its way. */
  loadingMore: boolean;
  loadMore: () => void;
  reload: () => void;
  /** Run the load that failed again: the first page, or the further page "Load more" asked for. */
  retry: () => void;
  /** Change the loaded items in place (a revoked key, a new role), keeping the pages already loaded. */
  setItems: (change: (items: T[]) => T[]) => void;
}

/**
 * A cursor-paginated list shown page by page ("Load more"): the first page when the inputs change,
 * the next ones appended on request. The answers of a superseded load (inputs changed meanwhile) are
 * dropped, so a page of the old filters never lands under the new ones.
 */
export function usePages<T>(load: (cursor: string | null) => Promise<Page<T>>, inputs: unknown[]): Pages<T> {
  const [state, setState] = useState({ items: [] as T[], next: null as string | null, error: null as unknown, loading: true, loadingMore: false, moreFailed: false });
  const [round, setRound] = useState(0);
  const seq = useRef(0);
  const latest = useRef({ load, next: state.next, loadingMore: state.loadingMore });
  latest.current = { load, next: state.next, loadingMore: state.loadingMore };

  // biome-ignore lint/correctness/useExhaustiveDependencies: the caller names the inputs (as useLoad)
  useEffect(() => {
    const mine = ++seq.current;
    setState((s) => ({ ...s, loading: true, loadingMore: false, error: null, moreFailed: false }));
    latest.current.load(null).then(
      (page) => mine === seq.current && setState({ items: page.data, next: page.next, error: null, loading: false, loadingMore: false, moreFailed: false }),
      (error: unknown) => {
        if (mine !== seq.current) return;
        markLoadFailure(error, () => setRound((r) => r + 1));
        setState({ items: [], next: null, error, loading: false, loadingMore: false, moreFailed: false });
      },
    );
  }, [...inputs, round]);

  const loadMore = useCallback(() => {
    const { load: loadPage, next, loadingMore } = latest.current;
    if (!next || loadingMore) return;
    const mine = seq.current;
    setState((s) => ({ ...s, loadingMore: true, error: null, moreFailed: false }));
    loadPage(next).then(
      (page) => mine === seq.current && setState((s) => ({ ...s, items: [...s.items, ...page.data], next: page.next, loadingMore: false })),
      (error: unknown) => mine === seq.current && setState((s) => ({ ...s, error, loadingMore: false, moreFailed: true })),
    );
  }, []);
  const setItems = useCallback((change: (items: T[]) => T[]) => setState((s) => ({ ...s, items: change(s.items) })), []);
  const reload = useCallback(() => setRound((r) => r + 1), []);
  const { moreFailed, ...shown } = state;
  return { ...shown, loadMore, reload, retry: moreFailed ? loadMore : reload, setItems };
}

/** The "Load more" button of a paged list, and how many are shown ("1 key shown", "20 keys shown"). */
export function LoadMore<T>({ pages, one, other }: { pages: Pages<T>; one: string; other?: string }) {
  return (
    <p className="row">
      <span className="muted" aria-live="polite">
        {countOf(pages.items.length, one, other)} shown{pages.next ? '' : ' (all)'}
      </span>
      {pages.next ? (
        <button type="button" className="secondary" onClick={pages.loadMore} disabled={pages.loadingMore}>
          {pages.loadingMore ? 'Loading more…' : 'Load more'}
        </button>
      ) : null}
    </p>
  );
}
