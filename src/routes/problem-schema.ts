import { Type } from '@fastify/type-provider-typebox';

/** RFC 9457 problem details as this service sends them (see src/errors.ts). */
export const ProblemSchema = Type.Object(
  {
    type: Type.String({ description: 'Stable identifier of the kind of problem (a URN).' }),
    title: Type.String({ description: 'Short summary of the kind of problem.' }),
    status: Type.Integer({ minimum: 400, maximum: 599 }),
    detail: Type.String({ description: 'What went wrong with this request and how to fix it.' }),
    requestId: Type.String({ description: 'The x-request-id of the request; quote it to support.' }),
  },
  { additionalProperties: false, $id: 'Problem', title: 'Problem' },
);
