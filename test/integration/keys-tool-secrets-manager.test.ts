import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { hashKey, parseKeySet } from '../../src/auth/partner-keys.js';
import { runKeysTool } from '../../src/keys/tool.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { fakeAwsEnvironment, fakeSecretsManager } from '../support/fake-secrets-manager.js';
import { urls } from '../support/partner.js';
import { startTestService, type TestService } from '../support/service.js';

/**
 * `npm run keys -- … --secret-id`: the tool through the real AWS SDK against a local server
 * speaking the Secrets Manager JSON protocol (test/support/fake-secrets-manager.ts), with the
 * service reading the same secret. A change someone else makes between the tool's read and its
 * write is never lost.
 */
const secretName = 'partner-agent-status/partner-keys';
const db = testDatabase();
const fake = fakeSecretsManager(secretName);
let svc: TestService;
let networkId: string;
const seedKey = newApiKey();

beforeAll(async () => {
  networkId = await db.network();
  fake.setSecret(JSON.stringify({ 'partner-keys': { [`sha256:${hashKey(seedKey)}`]: { networkId, name: 'seed' } } }));
  for (const [name, value] of Object.entries(fakeAwsEnvironment(await fake.listen()))) vi.stubEnv(name, value);
  svc = await startTestService({
    partners: [],
    env: { PARTNER_KEYS_FILE: '', PARTNER_KEYS_SECRET_ID: secretName, PARTNER_KEYS_REFRESH_INTERVAL_MS: '1000' },
  });
});

afterAll(async () => {
  await svc?.close();
  await fake.close();
  await db.close();
  vi.unstubAllEnvs();
});

async function keys(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runKeysTool([...argv, '--secret-id', secretName], { stdout: (t) => out.push(t), stderr: (t) => err.push(t) });
  return { code, stdout: out.join(''), stderr: err.join('') };
}
const issue = (name: string, ...more: string[]) => keys('issue', '--network', networkId, '--name', name, ...more);
const names = () => [...parseKeySet(fake.current()!).values()].map((entry) => entry.partner.name).sort();
const status = async (apiKey: string) => {
  const agentId = await db.agent(networkId);
  const response = await svc.app.inject({
    method: 'GET',
    url: urls.agentStatus(agentId),
    headers: { 'x-api-key': apiKey },
  });
  return response.statusCode;
};

