export * from './types';
export * from './errors';
export { createSandbox, SANDBOX_KINDS, type SandboxKind } from './create';
export { LocalSandbox, type LocalBackendOptions } from './local/local-backend';
export { NoneSandbox, type NoneBackendOptions } from './none/none-backend';
export { ensureSandboxTools, type SandboxTools, type EnsureToolsOptions } from './install/tools';
export { checkUserNamespaces, detectCgroups, type CgroupSupport } from './local/probe';
export { routeSessionRequest, type RouteDecision } from './relay/route';
export { startSessionRelay, type SessionRelay, type RelayListen } from './relay/session-relay';
