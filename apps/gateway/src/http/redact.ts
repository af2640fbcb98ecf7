/**
 * Session keys never leave the gateway in an error body or a log line: a per-session URL's
 * path segment is the key (`/sessions/<key>/v1/...`), and an agent may paste a key anywhere.
 */
const SESSION_PATH = /\/sessions\/[^/\s?#"']+/g;
const SESSION_KEY = /anvil-sess_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/g;

export const redactSecrets = (text: string): string =>
  text.replace(SESSION_PATH, '/sessions/<session key>').replace(SESSION_KEY, '<session key>');
