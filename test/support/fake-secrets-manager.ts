import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';

/**
 * A local server speaking the AWS Secrets Manager JSON protocol (x-amz-json-1.1, `X-Amz-Target`),
 * for the real AWS SDK pointed at it with AWS_ENDPOINT_URL_SECRETS_MANAGER. It keeps versions and
 * staging labels of one secret the way Secrets Manager does, for the calls the project makes:
 * - GetSecretValue: the version labelled AWSCURRENT (or the VersionId / VersionStage asked for);
 * - PutSecretValue: a new version whose id is the ClientRequestToken (the same token with the same
 *   text again is a no-op, with other text an error); its VersionStages (default AWSCURRENT) move
 *   to it, and AWSCURRENT's previous holder becomes AWSPREVIOUS;
 * - UpdateSecretVersionStage: moves a label, refused whenever the label is attached and
 *   RemoveFromVersionId does not name its holder (the check the keys tool's compare-and-swap relies
 *   on), as the API reference words it: also when the holder is MoveToVersionId already, which is
 *   what a retried move meets.
 * It checks no signature, but records whether each call was signed. `loseAnswers` makes calls take
 * effect and then answer 500, as a lost answer does: the SDK retries them.
 */
export type FakeMode = 'ok' | 'fail' | 'hang' | 'deny-writes';
type Target = 'GetSecretValue' | 'PutSecretValue' | 'UpdateSecretVersionStage';

interface Version {
  text: string;
  stages: Set<string>;
}

export function fakeSecretsManager(secretName: string) {
  const versions = new Map<string, Version>();
  const arn = `arn:aws:secretsmanager:us-east-1:123456789012:secret:${secretName}-AbCdEf`;
  let mode: FakeMode = 'ok';
  /** Runs before a call is answered: how a test makes another writer act between two calls. */
  let before: ((target: Target) => void) | undefined;
  /** Calls of a target still to answer 500 after they took effect. */
  const lostAnswers = new Map<string, number>();
  const calls: Array<{ target: string | undefined; contentType: string | undefined; body: Record<string, unknown>; signed: boolean }> = [];

  const holderOf = (stage: string) => [...versions].find(([, version]) => version.stages.has(stage))?.[0];
  function attach(stage: string, versionId: string) {
    const previous = holderOf(stage);
    if (previous === versionId) return;
    if (previous) versions.get(previous)!.stages.delete(stage);
    versions.get(versionId)!.stages.add(stage);
    if (stage === 'AWSCURRENT' && previous) attach('AWSPREVIOUS', previous);
  }
  function put(text: string, versionId: string = randomUUID(), stages = ['AWSCURRENT']) {
    versions.set(versionId, { text, stages: new Set() });
    for (const stage of stages) attach(stage, versionId);
    return versionId;
  }

  type Answer = [number, Record<string, unknown>, string?];
  const error = (type: string, message: string): Answer => [400, { __type: type, message }, type];

  function answer(target: string | undefined, body: Record<string, unknown>): Answer {
    if (body.SecretId !== secretName && body.SecretId !== arn)
      return error('ResourceNotFoundException', "Secrets Manager can't find the specified secret.");
    if (target === 'secretsmanager.GetSecretValue') {
      const versionId = (body.VersionId as string | undefined) ?? holderOf((body.VersionStage as string | undefined) ?? 'AWSCURRENT');
      const version = versionId === undefined ? undefined : versions.get(versionId);
      if (!versionId || !version) return error('ResourceNotFoundException', "Secrets Manager can't find the specified secret value.");
      return [
        200,
        {
          ARN: arn,
          Name: secretName,
          SecretString: version.text,
          VersionId: versionId,
          VersionStages: [...version.stages],
          CreatedDate: Date.now() / 1000,
        },
      ];
    }
    if (target === 'secretsmanager.PutSecretValue') {
      if (mode === 'deny-writes') return error('AccessDeniedException', 'not authorized to perform: secretsmanager:PutSecretValue');
      const token = body.ClientRequestToken as string;
      const existing = versions.get(token);
      if (existing && existing.text !== body.SecretString)
        return error('ResourceExistsException', 'A resource with the ID you requested already exists.');
      if (!existing) put(body.SecretString as string, token, (body.VersionStages as string[] | undefined) ?? ['AWSCURRENT']);
      return [200, { ARN: arn, Name: secretName, VersionId: token, VersionStages: [...versions.get(token)!.stages] }];
    }
    if (target === 'secretsmanager.UpdateSecretVersionStage') {
      const stage = body.VersionStage as string;
      const moveTo = body.MoveToVersionId as string | undefined;
      const holder = holderOf(stage);
      if (moveTo === undefined || !versions.has(moveTo))
        return error('InvalidParameterException', 'MoveToVersionId is not a version of this secret.');
      if (holder !== undefined && body.RemoveFromVersionId !== holder) {
        return error('InvalidParameterException', `The staging label ${stage} is attached to another version than RemoveFromVersionId.`);
      }
      attach(stage, moveTo);
      return [200, { ARN: arn, Name: secretName }];
    }
    return error('UnknownOperationException', 'unexpected call');
  }

  const server = createServer(async (request: IncomingMessage, response: ServerResponse) => {
    let raw = '';
    for await (const chunk of request) raw += chunk;
    const target = request.headers['x-amz-target'] as string | undefined;
    const body = JSON.parse(raw || '{}') as Record<string, unknown>;
    calls.push({
      target,
      contentType: request.headers['content-type'],
      body,
      signed: String(request.headers.authorization ?? '').startsWith('AWS4-HMAC-SHA256 '),
    });
    before?.(target?.replace('secretsmanager.', '') as Target);
    if (mode === 'hang' && target === 'secretsmanager.GetSecretValue') return; // never answers; the client must give up by itself
    const failure: Answer = [500, { __type: 'InternalServiceError', message: 'simulated failure' }, 'InternalServiceError'];
    let [status, payload, errorType] = mode === 'fail' && target === 'secretsmanager.GetSecretValue' ? failure : answer(target, body);
    const lose = lostAnswers.get(target ?? '') ?? 0;
    if (lose > 0) {
      lostAnswers.set(target!, lose - 1);
      [status, payload, errorType] = failure; // done, but the caller hears a failure
    }
    response.writeHead(status, {
      'content-type': 'application/x-amz-json-1.1',
      'x-amzn-requestid': randomUUID(),
      ...(errorType ? { 'x-amzn-errortype': errorType } : {}),
    });
    response.end(JSON.stringify(payload));
  });

  return {
    calls,
    /** Writes a new current version, as the console or another tool would. */
    setSecret: (text: string) => put(text),
    current: () => versions.get(holderOf('AWSCURRENT') ?? '')?.text,
    versionCount: () => versions.size,
    setMode(next: FakeMode) {
      mode = next;
    },
    beforeAnswering(hook: ((target: Target) => void) | undefined) {
      before = hook;
    },
    /** The next `count` calls of `target` take effect and then answer 500. */
    loseAnswers(target: Target, count = 1) {
      lostAnswers.set(`secretsmanager.${target}`, count);
    },
    async listen(): Promise<string> {
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    },
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

/** The SDK's own environment for a local endpoint: region, dummy credentials, no instance metadata. */
export function fakeAwsEnvironment(endpoint: string): Record<string, string> {
  return {
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE',
    AWS_SECRET_ACCESS_KEY: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
    AWS_ENDPOINT_URL_SECRETS_MANAGER: endpoint,
    AWS_EC2_METADATA_DISABLED: 'true',
  };
}
