import { FormatRegistry, type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { eventTypePrefix } from '../stores/event-outbox.js';

/**
 * The events of docs/interfaces.md §14 as CloudEvents 1.0 structured JSON: the schema the relay
 * checks every event against before it leaves the service, and the one docs/event.schema.json
 * publishes (a test keeps the two equal).
 */
const agentId = Type.String({ minLength: 1, description: 'The agent, `us-east-1:<uuid>`.' });

// TypeBox checks only the formats registered with it.
const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const dateTimePattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
if (!FormatRegistry.Has('uuid')) FormatRegistry.Set('uuid', (value) => uuidPattern.test(value));
if (!FormatRegistry.Has('date-time'))
  FormatRegistry.Set('date-time', (value) => dateTimePattern.test(value) && !Number.isNaN(Date.parse(value)));

const changeData = Type.Object(
  {
    agentId,
    networkId: Type.String({ format: 'uuid', description: "The agent's network." }),
    enabled: Type.Boolean({ description: 'The status the change set (a completion: `false`).' }),
    changeId: Type.Integer({
      minimum: 1,
      description:
        "The change's number among the agent's changes, as the status history says it; for a completion, the number of the disable it completes.",
    }),
  },
  { additionalProperties: false },
);

const completionData = Type.Object(
  {
    ...changeData.properties,
    enabled: Type.Literal(false),
    pausedCampaignCount: Type.Integer({
      minimum: 0,
      description: 'Campaigns the service paused on behalf of that disable, by its request and the worker together.',
    }),
  },
  { additionalProperties: false },
);

const envelope = {
  specversion: Type.Literal('1.0'),
  id: Type.String({ format: 'uuid', description: 'Unique; unchanged on every redelivery (also `Nats-Msg-Id` and `webhook-id`).' }),
  source: Type.String({ minLength: 1, description: "The service's URI (EVENTS_SOURCE)." }),
  subject: Type.String({ description: 'The agent id.' }),
  time: Type.String({ format: 'date-time', description: 'When the fact was recorded (UTC).' }),
  datacontenttype: Type.Literal('application/json'),
};

export const CloudEvent = Type.Union(
  [
    Type.Object(
      {
        ...envelope,
        type: Type.Union([Type.Literal(`${eventTypePrefix}agent.disabled`), Type.Literal(`${eventTypePrefix}agent.enabled`)]),
        data: changeData,
      },
      { additionalProperties: false },
    ),
    Type.Object(
      { ...envelope, type: Type.Literal(`${eventTypePrefix}agent.disable.completed`), data: completionData },
      { additionalProperties: false },
    ),
  ],
  {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    $id: 'urn:partner-agent-status:schemas:event',
    title: 'Partner agent status event',
    description: 'A CloudEvents 1.0 event in structured JSON mode: an agent disabled or enabled, or a disable completed.',
  },
);

export type CloudEvent = Static<typeof CloudEvent>;

/** Whether a stored event is one the service may publish (the formats `uuid` and `date-time` checked too). */
export function isCloudEvent(value: unknown): value is CloudEvent {
  return Value.Check(CloudEvent, value);
}
