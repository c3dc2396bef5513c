import { trace } from '@opentelemetry/api';
import type { onRequestAsyncHookHandler } from 'fastify';
import { Unauthorized } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import type { PartnerKeyStore } from './partner-keys.js';

/**
 * Authentication runs first (onRequest, before the body is read or validated): a request without a
 * valid key gets 401 whatever its body. The key is read from `x-api-key` only, and never stored,
 * logged or echoed; the partner record it maps to goes on the request.
 */
export function createApiKeyHook(keyStore: PartnerKeyStore, metrics: Metrics): onRequestAsyncHookHandler {
  return async (request) => {
    const apiKey = request.headers['x-api-key'];
    if (typeof apiKey !== 'string' || apiKey.length === 0) {
      metrics.authFailures.inc({ reason: 'missing' });
      throw new Unauthorized('missing');
    }
    const partner = keyStore.lookup(apiKey);
    if (!partner) {
      metrics.authFailures.inc({ reason: 'unknown' });
      throw new Unauthorized('unknown');
    }
    request.partner = partner;
    request.audit.partner = partner.name;
    trace.getActiveSpan()?.setAttributes({ 'partner.name': partner.name, 'network.id': partner.networkId });
  };
}
