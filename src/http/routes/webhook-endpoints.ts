import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { LookupsBusy } from '../../events/webhook-resolver.js';
import { newSigningSecret } from '../../events/webhook-signature.js';
import type { WebhookDelivery, WebhookEndpoint, WebhookEndpointStore } from '../../stores/webhook-endpoints.js';
import { partnerRoutes } from '../paths.js';
import { problem, sendProblem } from '../problems.js';
import {
  createEndpointSchema,
  deleteEndpointSchema,
  enableEndpointSchema,
  listDeliveriesSchema,
  listEndpointsSchema,
  maxEndpointsPerNetwork,
  retryDeliverySchema,
  rotateSecretSchema,
  webhookEventTypes,
  webhookTexts,
} from './webhook-endpoints.schema.js';

export interface WebhookRouteDeps {
  endpoints: WebhookEndpointStore;
  /**
   * What is wrong with a URL to register (scheme, port, an address that is not public or a name
   * that does not resolve: one refusal for those), or undefined. Throws LookupsBusy when the
   * network already has as many lookups under way as it may.
   */
  refusalOfUrl: (url: string, networkId: string) => Promise<string | undefined>;
}

/** How long the previous secret signs beside a new one. */
const rotationOverlapMs = 24 * 3600 * 1000;

type EventType = (typeof webhookEventTypes)[number];

function view(endpoint: WebhookEndpoint) {
  return {
    id: endpoint.id,
    url: endpoint.url,
    eventTypes: (endpoint.eventTypes ?? [...webhookEventTypes]) as EventType[],
    status: endpoint.enabled ? ('enabled' as const) : ('disabled' as const),
    ...(endpoint.enabled || !endpoint.disabledReason ? {} : { disabledReason: endpoint.disabledReason as 'gone' | 'failing' }),
    createdAt: endpoint.createdAt,
  };
}

const deliveryView = (delivery: WebhookDelivery) => ({ ...delivery, eventType: delivery.eventType as EventType });

/**
 * The webhook endpoints of docs/interfaces.md §14. Every statement carries the key's network: an
 * endpoint of another network answers the same 404 as one that does not exist.
 */
export const webhookEndpointRoutes: FastifyPluginAsyncTypebox<WebhookRouteDeps> = async (app, { endpoints, refusalOfUrl }) => {
  const endpointNotFound = (requestId: string) => problem('notFound', webhookTexts.endpointNotFound, requestId);

  app.post(partnerRoutes.webhookEndpoints, { schema: createEndpointSchema }, async (request, reply) => {
    const { url, eventTypes } = request.body;
    const networkId = request.partner!.networkId;
    // The limit first: a network at its limit costs no lookup (create() checks it again, atomically).
    if ((await endpoints.count(networkId)) >= maxEndpointsPerNetwork) {
      return sendProblem(reply, problem('webhookEndpointLimit', webhookTexts.tooManyEndpoints, request.id));
    }
    let refusal: string | undefined;
    try {
      refusal = await refusalOfUrl(url, networkId);
    } catch (error) {
      if (!(error instanceof LookupsBusy)) throw error;
      request.audit.outcome = 'limited';
      reply.header('retry-after', '2');
      return sendProblem(reply, problem('webhookLookupsBusy', webhookTexts.lookupsBusy, request.id));
    }
    if (refusal) return sendProblem(reply, problem('validation', refusal, request.id));
    const secret = newSigningSecret();
    const made = await endpoints.create(networkId, { url, eventTypes: eventTypes ?? null, secret }, maxEndpointsPerNetwork);
    if (!made) return sendProblem(reply, problem('webhookEndpointLimit', webhookTexts.tooManyEndpoints, request.id));
    request.audit.outcome = 'webhook_endpoint_created';
    return reply.code(201).send({ ...view(made), secret });
  });

  app.get(partnerRoutes.webhookEndpoints, { schema: listEndpointsSchema }, async (request) => {
    request.audit.outcome = 'read';
    return { endpoints: (await endpoints.list(request.partner!.networkId)).map(view) };
  });

  app.delete(partnerRoutes.webhookEndpoint, { schema: deleteEndpointSchema }, async (request, reply) => {
    if (!(await endpoints.remove(request.partner!.networkId, request.params.endpointId))) {
      return sendProblem(reply, endpointNotFound(request.id));
    }
    request.audit.outcome = 'webhook_endpoint_deleted';
    return reply.code(204).send();
  });

  app.post(partnerRoutes.webhookSecretRotation, { schema: rotateSecretSchema }, async (request, reply) => {
    const secret = newSigningSecret();
    const until = new Date(Date.now() + rotationOverlapMs).toISOString();
    if (!(await endpoints.rotateSecret(request.partner!.networkId, request.params.endpointId, secret, rotationOverlapMs))) {
      return sendProblem(reply, endpointNotFound(request.id));
    }
    request.audit.outcome = 'webhook_secret_rotated';
    return { secret, previousSecretExpiresAt: until };
  });

  app.post(partnerRoutes.webhookEndpointEnable, { schema: enableEndpointSchema }, async (request, reply) => {
    const enabled = await endpoints.enable(request.partner!.networkId, request.params.endpointId);
    if (!enabled) return sendProblem(reply, endpointNotFound(request.id));
    request.audit.outcome = 'webhook_endpoint_enabled';
    return view(enabled);
  });

  app.get(partnerRoutes.webhookDeliveries, { schema: listDeliveriesSchema }, async (request, reply) => {
    const limit = request.query.limit === undefined ? 20 : Number(request.query.limit);
    const deliveries = await endpoints.deliveries(request.partner!.networkId, request.params.endpointId, limit);
    if (!deliveries) return sendProblem(reply, endpointNotFound(request.id));
    request.audit.outcome = 'read';
    return { deliveries: deliveries.map(deliveryView) };
  });

  app.post(partnerRoutes.webhookDeliveryRetry, { schema: retryDeliverySchema }, async (request, reply) => {
    const { endpointId, deliveryId } = request.params;
    const networkId = request.partner!.networkId;
    const delivery = await endpoints.retry(networkId, endpointId, deliveryId);
    if (!delivery) {
      // Which of the two is missing is the network's own business: its endpoint exists or not.
      const known = await endpoints.deliveries(networkId, endpointId, 1);
      return sendProblem(reply, known ? problem('notFound', webhookTexts.deliveryNotFound, request.id) : endpointNotFound(request.id));
    }
    request.audit.outcome = 'webhook_delivery_retried';
    return reply.code(202).send(deliveryView(delivery));
  });
};
