// The local sandbox's network: its own namespace, in which the only reachable address is its
// gateway session, relayed to a real HTTP server that records what reaches it.
import { networkInterfaces } from 'node:os';
import { describe, expect, it } from 'vitest';
import { besideNeighbour, CHAT_CALL, expectNormal, localSandboxSuite, python, workspace } from '../testing/harness';
import { PLACEHOLDER_KEY } from '../types';

const UID_BASE = 1_900_010_000;
const UID_COUNT = 64;

const suite = localSandboxSuite(UID_BASE, UID_COUNT);

/** A Python helper: a raw request to the relay (the target sent as written), printing status and body. */
const RAW = `
import http.client, os
def raw(method, target, headers={}, body=b''):
    c = http.client.HTTPConnection('127.0.0.1', 8080, timeout=10)
    c.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
    c.putheader('Host', '127.0.0.1:8080')
    for k, v in headers.items(): c.putheader(k, v)
    c.endheaders(body or None)
    r = c.getresponse()
    print(method, target, r.status, r.read().decode()[:120])
`;

describe('local sandbox: network', () => {
  it("relays the session's API with the session's key, whatever key the program sends; the key never enters the sandbox", async () => {
    const session = suite.gateway.session();
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'calls',
        workspace: workspace(),
        session,
        limits: { wallMs: 20_000 },
        argv: python(`${CHAT_CALL}
${RAW}
import os
raw('POST', '/v1/messages', {'x-api-key': 'anvil-sess_stolenstolenstolen.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', 'content-length': '2', 'authorization': 'Bearer stolen'}, b'{}')
print('env', sorted((k, v) for k, v in os.environ.items() if 'OPENAI' in k or 'ANTHROPIC' in k))
print('environ holds the key:', '${session.apiKey}' in open('/proc/self/environ').read())
`),
      }),
    );
    expectNormal(r);
    expect(r.stdout).toContain(`answered on /sessions/${session.apiKey}/v1/chat/completions`);
    expect(r.stdout).toContain('environ holds the key: False');
    expect(r.stdout).toContain(`('OPENAI_API_KEY', '${PLACEHOLDER_KEY}')`);
    expect(r.stdout).toContain("('OPENAI_BASE_URL', 'http://127.0.0.1:8080/v1')");
    const seen = suite.gateway.requestsOf(session.apiKey);
    expect(seen.map((q) => q.url)).toEqual([`/sessions/${session.apiKey}/v1/chat/completions`, `/sessions/${session.apiKey}/v1/messages`]);
    for (const q of seen) expect(q.headers.authorization).toBe(`Bearer ${session.apiKey}`);
    expect(seen[1].headers['x-api-key']).toBe(session.apiKey);
    expect(r.relay).toEqual({ forwarded: 2, refused: 0, refusedRequests: [] });
  });

  it("refuses the admin API, another session's URL, dot segments, proxy requests and CONNECT: none reaches the suite.gateway", async () => {
    const session = suite.gateway.session();
    const other = suite.gateway.session();
    const before = suite.gateway.requests.length;
    const targets = [
      ['GET', '/admin/v1/sessions'],
      ['POST', '/admin/v1/sessions/batch'],
      ['POST', `/sessions/${other.apiKey}/v1/chat/completions`],
      ['GET', '/v1/../admin/v1/sessions'],
      ['GET', '/v1/%2e%2e/%2e%2e/admin/v1/sessions'],
      ['GET', `http://127.0.0.1:${suite.gateway.port}/admin/v1/sessions`],
      ['GET', `http://127.0.0.1:${suite.gateway.port}/sessions/${other.apiKey}/v1/models`],
      ['CONNECT', `127.0.0.1:${suite.gateway.port}`],
    ];
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'refused',
        workspace: workspace(),
        session,
        limits: { wallMs: 20_000 },
        argv: python(`${RAW}\n${targets.map(([m, t]) => `raw(${JSON.stringify(m)}, ${JSON.stringify(t)})`).join('\n')}`),
      }),
    );
    expectNormal(r);
    const statuses = r.stdout
      .trim()
      .split('\n')
      .map((l) => l.split(' ')[2]);
    expect(statuses).toEqual(targets.map(() => '403'));
    // Only the neighbour's one call reached the suite.gateway meanwhile.
    expect(
      suite.gateway.requests.slice(before).filter((q) => !q.url.includes('/v1/chat/completions') || q.url.includes(other.apiKey)),
    ).toEqual([]);
    expect(suite.gateway.requestsOf(other.apiKey)).toEqual([]);
    expect(suite.gateway.requestsOf(session.apiKey)).toEqual([]);
    expect(r.relay.refused).toBe(targets.length);
    expect(r.relay.refusedRequests.join('\n')).not.toContain(other.apiKey);
  });

  it('reaches no other address: not a host port, not the host itself, not DNS, not the internet', async () => {
    const session = suite.gateway.session();
    const hostIp = Object.values(networkInterfaces())
      .flat()
      .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
    const before = suite.gateway.requests.length;
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'net',
        workspace: workspace(),
        session,
        limits: { wallMs: 20_000 },
        argv: python(`
import socket
def attempt(name, fn):
    try:
        fn(); print(name, 'REACHED')
    except OSError as e:
        print(name, 'blocked', type(e).__name__)
attempt('gateway-port', lambda: socket.create_connection(('127.0.0.1', ${suite.gateway.port}), timeout=3))
attempt('host-ip', lambda: socket.create_connection(('${hostIp ?? '10.255.255.1'}', ${suite.gateway.port}), timeout=3))
attempt('dns', lambda: socket.getaddrinfo('example.com', 80))
attempt('udp-dns', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53)))
attempt('internet', lambda: socket.create_connection(('1.1.1.1', 443), timeout=3))
attempt('ipv6', lambda: socket.create_connection(('::1', ${suite.gateway.port}), timeout=3))
`),
      }),
    );
    expectNormal(r);
    for (const name of ['gateway-port', 'host-ip', 'dns', 'udp-dns', 'internet', 'ipv6'])
      expect(r.stdout).toMatch(new RegExp(`^${name} blocked`, 'm'));
    expect(suite.gateway.requests.slice(before).filter((q) => !q.url.includes('/chat/completions'))).toEqual([]);
  });

  it('streams server-sent events through unbuffered', async () => {
    const session = suite.gateway.session();
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'sse',
        workspace: workspace(),
        session,
        limits: { wallMs: 15_000 },
        // The second event is only sent after the ack, which is only sent once the first arrived.
        argv: python(`
import os, urllib.request
base = os.environ['OPENAI_BASE_URL']
stream = urllib.request.urlopen(base + '/stream', timeout=10)
first = stream.readline()
print('got', first.decode().strip())
urllib.request.urlopen(urllib.request.Request(base + '/ack', data=b'{}'), timeout=10).read()
print('rest', stream.read().decode().split())
`),
      }),
    );
    expectNormal(r);
    expect(r.stdout).toBe("got data: first\nrest ['data:', 'second', 'data:', '[DONE]']\n");
  });

  it('without a session there is nothing to reach at all', async () => {
    const r = await suite.backend.run({
      label: 'offline',
      workspace: workspace(),
      limits: { wallMs: 20_000 },
      argv: python(`
import os, socket
print('base', os.environ.get('OPENAI_BASE_URL'))
try:
    socket.create_connection(('127.0.0.1', 8080), timeout=3); print('REACHED')
except OSError as e:
    print('blocked', type(e).__name__)
`),
    });
    expectNormal(r);
    expect(r.stdout).toBe('base None\nblocked ConnectionRefusedError\n');
  });
});
