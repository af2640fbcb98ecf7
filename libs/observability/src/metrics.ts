import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * One Prometheus registry per service process, served on /metrics. Metric names are
 * prefixed `anvil_` and labelled with the service so one scrape config fits all five.
 */
export class ServiceMetrics {
  readonly registry = new Registry();

  constructor(readonly service: string) {
    this.registry.setDefaultLabels({ service });
    collectDefaultMetrics({ register: this.registry, prefix: 'anvil_process_' });
  }

  counter(name: string, help: string, labelNames: string[] = []) {
    return new Counter({ name: `anvil_${name}`, help, labelNames, registers: [this.registry] });
  }

  gauge(name: string, help: string, labelNames: string[] = []) {
    return new Gauge({ name: `anvil_${name}`, help, labelNames, registers: [this.registry] });
  }

  histogram(name: string, help: string, labelNames: string[] = [], buckets?: number[]) {
    return new Histogram({ name: `anvil_${name}`, help, labelNames, buckets, registers: [this.registry] });
  }

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
