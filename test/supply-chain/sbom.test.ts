// `npm run sbom` (run by .ci/run): a CycloneDX JSON SBOM of the image's dependencies, i.e. the
// production dependencies that `npm ci --omit=dev --omit=optional` installs in the Dockerfile, made by
// @cyclonedx/cyclonedx-npm from package-lock.json alone (the installed tree also holds what the
// `node` package's own install script added outside the lockfile). A few seconds.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const packageJson = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string; dev?: boolean }>;
};

interface Component {
  type: string;
  name: string;
  group?: string;
  version: string;
  purl?: string;
  components?: Component[];
}
interface Bom {
  bomFormat: string;
  specVersion: string;
  metadata: { component: { name: string; version: string } };
  components: Component[];
}

function flatten(components: Component[] = []): Component[] {
  return components.flatMap((component) => [component, ...flatten(component.components)]);
}
const fullName = (component: Component): string => (component.group ? `${component.group}/${component.name}` : component.name);

let directory: string;
let bom: Bom;
let names: Set<string>;

beforeAll(() => {
  directory = mkdtempSync(join(tmpdir(), 'pas-sbom-'));
  const output = join(directory, 'sbom.cdx.json');
  const result = spawnSync('npm', ['run', '--silent', 'sbom', '--', '--output-file', output], {
    cwd: root,
    encoding: 'utf8',
    timeout: 60_000,
  });
  if (result.status !== 0) throw new Error(`npm run sbom failed (${result.status}): ${result.stderr}`);
  bom = JSON.parse(readFileSync(output, 'utf8')) as Bom;
  names = new Set(flatten(bom.components).map(fullName));
});

afterAll(() => {
  if (directory) rmSync(directory, { recursive: true, force: true });
});

describe('npm run sbom', () => {
  it('writes a CycloneDX JSON document describing this application', () => {
    expect(bom.bomFormat).toBe('CycloneDX');
    expect(bom.specVersion).toMatch(/^1\.\d+$/);
    expect(bom.metadata.component).toMatchObject({ name: packageJson.name, version: packageJson.version });
  });

  it('lists every production dependency at the version the lockfile installs, with its package URL', () => {
    const byName = new Map(flatten(bom.components).map((component) => [fullName(component), component]));
    for (const name of Object.keys(packageJson.dependencies)) {
      const component = byName.get(name);
      expect(component, name).toBeDefined();
      expect(component?.version, name).toBe(lock.packages[`node_modules/${name}`]?.version);
      expect(component?.purl, name).toMatch(/^pkg:npm\//);
    }
  });

  it('leaves out what the image does not hold: every package the lockfile marks dev-only', () => {
    const devOnly = Object.entries(lock.packages)
      .filter(([path, entry]) => path.startsWith('node_modules/') && entry.dev)
      .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length));
    expect(devOnly).toContain('vitest');
    for (const name of new Set(devOnly)) {
      // A name can be dev-only at one path and a production dependency at another.
      const alsoProduction = Object.entries(lock.packages).some(([path, entry]) => !entry.dev && path.endsWith(`node_modules/${name}`));
      if (!alsoProduction) expect(names.has(name), name).toBe(false);
    }
  });

  it('is what CI runs, for production dependencies only', () => {
    expect(packageJson.scripts.sbom).toMatch(
      /^cyclonedx-npm --omit dev --omit optional --package-lock-only --output-format JSON --output-reproducible /,
    );
    expect(packageJson.devDependencies['@cyclonedx/cyclonedx-npm']).toMatch(/^\d+\.\d+\.\d+$/);
    expect(readFileSync(join(root, '.ci', 'run'), 'utf8')).toMatch(/^npm run --silent sbom$/m);
  });
});
