/**
 * Flags every service's node process starts with (the Dockerfile, `nx serve`, and the tests'
 * and benchmarks' service launcher; node-flags.spec.ts checks they agree).
 *
 * --max-semi-space-size=64 (MB; Node 20's default here is 16): a gateway or inference-proxy
 * under load holds hundreds of calls in flight, and with the default young generation their
 * objects survive scavenges, get promoted and are collected again by the old-generation GC.
 * Measured with tools/bench/profile-gateway.ts (256 sessions, capture on): about 10–15% less CPU
 * per call in both services. It is a startup flag: V8 ignores it when set at run time.
 */
export const SERVICE_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=64'];
