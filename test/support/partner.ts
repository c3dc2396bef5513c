// The partner's side of the status route, written once for every test: in process through the
// app (`inject`, for the test service) and over HTTP (`fetch`, for the built service).
import type { FastifyInstance } from 'fastify';
import { agentStatusUrl, partnerPath, partnerRoutes } from '../../src/http/paths.js';

/** The partner route that disables and enables an agent. */
export const statusPath = partnerPath(partnerRoutes.agentStatus);

/** A route of the path table with its parameters filled in. */
const filled = (route: string, values: Record<string, string>) =>
  partnerPath(route as typeof partnerRoutes.agentStatus).replace(/:(\w+)/g, (_match, name: string) => values[name] ?? `:${name}`);

/** The partner API's URLs, from the path table (src/http/paths.ts): no test spells a partner path by hand. */
export const urls = {
  agentStatus: agentStatusUrl,
  statusChanges: (agentId: string) => filled(partnerRoutes.statusChanges, { agentId }),
  openApi: partnerPath(partnerRoutes.openApi),
  webhookEndpoints: partnerPath(partnerRoutes.webhookEndpoints),
  webhookEndpoint: (endpointId: string) => filled(partnerRoutes.webhookEndpoint, { endpointId }),
  webhookSecretRotation: (endpointId: string) => filled(partnerRoutes.webhookSecretRotation, { endpointId }),
  webhookDeliveries: (endpointId: string) => filled(partnerRoutes.webhookDeliveries, { endpointId }),
  webhookDeliveryRetry: (endpointId: string, deliveryId: string) => filled(partnerRoutes.webhookDeliveryRetry, { endpointId, deliveryId }),
};

/**
 * Any body, with or without a key (`undefined` or `null` sends no x-api-key header): for the
 * requests a partner gets wrong as well as right. A string body is sent as it is.
 */
export function injectStatusBody(
  app: Pick<FastifyInstance, 'inject'>,
  apiKey: string | null | undefined,
  body: unknown,
  headers: Record<string, string | string[]> = {},
) {
  return app.inject({
    method: 'POST',
    url: statusPath,
    headers: { 'content-type': 'application/json', ...(apiKey == null ? {} : { 'x-api-key': apiKey }), ...headers },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** A partner's status change, as the partner sends it, in process through the app. */
export function injectStatus(
  app: Pick<FastifyInstance, 'inject'>,
  apiKey: string,
  agentId: string,
  enabled: boolean,
  headers: Record<string, string> = {},
) {
  return injectStatusBody(app, apiKey, { agentId, enabled }, headers);
}

/** A partner's status change over HTTP, to a running service at `baseUrl`. */
export function postStatus(
  baseUrl: string,
  apiKey: string,
  agentId: string,
  enabled: boolean,
  options: { headers?: Record<string, string>; signal?: AbortSignal } = {},
) {
  return fetch(`${baseUrl}${statusPath}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': apiKey, ...options.headers },
    body: JSON.stringify({ agentId, enabled }),
    signal: options.signal,
  });
}

/** The bulk status change (docs/interfaces.md §16). */
export const batchPath = '/partner/agents/status/batch';

/** A partner's bulk status change over HTTP, to a running service at `baseUrl`; `body` is sent as it is when a string. */
export function postBatch(baseUrl: string, apiKey: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) {
  return fetch(`${baseUrl}${batchPath}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': apiKey, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
}
