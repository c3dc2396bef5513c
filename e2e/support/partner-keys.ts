import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { open, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '../../test/support/wait.js';
import type { PartnerKeysTarget } from './settings.js';

/** One entry of the partner-keys document (docs/interfaces.md §4). */
export interface PartnerKeyRecord {
  networkId: string;
  name: string;
}

type KeyMap = Record<string, PartnerKeyRecord>;

/** A fresh partner key, made at run time: keys never live in the repository. */
export function newPartnerKey(): string {
  return `pk_e2e_${randomBytes(24).toString('base64url')}`;
}

/**
 * Adds and removes partner keys where the service under test reads them. The service picks the
 * change up by itself (it watches the mounted file); callers wait for that by polling the API.
 */
export interface PartnerKeyWriter {
  readonly description: string;
  add(entries: KeyMap): Promise<void>;
  remove(keys: string[]): Promise<void>;
}

/**
 * What both places share: a read-change-write of the whole keys document. The service refuses an
 * empty key set, so removing the last key is refused here too (the local launcher's bootstrap key
 * is always there, so this only matters for a document someone else made).
 */
abstract class KeyDocumentWriter implements PartnerKeyWriter {
  abstract readonly description: string;
  protected abstract update(change: (keys: KeyMap) => void): Promise<void>;

  add(entries: KeyMap): Promise<void> {
    return this.update((keys) => Object.assign(keys, entries));
  }

  remove(keys: string[]): Promise<void> {
    return this.update((current) => {
      for (const key of keys) delete current[key];
      if (Object.keys(current).length === 0) throw new Error('refusing to remove the last partner key');
    });
  }
}

export function partnerKeyWriter(target: PartnerKeysTarget): PartnerKeyWriter {
  return target.kind === 'file' ? new FileKeyWriter(target.path) : new SecretKeyWriter(target);
}

function parseDocument(text: string): { 'partner-keys': KeyMap } {
  const document = JSON.parse(text) as { 'partner-keys'?: KeyMap };
  if (typeof document !== 'object' || document === null || typeof document['partner-keys'] !== 'object') {
    throw new Error('the partner-keys document has no "partner-keys" object');
  }
  return document as { 'partner-keys': KeyMap };
}

/**
 * The local run: the JSON file the launcher (e2e/local-stack.ts) made and the service reads.
 * Workers change it under a lock file (read, change, write), and every write is atomic (a temp
 * file in the same directory, then a rename), so the service never reads half a document.
 */
class FileKeyWriter extends KeyDocumentWriter {
  readonly description: string;

  constructor(private readonly path: string) {
    super();
    this.description = `file ${path}`;
  }

  protected async update(change: (keys: KeyMap) => void): Promise<void> {
    const lock = `${this.path}.lock`;
    await waitFor(
      async () => {
        try {
          const handle = await open(lock, 'wx');
          await handle.close();
          return true;
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
          // A worker killed while holding the lock leaves it behind; a write takes milliseconds.
          const age = await stat(lock).then(
            (s) => Date.now() - s.mtimeMs,
            () => 0,
          );
          if (age > 10_000) await unlink(lock).catch(() => undefined);
          return false;
        }
      },
      { timeoutMs: 15_000, intervalMs: 20, failure: `could not lock ${this.path} within 15 s` },
    );
    try {
      const document = parseDocument(await readFile(this.path, 'utf8'));
      change(document['partner-keys']);
      const temp = `${this.path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
      await writeFile(temp, JSON.stringify(document), { mode: 0o600 });
      await rename(temp, this.path);
    } finally {
      await unlink(lock).catch(() => undefined);
    }
  }
}

function run(command: string, args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(command, args, { maxBuffer: 16 * 1024 * 1024, timeout: 30_000 }, (error, stdout, stderr) => {
      if (error)
        reject(
          Object.assign(new Error(`${command} ${args[0] ?? ''} ${args[1] ?? ''} failed: ${stderr.trim() || error.message}`), { stderr }),
        );
      else resolve(stdout);
    });
    if (input !== undefined) child.stdin!.end(input);
  });
}

interface SecretObject {
  metadata: { name: string; resourceVersion?: string; managedFields?: unknown; [field: string]: unknown };
  data?: Record<string, string>;
  [field: string]: unknown;
}

/**
 * The kind cluster: the Secret the chart mounts (values-dev.yaml, partnerKeys.existingSecret),
 * changed with kubectl. A read-change-replace carries the Secret's resourceVersion, so two workers
 * changing it at once cannot drop each other's keys: the loser gets a conflict and tries again.
 * The kubelet copies the new content into the pods at its next sync of each pod (up to about a
 * minute); touching an annotation of the pods makes it sync them now, which usually brings that
 * down to seconds. It is only a nudge: the wait that follows (401 -> 200) is what counts.
 */
class SecretKeyWriter extends KeyDocumentWriter {
  readonly description: string;
  private readonly target: Extract<PartnerKeysTarget, { kind: 'kubernetes-secret' }>;

  constructor(target: Extract<PartnerKeysTarget, { kind: 'kubernetes-secret' }>) {
    super();
    this.target = target;
    this.description = `Secret ${target.namespace}/${target.secret} (key ${target.secretKey})`;
  }

  private kubectl(args: string[], input?: string): Promise<string> {
    const context = this.target.context ? ['--context', this.target.context] : [];
    return run('kubectl', [...args, ...context, '--namespace', this.target.namespace], input);
  }

  protected async update(change: (keys: KeyMap) => void): Promise<void> {
    for (let attempt = 1; ; attempt += 1) {
      const secret = JSON.parse(await this.kubectl(['get', 'secret', this.target.secret, '--output', 'json'])) as SecretObject;
      const encoded = secret.data?.[this.target.secretKey];
      if (!encoded) throw new Error(`${this.description} has no key ${this.target.secretKey}`);
      const document = parseDocument(Buffer.from(encoded, 'base64').toString('utf8'));
      change(document['partner-keys']);
      secret.data = { ...secret.data, [this.target.secretKey]: Buffer.from(JSON.stringify(document)).toString('base64') };
      delete secret.metadata.managedFields;
      try {
        await this.kubectl(['replace', '--filename', '-'], JSON.stringify(secret));
        break;
      } catch (error) {
        const conflict = /conflict|has been modified/i.test((error as { stderr?: string }).stderr ?? '');
        if (!conflict || attempt >= 10) throw error;
        await sleep(100 + Math.random() * 400);
      }
    }
    await this.kubectl([
      'annotate',
      'pods',
      '--selector',
      this.target.podSelector,
      '--overwrite',
      `e2e.partner-agent-status/keys-changed=${Date.now()}`,
    ]).catch(() => undefined);
  }
}
