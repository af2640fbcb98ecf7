/** Injection tokens shared by every service. */
export const SERVICE_NAME = Symbol('SERVICE_NAME');
export const LOGGER = Symbol('LOGGER');
export const METRICS = Symbol('METRICS');
export const EVENT_BUS = Symbol('EVENT_BUS');
export const DATA_SOURCE = Symbol('DATA_SOURCE');
