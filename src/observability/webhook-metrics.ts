import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** Outcomes of one webhook attempt (docs/interfaces.md §14). */
export const attemptOutcomes = ['success', 'http_error', 'gone', 'timeout', 'refused', 'network_error'] as const;
export type AttemptOutcome = (typeof attemptOutcomes)[number];

/**
 * The partner webhooks' series, on the app's registry. Labels are bounded: outcomes and reasons,
 * never a network, an endpoint or a URL.
 */
export function webhookMetrics(registry: Registry) {
  const webhooks = {
    deliveries: new Counter({
      name: 'webhook_deliveries_total',
      help: 'Webhook deliveries that ended, by outcome (succeeded: a 2xx; failed: every attempt of the schedule failed, or the endpoint answered 410).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    attempts: new Counter({
      name: 'webhook_delivery_attempts_total',
      help: 'Webhook attempts, by outcome (success, http_error: any other status, gone: 410, timeout, refused: the address is not public, network_error).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    attemptDuration: new Histogram({
      name: 'webhook_delivery_attempt_duration_seconds',
      help: 'Webhook attempts from connecting to the answer (or its failure), by outcome.',
      labelNames: ['outcome'] as const,
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15],
      registers: [registry],
    }),
    endpointsDisabled: new Counter({
      name: 'webhook_endpoints_disabled_total',
      help: 'Partner webhook endpoints the sender disabled, by reason (gone: it answered 410; failing: every attempt failed for 5 days).',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    pending: new Gauge({
      name: 'webhook_deliveries_pending',
      help: "Webhook deliveries of enabled endpoints waiting for an attempt or under way, as last read by this replica's sender.",
      registers: [registry],
    }),
    oldestDueAge: new Gauge({
      name: 'webhook_deliveries_oldest_due_age_seconds',
      help: "How long the longest-waiting due webhook delivery has waited past its due time, 0 when none; as last read by this replica's sender.",
      registers: [registry],
    }),
    deliveriesDropped: new Counter({
      name: 'webhook_deliveries_dropped_total',
      help: 'Webhook deliveries not made because their network already had WEBHOOK_NETWORK_MAX_PENDING deliveries waiting (the log names the network).',
      registers: [registry],
    }),
    networkInFlightBound: new Counter({
      name: 'webhook_network_in_flight_bound_total',
      help: 'Claims of the sender at which some network had due deliveries held back because it had WEBHOOK_NETWORK_MAX_IN_FLIGHT attempts under way.',
      registers: [registry],
    }),
    lookupsRefused: new Counter({
      name: 'webhook_dns_lookups_refused_total',
      help: 'Registrations refused at once (429) because their network had WEBHOOK_DNS_LOOKUPS_PER_NETWORK host lookups under way in this replica.',
      registers: [registry],
    }),
    pruned: new Counter({
      name: 'webhook_deliveries_pruned_total',
      help: 'Finished webhook deliveries deleted after their 30 days of history.',
      registers: [registry],
    }),
  };
  for (const outcome of ['succeeded', 'failed']) webhooks.deliveries.inc({ outcome }, 0);
  for (const outcome of attemptOutcomes) webhooks.attempts.inc({ outcome }, 0);
  for (const reason of ['gone', 'failing']) webhooks.endpointsDisabled.inc({ reason }, 0);
  webhooks.pending.set(0);
  webhooks.oldestDueAge.set(0);
  return webhooks;
}
