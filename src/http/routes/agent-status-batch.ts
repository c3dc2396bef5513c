// POST /partner/agents/status/batch and GET /partner/agents/status/batch/{batchId} (docs/interfaces.md §16).
import { createHash, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AgentNotInNetwork, DisableSuperseded } from '../../agents/set-agent-status.js';
import type { BulkItemResult, BulkStatusUseCase } from '../../agents/set-agents-status.js';
import { type ApiVersion, apiVersionHeader } from '../../api-versions.js';
import { DependencyError } from '../../observability/dependency-calls.js';
import type { Metrics } from '../../observability/metrics.js';
import { idempotencyKeyDigest } from '../../stores/idempotency-keys.js';
import type { BatchChange, BatchRow, ChangeStanding, ItemAnswer, StatusBatches } from '../../stores/status-batches.js';
import { type Answer, answerOf } from '../answers.js';
import { versionOf } from '../api-version-hooks.js';
import type { BatchAllowance } from '../batch-allowance.js';
import { readIdempotencyKey, readPrefer } from '../conveniences.js';
import { partnerRoutes, statusBatchRouteLabel, statusBatchUrl } from '../paths.js';
import { batchTexts, convenienceTexts, type Problem, problem, sendProblem } from '../problems.js';
import { readBatchDocumentation, setBatchDocumentation } from './agent-status-batch.schema.js';
import { readBatchChanges } from './batch-body.js';

export interface StatusBatchRouteDeps {
  bulk: BulkStatusUseCase;
  batches: StatusBatches;
  metrics: Metrics;
  requestDeadlineMs: number;
  /** The batch's spend of the rate limit (each change one request); undefined when the limit is off. */
  allowance: BatchAllowance | undefined;
  isApiKey: (value: string) => boolean;
}

/** Answers kept at most this often while a batch goes on (each keep is one statement). */
const keepEveryMs = 250;
/** Statuses a kept answer is final with; a 202 or a 500 is read again as its change stands. */
const finalStatuses = new Set([200, 404, 409]);

/** One change's answer in the batch's results: the single call's status and body (src/http/answers.ts). */
function itemAnswer(result: BulkItemResult, version: ApiVersion, requestId: string): ItemAnswer & { outcome: string; log?: Answer['log'] } {
  const answer = answerOf(result, version, requestId);
  return { status: answer.status, body: answer.body, outcome: answer.outcome, log: answer.log };
}

/** How a change without a final kept answer stands, as the single call's result would say it. */
function standingResult(networkId: string, change: BatchChange, standing: ChangeStanding | undefined): BulkItemResult {
  if (!standing?.inNetwork) return { error: new AgentNotInNetwork() };
  // Not made (the batch's replica stopped before it): as a single call whose database did not answer.
  if (!standing.made) return { error: new DependencyError('postgres', 'error', 'change not made') };
  const { agentId } = change;
  if (change.enabled) return { value: { agentId, networkId, enabled: true, pausedCampaignCount: 0 } };
  if (standing.enabledSince) return { error: new DisableSuperseded(0) };
  if (standing.disableInProgress) {
    const { enabled, activeUnpausedCampaignCount } = standing;
    return { value: { accepted: { agentId, networkId, enabled, activeUnpausedCampaignCount, disableInProgress: true } } };
  }
  // Finished after its replica stopped: what it paused is not known here any more.
  return { value: { agentId, networkId, enabled: false, pausedCampaignCount: 0 } };
}

