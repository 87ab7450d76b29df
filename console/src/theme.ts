import { useEffect, useState } from 'react';

/**
 * The colour theme (docs/console.md "Theme"): the system's (`prefers-color-scheme`) unless the user
 * picked light or dark, which is the only thing the console keeps in localStorage. A picked theme is
 * `data-theme` on <html>, set before first paint by the inline script in console/index.html (it reads
 * the same key); styles.css holds both palettes.
 */
export type ThemePreference = 'system' | 'light' | 'dark';
export type Scheme = 'light' | 'dark';

/** The localStorage key; console/index.html's inline script reads it too. */
export const THEME_KEY = 'cg-theme';

const DARK_QUERY = '(prefers-color-scheme: dark)';

export function readPreference(): ThemePreference {
  try {
    const stored = localStorage.getItem(THEME_KEY);
    return stored === 'light' || stored === 'dark' ? stored : 'system';
  } catch {
    return 'system'; // storage refused (a privacy mode): the system's theme
  }
}

function apply(preference: ThemePreference): void {
  const root = document.documentElement;
  if (preference === 'system') delete root.dataset.theme;
  else root.dataset.theme = preference;
}

/** Remember and apply a preference; "system" removes the key, so nothing is stored by default. */
export function setPreference(preference: ThemePreference): void {
  try {
    if (preference === 'system') localStorage.removeItem(THEME_KEY);
    else localStorage.setItem(THEME_KEY, preference);
  } catch {
    // not remembered; this page still follows it
  }
  apply(preference);
}

/** The scheme in force now: the picked one, or the system's. */
export function currentScheme(): Scheme {
  const picked = document.documentElement.dataset.theme;
  if (picked === 'light' || picked === 'dark') return picked;
  return window.matchMedia?.(DARK_QUERY).matches ? 'dark' : 'light';
}

/** Call `changed` whenever the scheme in force may have changed (a pick here or in another tab, or the system's). */
function onSchemeChange(changed: () => void): () => void {
  const media = window.matchMedia?.(DARK_QUERY);
  media?.addEventListener('change', changed);
  const attribute = new MutationObserver(changed);
  attribute.observe(document.documentElement, { attributes: true, attributeFilter: ['data-theme'] });
  return () => {
    media?.removeEventListener('change', changed);
    attribute.disconnect();
  };
}

/** The scheme in force, re-rendering when it changes (the chart draws its canvas in it). */
export function useScheme(): Scheme {
  const [scheme, setScheme] = useState<Scheme>(currentScheme);
  useEffect(() => onSchemeChange(() => setScheme(currentScheme())), []);
  return scheme;
}

/** The stored preference, kept in step with other tabs of the console. */
export function usePreference(): [ThemePreference, (p: ThemePreference) => void] {
  const [preference, setState] = useState<ThemePreference>(readPreference);
  useEffect(() => {
    const other = (e: StorageEvent) => {
      if (e.key !== THEME_KEY && e.key !== null) return;
      const p = readPreference();
      apply(p);
      setState(p);
    };
    window.addEventListener('storage', other);
    return () => window.removeEventListener('storage', other);
  }, []);
  return [
    preference,
    (p) => {
      setPreference(p);
      setState(p);
    },
  ];
}
