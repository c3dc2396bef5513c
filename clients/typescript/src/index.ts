/**
 * A typed client of the Partner Agent Status API, for Node.js 20+ and any runtime with fetch and Web
 * Crypto (browsers included). A partner key belongs on a server: code shipped to a browser hands the
 * key to whoever runs it, so call the API from your back end and let browsers talk to that.
 */
export {
  type AgentStatus,
  type CreatedWebhookEndpoint,
  createPartnerClient,
  type EventPage,
  type EventPageOptions,
  type PartnerClient,
  type PartnerClientOptions,
  type RequestBody,
  type RequestOptions,
  type ResponseBody,
  type RetriedWebhookDelivery,
  type RotatedWebhookSecret,
  type StatusBatch,
  type StatusBatchAnswer,
  type StatusBatchOptions,
  type StatusBatchRequest,
  type StatusBatchResult,
  type StatusChange,
  type StatusChangeAnswer,
  type StatusChangeOptions,
  type StatusChangePage,
  type StatusChangeRequest,
  type WebhookDelivery,
  type WebhookEndpoint,
  type WebhookEndpointRequest,
} from './client.js';
export { PartnerApiError, PartnerClientError, PartnerEventError, PartnerNetworkError, type Problem } from './errors.js';
export type { EventFilter, ListenedEvent, ListenOptions } from './events.js';
export * from './generated/versions.js';
export { type SseMessage, SseParser } from './sse.js';
export type { DeprecationWarning, RetryOptions } from './transport.js';
export { type PartnerEvent, type VerifyWebhookOptions, verifyWebhook, WebhookVerificationError } from './webhooks.js';
