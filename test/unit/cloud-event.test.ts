import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import formats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { CloudEvent, isCloudEvent } from '../../src/events/cloud-event.js';

// The event format of docs/interfaces.md §14: the TypeBox schema the relay checks, the JSON Schema
// published in docs/, and the settings of the events.

const published = JSON.parse(readFileSync('docs/event.schema.json', 'utf8'));

const disabled = {
  specversion: '1.0',
  id: '5f0c3e0e-8f0b-4d43-a3a4-3d6f1b7b9a10',
  source: 'https://partner-api.example.com/',
  type: 'partner-agent-status.agent.disabled',
  subject: 'us-east-1:0b6f3c1e-3f5a-4c1e-9a55-2f6c1d7e8a90',
  time: '2026-11-26T10:00:00.123456Z',
  datacontenttype: 'application/json',
  data: {
    agentId: 'us-east-1:0b6f3c1e-3f5a-4c1e-9a55-2f6c1d7e8a90',
    networkId: '9a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d',
    enabled: false,
    changeId: 7,
  },
};
const completed = {
  ...disabled,
  type: 'partner-agent-status.agent.disable.completed',
  data: { ...disabled.data, pausedCampaignCount: 12 },
};

describe('the event schema', () => {
  it('is published in docs/event.schema.json exactly as the relay checks it', () => {
    expect(published).toEqual(JSON.parse(JSON.stringify(CloudEvent)));
  });

  const ajv = new Ajv2020({ strict: false });
  formats.default(ajv);
  const validate = ajv.compile(published);

  it.each([
    ['a disable', disabled],
    ['an enable', { ...disabled, type: 'partner-agent-status.agent.enabled', data: { ...disabled.data, enabled: true } }],
    ['a completion', completed],
  ])('accepts %s, in both the published schema and the relay check', (_, event) => {
    expect(validate(event)).toBe(true);
    expect(isCloudEvent(event)).toBe(true);
  });

  it.each([
    ['without an id', { ...disabled, id: undefined }],
    ['of another CloudEvents version', { ...disabled, specversion: '0.3' }],
    ['of an unknown type', { ...disabled, type: 'agent.disabled' }],
    ['with a field of its own in data', { ...disabled, data: { ...disabled.data, apiKey: 'x' } }],
    ['a completion without its count', { ...completed, data: disabled.data }],
    ['a change with a count', { ...disabled, data: completed.data }],
    ['with a time that is no date', { ...disabled, time: 'yesterday' }],
  ])('refuses an event %s', (_, event) => {
    const value = JSON.parse(JSON.stringify(event));
    expect(validate(value)).toBe(false);
    expect(isCloudEvent(value)).toBe(false);
  });
});

describe('the events settings', () => {
  const base = {
    DATABASE_URL: 'postgres://localhost/db',
    REDIS_URL: 'redis://localhost:6379',
    SPEND_MANAGEMENT_URL: 'http://localhost:8081',
    PARTNER_KEYS_FILE: '/keys/partner-keys.json',
  };

  it('defaults to no broker, the contract stream and prefix, and a relay that only marks', () => {
    const { events } = loadConfig(base);
    expect(events).toMatchObject({
      natsUrl: undefined,
      stream: 'PARTNER_AGENT_STATUS',
      subjectPrefix: 'partner-agent-status',
      createStream: false,
      source: 'urn:partner-agent-status',
      retentionMs: 30 * 86_400_000,
    });
    expect(events.relayLeaseMs).toBeGreaterThan(events.publishTimeoutMs);
  });

  it('reads the broker settings', () => {
    const { events } = loadConfig({
      ...base,
      EVENTS_NATS_URL: 'nats://nats-a:4222,nats://nats-b:4222',
      EVENTS_STREAM: 'AGENT_EVENTS',
      EVENTS_SUBJECT_PREFIX: 'platform.partner-agent-status',
      EVENTS_CREATE_STREAM: 'true',
      EVENTS_SOURCE: 'https://partner-api.example.com/',
    });
    expect(events).toMatchObject({
      natsUrl: 'nats://nats-a:4222,nats://nats-b:4222',
      stream: 'AGENT_EVENTS',
      subjectPrefix: 'platform.partner-agent-status',
      createStream: true,
      source: 'https://partner-api.example.com/',
    });
  });

  it.each([
    [{ EVENTS_NATS_URL: 'http://nats:4222' }, 'EVENTS_NATS_URL'],
    [{ EVENTS_STREAM: 'with space' }, 'EVENTS_STREAM'],
    [{ EVENTS_SUBJECT_PREFIX: 'a.*.b' }, 'EVENTS_SUBJECT_PREFIX'],
    [{ EVENTS_SOURCE: 'not a uri' }, 'EVENTS_SOURCE'],
    [{ EVENTS_RELAY_LEASE_MS: '1000', EVENTS_PUBLISH_TIMEOUT_MS: '2000' }, 'EVENTS_RELAY_LEASE_MS'],
  ])('refuses %o, naming %s', (env, name) => {
    expect(() => loadConfig({ ...base, ...env })).toThrow(name);
  });
});
