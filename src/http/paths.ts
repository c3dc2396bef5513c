/** Everything the ingress routes to the service is under this prefix; nothing outside it is partner API. */
export const partnerPrefix = '/partner';

/**
 * The partner routes, as their files register them under `partnerPrefix` (src/http/route-table.ts
 * mounts them there), with Fastify's `:name` parameters. A new route family, or a prefix of its
 * own, is one entry here.
 */
export const partnerRoutes = {
  agentStatus: '/agents/status',
  agentStatusBatch: '/agents/status/batch',
  agentStatusBatchRead: '/agents/status/batch/:batchId',
  agentStatusRead: '/agents/:agentId/status',
  statusChanges: '/agents/:agentId/status-changes',
  openApi: '/openapi.json',
  referencePage: '/docs',
  webhookEndpoints: '/webhook-endpoints',
  webhookEndpoint: '/webhook-endpoints/:endpointId',
  webhookSecretRotation: '/webhook-endpoints/:endpointId/rotate-secret',
  webhookEndpointEnable: '/webhook-endpoints/:endpointId/enable',
  webhookDeliveries: '/webhook-endpoints/:endpointId/deliveries',
  webhookDeliveryRetry: '/webhook-endpoints/:endpointId/deliveries/:deliveryId/retry',
  events: '/events',
} as const;

type PartnerRoute = (typeof partnerRoutes)[keyof typeof partnerRoutes];

/** A partner route's path as served. */
export function partnerPath<Route extends PartnerRoute>(route: Route): `${typeof partnerPrefix}${Route}` {
  return `${partnerPrefix}${route}`;
}

/** A partner route's path as texts and documentation write it: `{agentId}` for `:agentId`. */
export function documentedPath(route: PartnerRoute): string {
  return partnerPath(route).replace(/:(\w+)/g, '{$1}');
}

/** The status endpoint of one agent: the Location of a 202. */
export function agentStatusUrl(agentId: string): string {
  return partnerPath(partnerRoutes.agentStatusRead).replace(':agentId', () => agentId);
}

/** The route label of the status change in the metrics (the route template, never the URL). */
export const statusChangeRouteLabel = `POST ${partnerPath(partnerRoutes.agentStatus)}`;

/** The resource of a bulk change (docs/interfaces.md §16): the Location of its 202. */
export function statusBatchUrl(batchId: string): string {
  return partnerPath(partnerRoutes.agentStatusBatchRead).replace(':batchId', () => batchId);
}

/** The route label of the bulk change in the metrics. */
export const statusBatchRouteLabel = `POST ${partnerPath(partnerRoutes.agentStatusBatch)}`;
