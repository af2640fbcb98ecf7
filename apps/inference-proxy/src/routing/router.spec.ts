import { describe, expect, it } from 'vitest';
import type { InferenceBackend } from '../backends/backend';
import { Replica } from './replica';
import { NoReplicaAvailableError, Router } from './router';

// The router only reads id and inFlight from a backend; generation is exercised against the
// engine fixtures in test/integration/inference-proxy-routing.int.spec.ts.
const replica = (id: string, inFlight = 0) => new Replica({ id, kind: 'vllm', inFlight } as unknown as InferenceBackend);

describe('Router', () => {
  const replicas = ['http://a', 'http://b', 'http://c'].map((id) => replica(id));
  const router = new Router(() => replicas, { maxInFlightPerReplica: 4 });

  it('sends a session to its rendezvous replica', () => {
    const first = router.route('s1');
    expect(first.reason).toBe('affinity');
    for (let i = 0; i < 5; i++) expect(router.route('s1').replica).toBe(first.replica);
  });

  it('uses the least-loaded routable replica when the affine one is unhealthy, stale, excluded or full', () => {
    const home = router.route('s2').replica;
    const others = replicas.filter((r) => r !== home);
    (others[0] as { backend: { inFlight: number } }).backend.inFlight = 3;
    for (const disable of [
      () => (home.healthy = false),
      () => (home.stale = true),
      () => ((home as { backend: { inFlight: number } }).backend.inFlight = 4),
    ]) {
      disable();
      expect(router.route('s2')).toEqual({ replica: others[1], reason: 'least-loaded' });
      home.healthy = true;
      home.stale = false;
      (home as { backend: { inFlight: number } }).backend.inFlight = 0;
    }
    expect(router.route('s2', new Set([home.id])).replica).toBe(others[1]);
    expect(router.route('s2').replica).toBe(home);
  });

  it('throws NoReplicaAvailableError when nothing is routable', () => {
    expect(() => router.route('s3', new Set(replicas.map((r) => r.id)))).toThrow(NoReplicaAvailableError);
  });
});