describe('the keys tool on a Secrets Manager secret', () => {
  it('issues a key through a staged version and a label move, and the service takes it up', async () => {
    const before = fake.calls.length;
    const { code, stdout, stderr } = await issue('partner-a');
    expect(code).toBe(0);
    const key = stdout.trim();
    // (the service's own refreshes read the secret meanwhile: only the writes are counted)
    const calls = fake.calls.slice(before);
    const writes = calls.map((c) => c.target?.replace('secretsmanager.', '')).filter((t) => t !== 'GetSecretValue');
    expect(writes).toEqual(['PutSecretValue', 'UpdateSecretVersionStage']);
    const put = calls.find((c) => c.target === 'secretsmanager.PutSecretValue')!;
    expect(put.body.VersionStages).toEqual(['KEYS-TOOL-PENDING']);
    expect(put.body.ClientRequestToken).toMatch(/^[0-9a-f-]{36}$/);
    expect(put.signed).toBe(true);
    expect(String(put.body.SecretString)).not.toContain(key);
    expect(stderr).toMatch(
      new RegExp(
        `^issued "partner-a" \\(fingerprint ${hashKey(key).slice(0, 12)}\\) .* stored hashed in secret ${secretName} \\(version ${put.body.ClientRequestToken}\\)`,
      ),
    );
    expect(names()).toEqual(['partner-a', 'seed']);
    await vi.waitFor(async () => expect(await status(key)).toBe(200), { timeout: 10_000, interval: 100 });
    expect(await status(seedKey)).toBe(200);
  });

  it('keeps a change another writer made between its read and its write, by redoing its edit on top', async () => {
    let raced = false;
    fake.beforeAnswering((target) => {
      if (target !== 'UpdateSecretVersionStage' || raced) return;
      raced = true; // someone else's write lands after the tool read the secret
      const document = JSON.parse(fake.current()!);
      document['partner-keys'][`sha256:${hashKey(newApiKey())}`] = { networkId, name: 'by-console' };
      fake.setSecret(JSON.stringify(document));
    });
    try {
      const before = fake.calls.length;
      const { code, stdout } = await issue('partner-b');
      expect(code).toBe(0);
      expect(raced).toBe(true);
      const puts = fake.calls.slice(before).filter((c) => c.target === 'secretsmanager.PutSecretValue');
      expect(puts).toHaveLength(2);
      expect(names()).toEqual(['by-console', 'partner-a', 'partner-b', 'seed']);
      await vi.waitFor(async () => expect(await status(stdout.trim())).toBe(200), { timeout: 10_000, interval: 100 });
    } finally {
      fake.beforeAnswering(undefined);
    }
  });

  it('lands every one of several runs at once', async () => {
    const results = await Promise.all(['c1', 'c2', 'c3'].map((name) => issue(name)));
    expect(results.map((r) => r.code)).toEqual([0, 0, 0]);
    expect(names()).toEqual(['by-console', 'c1', 'c2', 'c3', 'partner-a', 'partner-b', 'seed']);
  });

  it('lists without printing a key, and revokes a key the service then refuses', async () => {
    const { stdout: key } = await issue('to-revoke', '--raw');
    await vi.waitFor(async () => expect(await status(key.trim())).toBe(200), { timeout: 10_000, interval: 100 });
    const listed = await keys('list');
    expect(listed.code).toBe(0);
    expect(listed.stdout).toMatch(new RegExp(`${hashKey(key.trim()).slice(0, 12)}\\s+to-revoke\\s+${networkId}\\s+never\\s+raw`));
    expect(listed.stdout + listed.stderr).not.toContain(key.trim());
    const revoked = await keys('revoke', '--fingerprint', hashKey(key.trim()).slice(0, 12));
    expect(revoked.code).toBe(0);
    expect(revoked.stderr).toMatch(/^revoked "to-revoke" /);
    expect(names()).not.toContain('to-revoke');
    await vi.waitFor(async () => expect(await status(key.trim())).toBe(401), { timeout: 10_000, interval: 100 });
    expect(await status(seedKey)).toBe(200);
  });

  it('reports what it did when the SDK retried a step whose answer was lost: one version, the right line, both for issue and revoke', async () => {
    const toolWrites = (from: number) => fake.calls.slice(from).filter((c) => c.target !== 'secretsmanager.GetSecretValue');
    // The move took effect, its answer was lost; the SDK's retry is refused (AWSCURRENT moved already).
    fake.loseAnswers('UpdateSecretVersionStage');
    let from = fake.calls.length;
    const versions = fake.versionCount();
    const issued = await issue('lost-move', '--raw');
    expect(issued.code).toBe(0);
    expect(issued.stderr).toMatch(/^issued "lost-move" /);
    expect(toolWrites(from).map((c) => c.target)).toEqual([
      'secretsmanager.PutSecretValue',
      'secretsmanager.UpdateSecretVersionStage',
      'secretsmanager.UpdateSecretVersionStage',
    ]);
    expect(fake.versionCount()).toBe(versions + 1);
    const key = issued.stdout.trim();
    expect(JSON.parse(fake.current()!)['partner-keys'][key]).toEqual({ networkId, name: 'lost-move' });
    const put = toolWrites(from)[0]!;
    expect(issued.stderr).toContain(`(version ${put.body.ClientRequestToken})`);
    await vi.waitFor(async () => expect(await status(key)).toBe(200), { timeout: 10_000, interval: 100 });

    // The version was written, its answer was lost: the retried put (same token, same text) makes no second one.
    fake.loseAnswers('PutSecretValue');
    from = fake.calls.length;
    const second = await issue('lost-put');
    expect(second.code).toBe(0);
    expect(toolWrites(from).map((c) => c.target)).toEqual([
      'secretsmanager.PutSecretValue',
      'secretsmanager.PutSecretValue',
      'secretsmanager.UpdateSecretVersionStage',
    ]);
    expect(fake.versionCount()).toBe(versions + 2);

    // A revoke whose move answer was lost, and another writer right after the move: still "revoked".
    fake.loseAnswers('UpdateSecretVersionStage');
    let moves = 0;
    fake.beforeAnswering((target) => {
      if (target !== 'UpdateSecretVersionStage' || ++moves !== 2) return;
      const document = JSON.parse(fake.current()!);
      document['partner-keys'][`sha256:${hashKey(newApiKey())}`] = { networkId, name: 'by-console-after' };
      fake.setSecret(JSON.stringify(document));
    });
    try {
      from = fake.calls.length;
      const revoked = await keys('revoke', '--fingerprint', hashKey(key).slice(0, 12));
      expect(revoked.code).toBe(0);
      expect(revoked.stderr).toMatch(/^revoked "lost-move" /);
      expect(toolWrites(from).filter((c) => c.target === 'secretsmanager.PutSecretValue')).toHaveLength(1);
      expect(names()).not.toContain('lost-move');
      expect(names()).toContain('by-console-after');
    } finally {
      fake.beforeAnswering(undefined);
    }
    await vi.waitFor(async () => expect(await status(key)).toBe(401), { timeout: 10_000, interval: 100 });
  });

  it('fails with one line and leaves AWSCURRENT as it was when writing is denied', async () => {
    const before = fake.current();
    fake.setMode('deny-writes');
    try {
      const { code, stdout, stderr } = await issue('denied');
      expect(code).toBe(1);
      expect(stdout).toBe('');
      expect(stderr).toMatch(/^keys: AccessDeniedException: .*secretsmanager:PutSecretValue\n$/);
    } finally {
      fake.setMode('ok');
    }
    expect(fake.current()).toBe(before);
  });

  it('says so in one line when the secret does not exist', async () => {
    const out: string[] = [];
    const code = await runKeysTool(['list', '--secret-id', 'no-such-secret'], { stdout: (t) => out.push(t), stderr: (t) => out.push(t) });
    expect(code).toBe(1);
    expect(out.join('')).toMatch(/^keys: ResourceNotFoundException: .*\n$/);
  });
});
