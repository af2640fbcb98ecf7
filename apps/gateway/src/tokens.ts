/** Injection tokens of the gateway's own providers (stores and services are built in app.module from DATA_SOURCE and EVENT_BUS). */
export const GATEWAY_CONFIG = Symbol('GATEWAY_CONFIG');
export const MODEL_REGISTRY = Symbol('MODEL_REGISTRY');
export const INFERENCE_CLIENT = Symbol('INFERENCE_CLIENT');
export const GATEWAY_METRICS = Symbol('GATEWAY_METRICS');
export const SESSION_STORE = Symbol('SESSION_STORE');
export const SESSION_AUTH = Symbol('SESSION_AUTH');
export const CALL_SERVICE = Symbol('CALL_SERVICE');
export const IN_FLIGHT = Symbol('IN_FLIGHT');
export const POLICY_VERSIONS = Symbol('POLICY_VERSIONS');
export const SQL_CLIENT = Symbol('SQL_CLIENT');
export const OUTBOX_RELAY = Symbol('OUTBOX_RELAY');
export const CAPTURE_STORE = Symbol('CAPTURE_STORE');
export const INFERENCE_PROBE = Symbol('INFERENCE_PROBE');
export const CALL_ENDPOINT = Symbol('CALL_ENDPOINT');
export const RESPONSE_STORE = Symbol('RESPONSE_STORE');
