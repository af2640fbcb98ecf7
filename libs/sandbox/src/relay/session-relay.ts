import { chmodSync, chownSync } from 'node:fs';
import {
  Agent as HttpAgent,
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { SandboxSession } from '../types';
import { routeSessionRequest } from './route';

/** Where the relay listens: a Unix socket bind-mounted into a sandbox, or a loopback TCP port (the none backend). */
export type RelayListen = { socketPath: string; owner?: { uid: number; gid: number } } | { loopbackPort: 0 };

export interface RelayStats {
  forwarded: number;
  refused: number;
  refusedRequests: string[];
}

export interface SessionRelay {
  /** The socket path, or http://127.0.0.1:<port> for a TCP relay. */
  readonly address: string;
  readonly stats: RelayStats;
  close(): Promise<void>;
}

/** Headers that belong to one hop, or to the agent's own credentials: never forwarded as sent. */
const DROPPED = new Set([
  'connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-authenticate',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'authorization',
  'x-api-key',
]);
const MAX_NAMED_REFUSALS = 20;

// Connections to the gateway are reused across requests and sandboxes: a new TCP handshake per
// agent call would be the relay's largest cost.
const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

/** Keys never reach a log: a refused path may name a session (the agent's or another's). */
const redact = (s: string) => s.replace(/\/sessions\/[^/?#\s]+/g, '/sessions/<key>').slice(0, 300);

/**
 * A relay for one session: each request to /v1/* is forwarded to the session's own URL with the
 * session's key as its credential (whatever the program sent is replaced), the response streamed
 * back as it arrives (SSE included); every other request is answered 403 here and never reaches
 * the gateway.
 */
export async function startSessionRelay(session: SandboxSession, listen: RelayListen): Promise<SessionRelay> {
  const base = new URL(session.baseUrl);
  const https = base.protocol === 'https:';
  const stats: RelayStats = { forwarded: 0, refused: 0, refusedRequests: [] };
  const refuse = (what: string, why: string): string => {
    stats.refused++;
    if (stats.refusedRequests.length < MAX_NAMED_REFUSALS) stats.refusedRequests.push(redact(`${what}: ${why}`));
    return JSON.stringify({ error: { message: `sandbox relay: ${redact(why)}`, type: 'sandbox_relay_refused', code: 403 } });
  };

  const server = createServer({ noDelay: true }, (req, res) => {
    const route = routeSessionRequest(req.url ?? '', base.pathname);
    if (!route.ok) {
      const body = refuse(`${req.method} ${req.url}`, route.why);
      req.resume();
      res.writeHead(403, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
      return;
    }
    forward(req, res, route.path);
  });
  const refuseRaw = (req: IncomingMessage, socket: Socket) => {
    const body = refuse(`${req.method} ${req.url}`, 'only plain HTTP requests to the session API are relayed');
    socket.end(`HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  };
  server.on('connect', refuseRaw);
  server.on('upgrade', refuseRaw);
  server.on('clientError', (_err, socket) => socket.destroy());

  function forward(req: IncomingMessage, res: ServerResponse, path: string): void {
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !DROPPED.has(k)) headers[k] = v;
    headers.host = base.host;
    headers.authorization = `Bearer ${session.apiKey}`;
    if (req.headers['x-api-key'] !== undefined) headers['x-api-key'] = session.apiKey;
    stats.forwarded++;
    const up = (https ? httpsRequest : httpRequest)(
      {
        protocol: base.protocol,
        hostname: base.hostname,
        port: base.port || (https ? 443 : 80),
        method: req.method,
        path,
        headers,
        agent: https ? agents.https : agents.http,
      },
      (upRes) => {
        const out: Record<string, string | string[]> = {};
        for (const [k, v] of Object.entries(upRes.headers)) if (v !== undefined && !DROPPED.has(k)) out[k] = v;
        res.writeHead(upRes.statusCode ?? 502, upRes.statusMessage, out);
        res.flushHeaders();
        upRes.pipe(res);
        upRes.on('error', () => res.destroy());
      },
    );
    up.setNoDelay(true);
    up.on('error', (err) => {
      if (res.headersSent) return void res.destroy();
      const body = JSON.stringify({
        error: { message: `sandbox relay: the gateway is unreachable (${err.message})`, type: 'bad_gateway' },
      });
      res.writeHead(502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
    });
    // The program went away mid-answer: stop asking the gateway for the rest.
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  }

  await listenOn(server, listen);
  let address: string;
  if ('socketPath' in listen) {
    address = listen.socketPath;
    chmodSync(address, 0o600);
    if (listen.owner) chownSync(address, listen.owner.uid, listen.owner.gid);
  } else {
    address = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }
  return {
    address,
    stats,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function listenOn(server: Server, listen: RelayListen): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    const done = () => {
      server.off('error', reject);
      resolve();
    };
    if ('socketPath' in listen) server.listen(listen.socketPath, done);
    else server.listen(0, '127.0.0.1', done);
  });
}
