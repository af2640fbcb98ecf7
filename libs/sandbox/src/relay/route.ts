/**
 * Which requests the session relay forwards: the session's own agent API (every /v1/* path, so
 * chat completions, completions, Responses, Messages and models alike), rewritten onto the
 * session's URL. Anything else — the admin API, another session's URL, an absolute-form proxy
 * request for another host, a path that climbs out with dot segments — is refused.
 */
export type RouteDecision = { ok: true; path: string } | { ok: false; why: string };

/** Characters allowed in a path: RFC 3986 pchar plus '/'; anything else is refused, not guessed at. */
const PATH_CHARS = /^[A-Za-z0-9\-._~!$&'()*+,;=:@%/]*$/;

/**
 * Maps a request target (`/v1/chat/completions?x=1`) onto the session's base path
 * (`/sessions/<key>/v1`), or says why not.
 */
export function routeSessionRequest(target: string, sessionBasePath: string): RouteDecision {
  if (!target.startsWith('/')) return { ok: false, why: 'only the session API is reachable (absolute-form or authority-form target)' };
  const q = target.indexOf('?');
  const path = q < 0 ? target : target.slice(0, q);
  const query = q < 0 ? '' : target.slice(q);
  if (path !== '/v1' && !path.startsWith('/v1/')) return { ok: false, why: `only the session API (/v1/...) is reachable, not ${path}` };
  if (!PATH_CHARS.test(path) || query.includes('#')) return { ok: false, why: 'the path holds characters outside RFC 3986' };
  let decoded: string;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    return { ok: false, why: 'the path holds a malformed percent-encoding' };
  }
  // Refuse dot segments and encoded separators, raw or decoded: a server that normalises after
  // routing must never see a path that leaves /sessions/<key>/v1.
  for (const p of [path, decoded]) {
    if (p.split('/').some((seg) => seg === '.' || seg === '..') || p.includes('\\') || p.includes('//'))
      return { ok: false, why: 'the path climbs out of the session API' };
  }
  if (/%2f|%5c|%00/i.test(path)) return { ok: false, why: 'the path holds an encoded separator' };
  const base = sessionBasePath.replace(/\/v1\/?$/, '');
  return { ok: true, path: `${base}${path}${query}` };
}
