import { parseArgs } from 'node:util';
import { apiVersionNames, isApiVersion } from '../api-versions.js';
import { isIssuedKey, issueKey, keyShapedStrings } from '../auth/issued-key.js';
import { fingerprintOf, hashKey, InvalidKeySetError, parseExpiry } from '../auth/partner-keys.js';
import {
  checkNewEntry,
  describeEntries,
  type KeySelector,
  KeysToolError,
  readKeySetDocument,
  rfc3339Utc,
  withEntry,
  withoutEntry,
} from './key-set-document.js';
import { keySetFile } from './key-set-file.js';
import { keySetSecret } from './key-set-secret.js';
import type { KeySetStorage } from './key-set-storage.js';

const usage = `usage: npm run keys -- <command> (--file <path> | --secret-id <name or ARN>) [options]
  issue  --network <uuid> --name <label> [--expires-at <RFC 3339>] [--api-version <YYYY-MM-DD>] [--raw]
         adds a new key (stored as its SHA-256 unless --raw) and prints it once, on stdout;
         --api-version pins the key's requests that name no Partner-Api-Version to that version
  list   prints fingerprint, name, network, expiry, storage and API version of every key; never a key
  revoke --fingerprint <hex> | --name <label>
         removes the key whose SHA-256 starts with these hex digits (list shows the first 12);
         --name only while one key has that name (several keys may share one during a rotation)
  A --file is always written with mode 0600, keeping its owner and group.
  check  (no key source) reads text on stdin, e.g. a secret scanner's finding, and prints the
         fingerprint of each pas_ key in it and whether its checksum is right; exit 1 if none is`;

const commandOptions = {
  issue: ['network', 'name', 'expires-at', 'api-version', 'raw'],
  list: [],
  revoke: ['fingerprint', 'name'],
  check: [],
} as const;
type Command = keyof typeof commandOptions;

export interface ToolStreams {
  /** Data: the issued key, or the list. */
  stdout: (text: string) => void;
  /** One line saying what changed, or why nothing did. */
  stderr: (text: string) => void;
  /** The whole standard input (read by `check` only). */
  stdin?: () => Promise<string>;
}

class UsageError extends KeysToolError {}

/**
 * `npm run keys -- <command>`: returns the exit code (0 done, 1 refused or failed, 2 bad usage).
 * Every refusal is one line and changes nothing. Only `issue` ever prints a key, once.
 */
export async function runKeysTool(argv: string[], output: ToolStreams): Promise<number> {
  let storage: KeySetStorage | undefined;
  try {
    if (argv.includes('--help') || argv.includes('-h')) {
      output.stdout(`${usage}\n`);
      return 0;
    }
    const { command, values } = parseCommand(argv);
    if (command === 'check') return await check(output);
    storage = openStorage(values);
    if (command === 'list') await list(storage, output);
    else if (command === 'issue') await issue(storage, values, output);
    else await revoke(storage, values, output);
    return 0;
  } catch (error) {
    const hint = error instanceof UsageError ? ' (npm run keys -- --help)' : '';
    output.stderr(`keys: ${describeError(error)}${hint}\n`);
    return error instanceof UsageError ? 2 : 1;
  } finally {
    storage?.close();
  }
}

type Values = Partial<Record<'file' | 'secret-id' | 'network' | 'name' | 'expires-at' | 'api-version' | 'fingerprint', string>> & {
  raw?: boolean;
};

function parseCommand(argv: string[]): { command: Command; values: Values } {
  let parsed: ReturnType<typeof parseWithNode>;
  try {
    parsed = parseWithNode(argv);
  } catch (error) {
    const { code, message } = error as { code?: string; message: string };
    const option = /'(--[\w-]+)/.exec(message)?.[1];
    if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && option) throw new UsageError(`${option} needs a value`);
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option) throw new UsageError(`unknown option ${option}`);
    throw new UsageError(message.split('\n')[0] ?? message);
  }
  const [command, ...rest] = parsed.positionals;
  if (command === undefined) throw new UsageError('a command is required: issue, list, revoke or check');
  if (!(command in commandOptions)) throw new UsageError(`unknown command "${command}"; the commands are issue, list, revoke and check`);
  if (rest.length > 0) throw new UsageError(`unexpected argument "${rest[0]}"`);
  const values = parsed.values as Values;
  const empty = Object.entries(values).find(([, value]) => value === '');
  if (empty) throw new UsageError(`--${empty[0]} needs a value`);
  const allowed: readonly string[] = commandOptions[command as Command];
  const stray = Object.keys(values).find((option) => option !== 'file' && option !== 'secret-id' && !allowed.includes(option));
  if (stray) throw new UsageError(`--${stray} does not go with ${command}`);
  if (command === 'check' && (values.file ?? values['secret-id']) !== undefined) throw new UsageError('check reads stdin, not a key set');
  if (command !== 'check' && (values.file === undefined) === (values['secret-id'] === undefined)) {
    throw new UsageError(`exactly one of --file and --secret-id is required`);
  }
  return { command: command as Command, values };
}

function parseWithNode(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      file: { type: 'string' },
      'secret-id': { type: 'string' },
      network: { type: 'string' },
      name: { type: 'string' },
      'expires-at': { type: 'string' },
      'api-version': { type: 'string' },
      raw: { type: 'boolean' },
      fingerprint: { type: 'string' },
    },
  });
}

function openStorage(values: Values): KeySetStorage {
  return values.file !== undefined ? keySetFile(values.file) : keySetSecret(values['secret-id']!);
}

