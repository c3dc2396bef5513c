import { randomUUID } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import { open, readFile, realpath, rename, stat, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { KeysToolError } from './key-set-document.js';
import type { KeySetStorage } from './key-set-storage.js';

const lockWaitMs = 5_000;
const attempts = 5;

/**
 * The key set as a file, changed the way kubelet changes a mounted Secret: the new content is
 * written to a temporary file in the same directory, flushed, and renamed over the old one, so a
 * reader (the service's watch) sees the old file or the new one, never a part. A lock file keeps
 * two runs of the tool from interleaving; a change made by anything else between our read and our
 * rename is noticed, and the edit is made again on top of it.
 *
 * The new file always has mode 0600, whatever the old one had (a raw key must not land in a file
 * others can read), and keeps the old file's owner and group when the tool may set them (as root,
 * or as the owner); when it may not, nothing is changed and the tool says so.
 */
export function keySetFile(path: string): KeySetStorage {
  const where = `file ${path}`;
  // A symlink stays a symlink: the file it points to is the one replaced.
  const target = async () =>
    realpath(path).catch((error: NodeJS.ErrnoException) => (error.code === 'ENOENT' ? path : Promise.reject(error)));
  const readText = async (file: string) =>
    readFile(file, 'utf8').catch((error: NodeJS.ErrnoException) => (error.code === 'ENOENT' ? undefined : Promise.reject(error)));

  return {
    where,
    async read() {
      const text = await readText(await target());
      if (text === undefined) throw new KeysToolError(`no key set at ${path}`);
      return text;
    },
    async update(edit) {
      const file = await target();
      const release = await lock(`${file}.lock`);
      try {
        for (let attempt = 1; attempt <= attempts; attempt++) {
          const before = await readText(file);
          const next = edit(before);
          const temporary = join(dirname(file), `.${basename(file)}.${randomUUID()}.tmp`);
          await writeDurably(temporary, next, await ownerOf(file));
          if ((await readText(file)) !== before) {
            await unlink(temporary);
            continue; // changed by someone else meanwhile: edit again on top of their version
          }
          await rename(temporary, file);
          await syncDirectory(dirname(file));
          return {};
        }
        throw new KeysToolError(`${path} kept changing while the tool wrote it (${attempts} attempts); nothing was changed, run it again`);
      } finally {
        await release();
      }
    },
    close: () => undefined,
  };
}

/** The owner and group of the file replaced; undefined for a new file (it gets the tool's). */
async function ownerOf(file: string): Promise<{ uid: number; gid: number } | undefined> {
  return stat(file).then(
    ({ uid, gid }) => ({ uid, gid }),
    (error: NodeJS.ErrnoException) => (error.code === 'ENOENT' ? undefined : Promise.reject(error)),
  );
}

async function keepOwner(handle: FileHandle, owner: { uid: number; gid: number }) {
  const stats = await handle.stat();
  if (stats.uid === owner.uid && stats.gid === owner.gid) return;
  try {
    await handle.chown(owner.uid, owner.gid);
  } catch (error) {
    const { code } = error as NodeJS.ErrnoException;
    if (code !== 'EPERM') throw error;
    throw new KeysToolError(
      `cannot give the new key set file the owner of the old one (uid ${owner.uid}, gid ${owner.gid}); run the tool as that user or as root, nothing was changed`,
    );
  }
}

async function writeDurably(file: string, text: string, owner: { uid: number; gid: number } | undefined) {
  const handle = await open(file, 'wx', 0o600);
  try {
    // Exactly 0600 whatever the umask; the owner before anything is written.
    await handle.chmod(0o600);
    if (owner) await keepOwner(handle, owner);
    await handle.writeFile(text);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await unlink(file);
    throw error;
  }
  await handle.close();
}

/** The rename itself survives a crash only once the directory is flushed. */
async function syncDirectory(directory: string) {
  const handle = await open(directory, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

async function lock(lockFile: string): Promise<() => Promise<void>> {
  const deadline = Date.now() + lockWaitMs;
  for (;;) {
    try {
      await (await open(lockFile, 'wx', 0o600)).close();
      return () => unlink(lockFile);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      if (Date.now() > deadline) {
        throw new KeysToolError(`another keys command is changing this file (${lockFile} exists); if none runs, delete that lock file`);
      }
      await sleep(50 + Math.random() * 50);
    }
  }
}
