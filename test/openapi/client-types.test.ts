import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  defaultDocs,
  documentedVersions,
  generatedDir,
  generatedFiles,
  writeGeneratedFiles,
} from '../../clients/typescript/scripts/generate-types.js';

// The typed client's types (clients/typescript/src/generated/) are generated from the OpenAPI
// documents, which test/openapi/document.test.ts holds to the routes: a route whose schema changed
// fails that test until `npm run openapi`, and then this one until
// `npm run generate -w clients/typescript`.
const scratch = mkdtempSync(join(tmpdir(), 'pas-client-types-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The files of a directory, by name, with their contents. */
function filesOf(dir: string): Map<string, string> {
  return new Map(readdirSync(dir).map((name) => [name, readFileSync(join(dir, name), 'utf8')]));
}

describe('the client types match the OpenAPI documents', () => {
  it('regenerated into a temporary directory, they are byte for byte the committed ones (run `npm run generate -w clients/typescript`)', async () => {
    const out = join(scratch, 'generated');
    await writeGeneratedFiles(out);
    const fresh = filesOf(out);
    const committed = filesOf(generatedDir);
    expect([...committed.keys()].sort()).toEqual([...fresh.keys()].sort());
    for (const [name, contents] of fresh) expect(committed.get(name), `src/generated/${name} is stale`).toBe(contents);
    // One module for every version that has a document.
    for (const version of documentedVersions()) expect(fresh.has(`${version}.ts`), version).toBe(true);
  });

  it('a route schema changed in a document without regenerating is caught', async () => {
    const docs = join(scratch, 'docs');
    mkdirSync(docs);
    for (const name of readdirSync(defaultDocs).filter((n) => /^openapi-.+\.json$|^event\.schema\.json$/.test(n))) {
      copyFileSync(join(defaultDocs, name), join(docs, name));
    }
    const newest = documentedVersions(docs).at(-1)!;
    const path = join(docs, `openapi-${newest}.json`);
    const document = JSON.parse(readFileSync(path, 'utf8'));
    const answer = document.paths['/partner/agents/{agentId}/status'].get.responses['200'].content['application/json'].schema;
    answer.properties.lastChangedAt = { type: 'string', format: 'date-time' };
    writeFileSync(path, JSON.stringify(document));

    const changed = await generatedFiles(docs);
    const committed = filesOf(generatedDir);
    expect(changed.get(`${newest}.ts`)).toContain('lastChangedAt');
    expect(changed.get(`${newest}.ts`)).not.toBe(committed.get(`${newest}.ts`));
    // The other versions' documents were not touched: their types stay as committed.
    for (const version of documentedVersions(docs).slice(0, -1)) expect(changed.get(`${version}.ts`)).toBe(committed.get(`${version}.ts`));
  });
});
