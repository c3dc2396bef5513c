// The partner routes' side of API versions (docs/interfaces.md §15): resolving a request's version
// after its key is known, refusing an unknown or sunset one, and stamping every answer with its
// version and the version's deprecation. The table itself is api-versions.ts.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  type ApiVersion,
  apiVersionHeader,
  type Deprecations,
  defaultApiVersion,
  deprecationHeaders,
  isApiVersion,
  supportedApiVersions,
} from '../api-versions.js';
import type { Metrics } from '../observability/metrics.js';
import { problem, sendProblem } from './problems.js';

/** The version a request is answered in (resolved by the partner guard; the default before it ran). */
export function versionOf(request: FastifyRequest): ApiVersion {
  const version = request.audit?.apiVersion;
  return isApiVersion(version) ? version : defaultApiVersion;
}

const unsupportedDetail = (supported: readonly string[], pinned: string | undefined) =>
  `${pinned ? `The version your key is pinned to (${pinned}) is no longer served. ` : ''}Partner-Api-Version must name one of the supported versions exactly (YYYY-MM-DD): ${supported.join(', ')}. Nothing was changed.`;

/**
 * The version hooks of the partner routes. `resolve` runs right after authentication: the
 * `Partner-Api-Version` header, else the key's pinned version, else the default; a supported one is
 * echoed at once (so that the rate limit's 429 carries it too). `refuseUnsupported` runs after the
 * rate limit and before validation: an unknown or sunset version answers 400 with the supported
 * versions, without the header (docs/interfaces.md §3 and §15). When an answer is sent, its version
 * is the one in its `Partner-Api-Version` header (an Idempotency-Key replay restores the first
 * request's): deprecation headers, the access line and the metric follow that one.
 */
export function apiVersionHooks(app: FastifyInstance, deprecations: Deprecations, metrics: Metrics) {
  const refused = new WeakMap<FastifyRequest, { pinned: string | undefined }>();
  const answers = metrics.apiVersionAnswers;

  async function resolve(request: FastifyRequest, reply: FastifyReply) {
    const sent = request.headers[apiVersionHeader];
    const pinned = request.partner?.apiVersion;
    const version = sent ?? pinned ?? defaultApiVersion;
    const sunsetAt = isApiVersion(version) ? deprecations.get(version)?.sunsetAt : undefined;
    if (isApiVersion(version) && (sunsetAt === undefined || Date.now() < sunsetAt)) {
      request.audit.apiVersion = version;
      reply.header(apiVersionHeader, version);
    } else {
      // The value sent is never echoed (it could hold anything); a pinned one comes from the key set.
      refused.set(request, { pinned: sent === undefined ? pinned : undefined });
    }
  }

  async function refuseUnsupported(request: FastifyRequest, reply: FastifyReply) {
    const refusal = refused.get(request);
    if (!refusal) return;
    request.audit.outcome = 'unsupported_api_version';
    const supported = supportedApiVersions(deprecations);
    const body = Object.assign(problem('unsupportedApiVersion', unsupportedDetail(supported, refusal.pinned), request.id), {
      supportedVersions: supported,
    });
    return sendProblem(reply, body);
  }

  app.addHook('onSend', (request, reply, payload, done) => {
    const version = reply.getHeader(apiVersionHeader);
    if (isApiVersion(version)) {
      request.audit.apiVersion = version;
      const deprecation = deprecations.get(version);
      if (deprecation) reply.headers(deprecationHeaders(deprecation));
      answers.inc({ partner: request.partner?.name ?? '', api_version: version });
    } else if (refused.has(request)) {
      answers.inc({ partner: request.partner?.name ?? '', api_version: 'unsupported' });
    }
    done(null, payload);
  });

  return { resolve, refuseUnsupported };
}
