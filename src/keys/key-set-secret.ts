import { randomUUID } from 'node:crypto';
import {
  GetSecretValueCommand,
  PutSecretValueCommand,
  SecretsManagerClient,
  UpdateSecretVersionStageCommand,
} from '@aws-sdk/client-secrets-manager';
import { KeysToolError } from './key-set-document.js';
import type { KeySetStorage } from './key-set-storage.js';

const attempts = 5;
/** The tool's own staging label for a version written but not yet made current. */
const pendingStage = 'KEYS-TOOL-PENDING';

/**
 * The key set as an AWS Secrets Manager secret. Secrets Manager has no conditional write, so a
 * change is made current by compare-and-swap on the AWSCURRENT label:
 * 1. GetSecretValue: the current text and its VersionId;
 * 2. PutSecretValue of the edited text as a new version (ClientRequestToken = its VersionId) that
 *    carries only the tool's own label, so nobody reads it yet;
 * 3. UpdateSecretVersionStage moves AWSCURRENT to it from the version read in 1, which Secrets
 *    Manager refuses when AWSCURRENT has moved meanwhile (someone else wrote): then the tool reads
 *    again and redoes the edit on top of the other change, a few times at most.
 * AWSPREVIOUS follows by itself. Region, credentials and endpoint come from the SDK's environment.
 *
 * The SDK retries a call whose answer was lost or failed (up to `maxAttempts`), so each step must
 * stay right when it ran more often than the tool knows:
 * - a retried PutSecretValue carries the same ClientRequestToken and text: Secrets Manager makes no
 *   second version;
 * - a retried UpdateSecretVersionStage after the first one moved the label is refused (AWSCURRENT
 *   is no longer on RemoveFromVersionId), so a failed move is never taken at its word: the tool
 *   reads where the labels are. AWSCURRENT on the new version (or AWSPREVIOUS, when someone else
 *   wrote right after) means the change is made; AWSCURRENT still on the version read means it is
 *   not (the error stands); anything else is a lost race, and the edit is redone on top.
 */
export function keySetSecret(secretId: string): KeySetStorage {
  // No logger: answers hold every key.
  const client = new SecretsManagerClient({
    maxAttempts: 3,
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 10_000, throwOnRequestTimeout: true },
  });
  const read = async () => {
    const result = await client.send(new GetSecretValueCommand({ SecretId: secretId }));
    if (result.SecretString === undefined && result.SecretBinary !== undefined) {
      throw new KeysToolError(`secret ${secretId} holds binary data, not the key set's JSON`);
    }
    return { text: result.SecretString, versionId: result.VersionId };
  };

  /** Where a move of AWSCURRENT from `from` to `version` that answered with an error left the labels. */
  const moveOutcome = async (version: string, from: string | undefined): Promise<'made' | 'not made' | 'raced'> => {
    const now = (await read()).versionId;
    if (now === version) return 'made';
    if (now === from) return 'not made';
    const ours = await client.send(new GetSecretValueCommand({ SecretId: secretId, VersionId: version }));
    return ours.VersionStages?.includes('AWSPREVIOUS') ? 'made' : 'raced';
  };

  return {
    where: `secret ${secretId}`,
    async read() {
      const { text } = await read();
      if (text === undefined || text === '') throw new KeysToolError(`secret ${secretId} holds no key set`);
      return text;
    },
    async update(edit) {
      for (let attempt = 1; attempt <= attempts; attempt++) {
        const current = await read();
        const next = edit(current.text);
        const version = randomUUID();
        await client.send(
          new PutSecretValueCommand({ SecretId: secretId, SecretString: next, ClientRequestToken: version, VersionStages: [pendingStage] }),
        );
        try {
          await client.send(
            new UpdateSecretVersionStageCommand({
              SecretId: secretId,
              VersionStage: 'AWSCURRENT',
              MoveToVersionId: version,
              RemoveFromVersionId: current.versionId,
            }),
          );
          return { version };
        } catch (error) {
          const outcome = await moveOutcome(version, current.versionId);
          if (outcome === 'made') return { version };
          if (outcome === 'not made') throw error;
        }
      }
      throw new KeysToolError(
        `secret ${secretId} kept changing while the tool wrote it (${attempts} attempts); AWSCURRENT was not changed, run it again`,
      );
    },
    close: () => client.destroy(),
  };
}