/** A batch's answers, kept in its row a few at a time (at most every `keepEveryMs`), in order. */
class AnswerKeeper {
  private unkept: Record<string, ItemAnswer> = {};
  private keeping: Promise<void> = Promise.resolve();
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly batches: StatusBatches,
    private readonly batchId: string,
    private readonly failed: (error: unknown) => void,
  ) {}

  add(index: number, answer: ItemAnswer): void {
    this.unkept[String(index)] = answer;
    this.timer ??= setTimeout(() => void this.flush(), keepEveryMs);
  }

  /** Keeps what is not kept yet; resolves once everything added so far is kept (or failed). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const answers = this.unkept;
    this.unkept = {};
    this.keeping = this.keeping.then(() => this.batches.keep(this.batchId, answers)).catch(this.failed);
    return this.keeping;
  }
}

export const statusBatchRoute: FastifyPluginAsyncTypebox<StatusBatchRouteDeps> = async (app, deps) => {
  const { metrics, batches } = deps;
  const answered = (answer: string) => metrics.convenienceAnswers.inc({ route: statusBatchRouteLabel, answer });
  for (const answer of ['replayed', 'key_in_use', 'key_reused', 'accepted']) {
    metrics.convenienceAnswers.inc({ route: statusBatchRouteLabel, answer }, 0);
  }

  /** The batch's results as they stand: final kept answers, and the rest read from the stores. */
  async function resultsOf(networkId: string, batch: BatchRow) {
    const open = batch.changes.filter((_change, index) => !finalStatuses.has(batch.results[String(index)]?.status ?? 0));
    const standings = new Map(
      (
        await batches.standings(
          networkId,
          batch.requestId,
          open.map((change) => change.agentId),
        )
      ).map((s) => [s.agentId, s]),
    );
    return batch.changes.map((change, index) => {
      const kept = batch.results[String(index)];
      if (kept && finalStatuses.has(kept.status)) return { agentId: change.agentId, status: kept.status, body: kept.body };
      const { status, body } = itemAnswer(
        standingResult(networkId, change, standings.get(change.agentId)),
        batch.apiVersion as ApiVersion,
        batch.requestId,
      );
      return { agentId: change.agentId, status, body };
    });
  }

  /** A repeat of the batch's Idempotency-Key: the batch's results as they stand, or 409/422. */
  async function repeat(request: FastifyRequest, reply: FastifyReply, existing: BatchRow, bodyDigest: string) {
    const { networkId } = request.partner!;
    if (existing.bodyDigest !== bodyDigest) {
      answered('key_reused');
      request.audit.outcome = 'key_reused';
      return sendProblem(reply, problem('idempotencyKeyReused', batchTexts.keyReused, request.id));
    }
    const unanswered = existing.changes.some((_change, index) => existing.results[String(index)] === undefined);
    // Still being made by its first request (on this replica or another): come back for its answer.
    if (unanswered && existing.ageSeconds * 1000 < deps.requestDeadlineMs + 5_000) {
      answered('key_in_use');
      request.audit.outcome = 'key_in_use';
      reply.header('retry-after', '1');
      return sendProblem(reply, problem('idempotencyKeyInUse', batchTexts.keyInUse, request.id));
    }
    answered('replayed');
    request.audit.outcome = 'replayed';
    const results = await resultsOf(networkId, existing);
    return reply
      .code(200)
      .headers({ [apiVersionHeader]: existing.apiVersion, 'idempotent-replayed': 'true', location: statusBatchUrl(existing.batchId) })
      .send({ batchId: existing.batchId, results });
  }

  app.post(
    partnerRoutes.agentStatusBatch,
    {
      bodyLimit: 256 * 1024,
      // Validated by readBatchChanges, which names the first bad change's index (the schema documents it).
      validatorCompiler: () => (value: unknown) => ({ value }),
      ...setBatchDocumentation(),
    },
    async (request, reply) => {
      const partner = request.partner!;
      const arrivedAt = performance.now() - reply.elapsedTime;
      const read = readBatchChanges(request.body);
      if ('problem' in read) {
        const body: Problem = { ...problem('validation', batchTexts.invalid(read.problem.index), request.id), errors: read.problem.errors };
        return sendProblem(reply, body);
      }
      const changes = read.changes;
      const key = readIdempotencyKey(request.raw.rawHeaders);
      if (key === 'malformed' || (key !== undefined && deps.isApiKey(key))) {
        return sendProblem(reply, problem('validation', convenienceTexts.malformedKey, request.id));
      }
      const limited = deps.allowance ? await deps.allowance(partner.networkId, changes.length) : { allowed: true as const };
      if (!limited.allowed) {
        metrics.requestsLimited.inc({ partner: partner.name, limit: 'rate' });
        request.audit.outcome = 'limited';
        reply.header('retry-after', String(limited.retryAfterSeconds));
        return sendProblem(reply, problem('rateLimited', batchTexts.rateLimited(changes.length), request.id));
      }
      const version = versionOf(request);
      const bodyDigest = `sha256:${createHash('sha256').update(JSON.stringify(changes)).digest('hex')}`;
      const batchId = randomUUID();
      const prepared = deps.bulk.prepare({
        networkId: partner.networkId,
        partnerName: partner.name,
        requestId: request.id,
        deadline: arrivedAt + deps.requestDeadlineMs,
        changes,
      });
      if ('error' in prepared) {
        const answer = answerOf(prepared, version, request.id);
        if (answer.counts.limit) metrics.requestsLimited.inc({ partner: partner.name, limit: answer.counts.limit });
        request.audit.outcome = answer.outcome;
        reply.headers(answer.headers);
        return sendProblem(reply, answer.body as Problem);
      }
      let created: Awaited<ReturnType<StatusBatches['create']>>;
      try {
        created = await batches.create({
          batchId,
          networkId: partner.networkId,
          requestId: request.id,
          apiVersion: version,
          changes,
          keyDigest: key === undefined ? null : idempotencyKeyDigest(partner.networkId, key),
          bodyDigest,
        });
      } catch (error) {
        prepared.cancel();
        throw error;
      }
      if (!created.created) {
        prepared.cancel();
        return repeat(request, reply, created.existing, bodyDigest);
      }
      metrics.batchSize.observe({ partner: partner.name }, changes.length);

      // Answers are kept as they come, a few at a time, so the batch's resource reads them.
      const keeper = new AnswerKeeper(batches, batchId, (error) =>
        request.log.warn({ reason: (error as Error).message }, 'bulk change answers not kept'),
      );
      const recordedAll = Promise.withResolvers<void>();
      const results = new Array<ItemAnswer & { agentId: string }>(changes.length);
      const done = prepared.start({
        allRecorded: recordedAll.resolve,
        answered: (index, result) => {
          const { status, body, outcome, log } = itemAnswer(result, version, request.id);
          const change = changes[index]!;
          // The single call's one log line, for this change (its agent named).
          if (log) request.log.error({ ...log.fields, agentId: change.agentId, batchIndex: index }, log.message);
          results[index] = { agentId: change.agentId, status, body };
          keeper.add(index, { status, body });
          metrics.agentStatusChanges.inc({ partner: partner.name, enabled: String(change.enabled), outcome });
          metrics.batchItems.inc({ partner: partner.name, enabled: String(change.enabled), status: String(status) });
        },
      });
      const finished = done.then(() => keeper.flush());
      if (readPrefer(request.headers.prefer).respondAsync) {
        await Promise.race([recordedAll.promise, finished]);
        finished.catch(() => undefined);
        answered('accepted');
        request.audit.outcome = 'accepted';
        return reply
          .code(202)
          .headers({ location: statusBatchUrl(batchId), 'preference-applied': 'respond-async' })
          .send({ batchId, changeCount: changes.length });
      }
      await finished;
      request.audit.outcome = 'updated';
      return reply.code(200).header('location', statusBatchUrl(batchId)).send({ batchId, results });
    },
  );

  app.get(partnerRoutes.agentStatusBatchRead, { ...readBatchDocumentation() }, async (request, reply) => {
    const { networkId } = request.partner!;
    const { batchId } = request.params;
    const batch = await batches.read(networkId, batchId);
    if (!batch) return sendProblem(reply, problem('notFound', batchTexts.notFound, request.id));
    request.audit.outcome = 'read';
    const results = await resultsOf(networkId, batch);
    return reply.send({ batchId, results });
  });
};
