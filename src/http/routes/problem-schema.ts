import { Type } from '@fastify/type-provider-typebox';
import { type Problem, type ProblemKind, problem, problemTypes } from '../problems.js';

/**
 * RFC 9457 problem details as this service sends them (see src/http/problems.ts). Registered once with
 * `addSchema` and referenced with `Type.Ref(ProblemSchema)`, so the OpenAPI document holds it once,
 * as `#/components/schemas/Problem`.
 */
export const ProblemSchema = Type.Object(
  {
    type: Type.String({
      format: 'uri',
      description:
        'Stable identifier of the kind of problem, a URN such as `urn:partner-agent-status:problem:not-found`. Match on this, not on `title` or `detail`; treat a type you do not know by its `status`.',
    }),
    title: Type.String({ description: 'Short summary of the kind of problem; the same for every problem of one `type`.' }),
    status: Type.Integer({ minimum: 400, maximum: 599, description: 'The HTTP status code of the response.' }),
    detail: Type.String({ description: 'What went wrong with this request and how to fix it.' }),
    requestId: Type.String({ description: 'The `x-request-id` of the request; quote it to support.' }),
    pausedCampaignCount: Type.Optional(
      Type.Integer({
        minimum: 0,
        description: 'On a disable that did not finish (500) or was superseded (409): campaigns this call paused.',
      }),
    ),
    remainingCampaignCount: Type.Optional(
      Type.Integer({
        minimum: 0,
        description:
          'On a disable that did not finish (500): active, unpaused campaigns of the agent still to pause. The service goes on pausing them by itself.',
      }),
    ),
    errors: Type.Optional(
      Type.Array(
        Type.Object(
          {
            pointer: Type.String({ description: 'JSON Pointer (RFC 6901) into the request body, such as `/changes/3/agentId`.' }),
            detail: Type.String({ description: 'What is wrong there.' }),
          },
          { additionalProperties: false },
        ),
        { description: 'On a bulk change (400): the first bad change, by its place in the body.' },
      ),
    ),
    supportedVersions: Type.Optional(
      Type.Array(Type.String(), {
        description: 'On an unsupported API version (400): the versions `Partner-Api-Version` may name.',
      }),
    ),
  },
  {
    $id: 'Problem',
    title: 'Problem',
    description: 'An error, as RFC 9457 problem details (`application/problem+json`).',
    additionalProperties: false,
  },
);

/** The request id the documentation's examples carry. */
const exampleRequestId = '5b0e8c1d-2f47-4a36-9e1b-7d3c6a9f0e42';

export interface ProblemExample {
  summary: string;
  kind: ProblemKind;
  detail: string;
  extension?: Pick<Problem, 'pausedCampaignCount' | 'remainingCampaignCount' | 'errors'>;
}

/**
 * A documented error response of a route: `application/problem+json` with the shared Problem
 * schema, a description naming the problem types it can carry, and one realistic example per case.
 * Examples are built with `problem()` itself, so their `type`, `title` and `status` are the ones
 * the service sends.
 */
export function problemResponse(
  status: number,
  description: string,
  examples: Record<string, ProblemExample>,
  headers?: Record<string, unknown>,
) {
  const built: Record<string, { summary: string; value: Problem }> = {};
  const kinds = new Set<ProblemKind>();
  for (const [name, { summary, kind, detail, extension }] of Object.entries(examples)) {
    const value = problem(kind, detail, exampleRequestId, extension);
    if (value.status !== status) throw new Error(`example ${name} of the ${status} response is a ${value.status} problem`);
    built[name] = { summary, value };
    kinds.add(kind);
  }
  const types = [...kinds].map((kind) => `\`${problem(kind, '', '').type}\` (${problemTypes[kind].title})`).join(', ');
  return {
    description: `${description} Problem type${kinds.size > 1 ? 's' : ''}: ${types}.`,
    ...(headers ? { headers } : {}),
    content: { 'application/problem+json': { schema: Type.Ref(ProblemSchema), examples: built } },
  };
}