/** When the service sees a change, by where the key set lives. */
function whenInUse(storage: KeySetStorage): string {
  return storage.where.startsWith('file ')
    ? 'a service watching this file uses the change within 10 s'
    : 'pods use the change once the ExternalSecret syncs it (chart: every 1m), the kubelet updates the mount (about a minute) and 10 s more';
}

async function list(storage: KeySetStorage, output: ToolStreams) {
  const { keys } = readKeySetDocument(await storage.read(), storage.where);
  const rows = [['FINGERPRINT', 'NAME', 'NETWORK', 'EXPIRES', 'STORED', 'API VERSION'], ...describeEntries(keys)];
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
  output.stdout(
    rows
      .map((row) => `${row.map((cell, column) => cell.padEnd(widths[column]!)).join('  ')}`.trimEnd())
      .join('\n')
      .concat('\n'),
  );
  const hashed = [...keys.values()].filter((entry) => entry.stored === 'hashed').length;
  output.stderr(`${keys.size} keys in ${storage.where} (${hashed} hashed, ${keys.size - hashed} raw); nothing changed\n`);
}

async function issue(storage: KeySetStorage, values: Values, output: ToolStreams) {
  const { network: networkId, name, raw } = values;
  if (networkId === undefined || name === undefined) throw new UsageError(`issue needs --network and --name`);
  checkNewEntry({ networkId, name });
  let expiresAt: string | undefined;
  if (values['expires-at'] !== undefined) {
    const expiry = parseExpiry(values['expires-at']);
    if (expiry === undefined) {
      throw new KeysToolError(`--expires-at must be an RFC 3339 date-time with an offset, such as 2027-01-31T00:00:00Z`);
    }
    if (expiry <= Date.now()) throw new KeysToolError(`--expires-at ${values['expires-at']} is not in the future`);
    expiresAt = rfc3339Utc(expiry);
  }
  const apiVersion = values['api-version'];
  if (apiVersion !== undefined && !isApiVersion(apiVersion)) {
    throw new KeysToolError(`--api-version must be one of the API versions: ${apiVersionNames.join(', ')}`);
  }
  const key = issueKey();
  const digest = hashKey(key);
  const entryName = raw ? key : `sha256:${digest}`;
  let namesake = 0;
  const { version } = await storage.update((current) => {
    const document = readKeySetDocument(current, storage.where);
    namesake = [...document.keys.values()].filter((entry) => entry.partner.name === name).length;
    return withEntry(document, { entryName, networkId, name, ...(expiresAt ? { expiresAt } : {}), ...(apiVersion ? { apiVersion } : {}) });
  });
  // A rotation: the old key stays until revoked, by the fingerprint "list" shows.
  const rotation = namesake > 0 ? ` ${namesake + 1} keys are now named "${name}"; revoke the old one with --fingerprint.` : '';
  output.stdout(`${key}\n`);
  output.stderr(
    `issued "${name}" (fingerprint ${fingerprintOf(digest)}) for network ${networkId.toLowerCase()}, ` +
      `${expiresAt ? `expiring ${expiresAt}` : 'with no expiry'}, ${apiVersion ? `pinned to API version ${apiVersion}` : 'on the default API version'}, stored ${raw ? 'raw' : 'hashed'} in ${storage.where}` +
      `${version ? ` (version ${version})` : ''}; ${whenInUse(storage)}. The key above is shown this once.${rotation}\n`,
  );
}

async function revoke(storage: KeySetStorage, values: Values, output: ToolStreams) {
  const fingerprint = values.fingerprint?.toLowerCase();
  const { name } = values;
  if ((fingerprint === undefined) === (name === undefined)) throw new UsageError(`revoke needs --fingerprint or --name (one of them)`);
  if (fingerprint !== undefined && !/^[0-9a-f]{6,64}$/.test(fingerprint)) {
    throw new KeysToolError('--fingerprint must be 6 to 64 hex digits, as "list" shows them');
  }
  const selector: KeySelector = fingerprint !== undefined ? { fingerprint } : { name: name! };
  let removed: ReturnType<typeof withoutEntry> | undefined;
  const { version } = await storage.update((current) => {
    removed = withoutEntry(readKeySetDocument(current, storage.where), selector, storage.where);
    return removed.text;
  });
  const { partner } = removed!.removed;
  output.stderr(
    `revoked "${partner.name}" (fingerprint ${removed!.fingerprint}) of network ${partner.networkId} from ${storage.where}` +
      `${version ? ` (version ${version})` : ''}; ${whenInUse(storage)}, then the key gets 401.\n`,
  );
}

/**
 * Confirms findings offline: a scanner's rule can only match the shape, the checksum tells an
 * issued key from a lookalike. Prints fingerprints (what `revoke` takes), never a key.
 */
async function check(output: ToolStreams): Promise<number> {
  const candidates = keyShapedStrings((await output.stdin?.()) ?? '');
  const valid = candidates.filter(isIssuedKey);
  for (const candidate of candidates) {
    const verdict = isIssuedKey(candidate) ? 'checksum right: an issued key' : 'checksum wrong: not an issued key';
    output.stdout(`${fingerprintOf(hashKey(candidate))}  ${verdict}\n`);
  }
  output.stderr(`${candidates.length} pas_ strings read, ${valid.length} with a right checksum; nothing changed\n`);
  return valid.length > 0 ? 0 : 1;
}

function describeError(error: unknown): string {
  if (error instanceof KeysToolError || error instanceof InvalidKeySetError) return error.message;
  const { name, message, code } = error as { name?: string; message?: string; code?: string };
  // AWS SDK errors carry the service's exception name; Node's, an errno code. Neither holds a key.
  return `${code ?? name ?? 'Error'}: ${message ?? String(error)}`;
}
