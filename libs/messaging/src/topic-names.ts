import { deadLetterTopicOf, retryTopicOf } from '@anvil/contracts';

// Kafka's own limits for topic names; group ids end up inside retry/DLQ topic names.
const LEGAL = /^[A-Za-z0-9._-]+$/;
const MAX_TOPIC_LENGTH = 249;

/**
 * Maps logical topic names (what callers use) to physical ones (what the broker stores).
 * The prefix lets tests and side-by-side deployments share one broker without colliding; it is
 * applied to whole names, so retry and dead-letter topics carry it too.
 */
export class TopicNamespace {
  constructor(readonly prefix = '') {
    if (prefix !== '' && !LEGAL.test(prefix)) throw new Error(`topicPrefix ${JSON.stringify(prefix)} may only contain [A-Za-z0-9._-]`);
  }

  physical(logical: string): string {
    assertTopicName(logical);
    const name = this.prefix + logical;
    if (name.length > MAX_TOPIC_LENGTH) throw new Error(`topic name ${name} is longer than ${MAX_TOPIC_LENGTH} chars`);
    return name;
  }

  logical(physical: string): string {
    return physical.startsWith(this.prefix) ? physical.slice(this.prefix.length) : physical;
  }
}

export function assertTopicName(name: string): void {
  if (!LEGAL.test(name)) throw new Error(`topic ${JSON.stringify(name)} may only contain [A-Za-z0-9._-]`);
}

export function assertGroupName(group: string): void {
  // No default group, ever: a forgotten group id would silently share offsets between services.
  if (typeof group !== 'string' || !LEGAL.test(group)) {
    throw new Error(`consumer group ${JSON.stringify(group)} is required and may only contain [A-Za-z0-9._-]`);
  }
}

/** How a physical topic a group reads relates to the logical topic it subscribed to. */
export interface TopicRoute {
  /** The subscribed logical topic. */
  logical: string;
  kind: 'main' | 'retry';
  /** Physical names of the group's retry and dead-letter topics for `logical`. */
  retryTopic: string;
  deadLetterTopic: string;
}

/** The topics one group subscription touches: its topics, their retry topics and DLQs. */
export class SubscriptionTopology {
  private readonly routes = new Map<string, TopicRoute>();

  constructor(
    readonly ns: TopicNamespace,
    readonly group: string,
    logicalTopics: readonly string[],
  ) {
    assertGroupName(group);
    if (logicalTopics.length === 0) throw new Error('subscribe needs at least one topic');
    for (const logical of new Set(logicalTopics)) {
      const retryTopic = ns.physical(retryTopicOf(logical, group));
      const deadLetterTopic = ns.physical(deadLetterTopicOf(logical, group));
      this.routes.set(ns.physical(logical), { logical, kind: 'main', retryTopic, deadLetterTopic });
      this.routes.set(retryTopic, { logical, kind: 'retry', retryTopic, deadLetterTopic });
    }
  }

  route(physicalTopic: string): TopicRoute {
    const route = this.routes.get(physicalTopic);
    if (!route) throw new Error(`topic ${physicalTopic} is not part of group ${this.group}'s subscription`);
    return route;
  }

  /** Physical topics the group reads: subscribed topics first, then their retry topics. */
  get mainTopics(): string[] {
    return [...this.routes].filter(([, r]) => r.kind === 'main').map(([t]) => t);
  }

  get retryTopics(): string[] {
    return [...this.routes].filter(([, r]) => r.kind === 'retry').map(([t]) => t);
  }

  get deadLetterTopics(): string[] {
    return [...new Set([...this.routes.values()].map((r) => r.deadLetterTopic))];
  }

  /** Everything that must exist before the group starts. */
  get allTopics(): string[] {
    return [...this.mainTopics, ...this.retryTopics, ...this.deadLetterTopics];
  }
}
