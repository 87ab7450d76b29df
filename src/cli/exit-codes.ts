/** How `creditgate` ends (docs/cli.md); scripts branch on these, so they never change meaning. */
export const EXIT = {
  ok: 0,
  /** The service answered an error, or could not be reached. */
  failed: 1,
  /** A bad command, argument or option, or invalid configuration: nothing was sent or started. */
  usage: 2,
  /** The embedded database's data directory is held by another process. */
  locked: 3,
  /** `serve` could not listen on its port (in use, not permitted, no such address); what it opened is closed. */
  listen: 4,
} as const;

/** A mistake in how the CLI was called or configured (exit 2), found before any request is sent. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** The service refused the request or could not be reached (exit 1); the message is one line. */
export class ApiError extends Error {
  override readonly name = 'ApiError';
}
