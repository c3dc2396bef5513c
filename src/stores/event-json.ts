import { sql } from 'slonik';
import { eventTypePrefix } from './event-outbox.js';

// The CloudEvent of a row e of agent_events, as the relay makes it (until its module on h-events is merged, which replaces this one).
export const eventJson = (source: string) => sql.fragment`json_build_object(
    'specversion', '1.0',
    'id', e.event_id,
    'source', ${source}::text,
    'type', ${eventTypePrefix}::text || e.type,
    'subject', e.agent_id,
    'time', to_char(e.event_time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'datacontenttype', 'application/json',
    'data', CASE WHEN e.paused_count IS NULL
      THEN json_build_object('agentId', e.agent_id, 'networkId', e.network_id, 'enabled', e.enabled, 'changeId', e.agent_seq)
      ELSE json_build_object('agentId', e.agent_id, 'networkId', e.network_id, 'enabled', e.enabled, 'changeId', e.agent_seq,
                             'pausedCampaignCount', e.paused_count) END)::text`;
