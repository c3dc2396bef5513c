// The image's supply chain, read from the Dockerfile as text (there is no Docker engine in CI):
// every base pinned by digest and kept current by Renovate, the build on the base image's own
// Node, and no install script run by the image build (issue 18, item 7).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const root = new URL('../../', import.meta.url);
const dockerfile = readFileSync(new URL('Dockerfile', root), 'utf8');
const renovate = JSON.parse(readFileSync(new URL('renovate.json', root), 'utf8'));
const packageJson = JSON.parse(readFileSync(new URL('package.json', root), 'utf8'));
const lock = JSON.parse(readFileSync(new URL('package-lock.json', root), 'utf8')) as {
  packages: Record<string, { hasInstallScript?: boolean }>;
};

/** Instructions with their continuation lines joined, comments left out. */
const instructions: string[] = dockerfile
  .replace(/\\\n/g, ' ')
  .split('\n')
  .map((line) => line.trim())
  .filter((line) => line !== '' && !line.startsWith('#'));

/** ARG defaults declared before the first FROM: the values FROM may use. */
const globalArgs = new Map<string, string>();
for (const instruction of instructions) {
  if (instruction.startsWith('FROM ')) break;
  const match = /^ARG (\w+)=(\S+)$/.exec(instruction);
  if (match) globalArgs.set(match[1]!, match[2]!);
}

interface Stage {
  image: string;
  name?: string;
}
const stages: Stage[] = instructions
  .filter((instruction) => instruction.startsWith('FROM '))
  .map((instruction) => {
    const [, reference, name] = /^FROM (?:--platform=\S+ )?(\S+)(?: AS (\S+))?$/i.exec(instruction) ?? [];
    const image = (reference ?? '').replace(/\$\{(\w+)\}|\$(\w+)/g, (_all, braced, bare) => globalArgs.get(braced ?? bare) ?? '<unset>');
    return { image, name };
  });

const runs = instructions.filter((instruction) => instruction.startsWith('RUN '));
const npmCommands = runs.flatMap((run) =>
  [...run.matchAll(/(?<![\w./-])npm\s+[^&|;]+/g)].map((match) => match[0].trim().replace(/\s+/g, ' ')),
);

const pinned = /^(?<repository>[a-z0-9./_-]+)(?::(?<tag>[\w.-]+))?@sha256:[0-9a-f]{64}$/;

describe('Dockerfile: base images', () => {
  it('has the three stages, each from a base image or an earlier stage', () => {
    expect(stages.map((stage) => stage.name)).toEqual(['build', 'prod-deps', 'runtime']);
  });

  it('pins every base image by digest, with the tag kept for people and Renovate', () => {
    const earlier = new Set<string>();
    for (const stage of stages) {
      if (!earlier.has(stage.image)) expect(stage.image, `FROM ${stage.image}`).toMatch(pinned);
      if (stage.name) earlier.add(stage.name);
    }
    expect([...globalArgs.keys()].sort()).toEqual(['BUILD_IMAGE', 'RUNTIME_IMAGE']);
    for (const image of globalArgs.values()) expect(pinned.exec(image)?.groups?.tag, image).toBeTruthy();
  });

  it('has Renovate pin and update digests in the Dockerfile and in the chart values (the test image)', () => {
    expect(renovate.dockerfile).toEqual({ pinDigests: true });
    expect(renovate['helm-values']).toEqual({ pinDigests: true });
  });

  it('builds with the Node version developers and CI run: the node devDependency', () => {
    const build = pinned.exec(globalArgs.get('BUILD_IMAGE') ?? '')?.groups;
    expect(build?.repository).toBe('node');
    expect(build?.tag).toBe(`${packageJson.devDependencies.node}-bookworm-slim`);
    // Renovate moves the two together.
    expect(renovate.packageRules).toContainEqual(expect.objectContaining({ matchPackageNames: ['node'], groupName: 'node' }));
  });

  it("runs on the distroless image of the engines' Node major", () => {
    const major = /^>=(\d+) <(\d+)$/.exec(packageJson.engines.node)?.[1];
    expect(pinned.exec(globalArgs.get('RUNTIME_IMAGE') ?? '')?.groups?.repository).toBe(`gcr.io/distroless/nodejs${major}-debian12`);
  });
});

describe('Dockerfile: no install script runs in the image build', () => {
  it('installs only from the lockfile, always with --ignore-scripts (so allowScripts, read by npm 11.16+ only, does not matter)', () => {
    const installs = npmCommands.filter((command) => !command.startsWith('npm run '));
    expect(installs).toEqual(['npm ci --ignore-scripts', 'npm ci --omit=dev --omit=optional --ignore-scripts']);
  });

  it('runs exactly one npm script, by name: build', () => {
    expect(npmCommands.filter((command) => command.startsWith('npm run '))).toEqual(['npm run build']);
  });

  it('never reaches for another installer or a script runner that could fetch packages', () => {
    for (const run of runs) expect(run).not.toMatch(/\b(npx|npm (install|i|rebuild|exec|x)|yarn|pnpm|corepack|curl|wget)\b/);
    expect(dockerfile).not.toMatch(/ignore-scripts=false|IGNORE_SCRIPTS/i);
  });

  it('knows every package of the lockfile that has an install script, and why the image build needs none of them', () => {
    // A new entry fails this test: decide whether the image needs its script, and if it does, run
    // that one by name in the Dockerfile (npm rebuild <name>) and say so here.
    const notNeeded: Record<string, string> = {
      esbuild: 'finds its platform binary, an optional dependency in the lockfile, without its postinstall',
      node: "developers' Node 24; removed in the image, which builds on the base image's Node",
      protobufjs: 'its postinstall only checks versions',
      libxmljs2: 'optional XML validation of the SBOM tool (dev only); the SBOM is JSON',
    };
    const withScripts = Object.entries(lock.packages)
      .filter(([, entry]) => entry.hasInstallScript)
      .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length));
    expect([...new Set(withScripts)].sort()).toEqual(Object.keys(notNeeded).sort());
  });

  it("builds on the base image's Node: the node package's empty bin link is removed before any script runs", () => {
    const install = runs.findIndex((run) => run.includes('npm ci --ignore-scripts'));
    const build = runs.findIndex((run) => run.includes('npm run build'));
    expect(install).toBeGreaterThanOrEqual(0);
    expect(build).toBeGreaterThan(install);
    expect(runs[install]).toContain('rm -rf node_modules/.bin/node node_modules/node');
    expect(runs[install]).toContain('test "$(command -v node)" = /usr/local/bin/node');
  });
});
