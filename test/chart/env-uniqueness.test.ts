// Kubernetes server-side apply (Helm 4's default for new releases) rejects a container with two env
// entries of one name at install time; client-side apply silently kept the last. `helm template`
// and `helm lint` never reach an API server, so the chart fails the render itself when extraEnv
// repeats a name (pas.validateExtraEnv), and these tests check every container it renders.

import type { IContainer } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { ciValuesFiles, helms, type K8sObject, type RenderOptions, render, renderError } from './chart.js';

const valueSets: Array<[string, RenderOptions]> = [
  ['the default values', {}],
  ...ciValuesFiles.map((file): [string, RenderOptions] => [file, { values: [file] }]),
  [
    'extraEnv with names of its own',
    {
      set: ['extraEnv[0].name=OTEL_BSP_SCHEDULE_DELAY', 'extraEnv[1].name=TZ', 'extraEnv[1].value=UTC'],
      setString: ['extraEnv[0].value=2000'],
    },
  ],
];

/** Every container (init containers too) of every workload and pod the chart renders. */
function containers(objects: K8sObject[]): Array<[string, IContainer]> {
  return objects.flatMap((object): Array<[string, IContainer]> => {
    const spec = (object as { spec?: { template?: { spec?: unknown } } }).spec;
    const podSpec = (object.kind === 'Pod' ? spec : spec?.template?.spec) as
      | { containers?: IContainer[]; initContainers?: IContainer[] }
      | undefined;
    return [...(podSpec?.containers ?? []), ...(podSpec?.initContainers ?? [])].map((c): [string, IContainer] => [
      `${object.kind}/${object.metadata.name}/${c.name}`,
      c,
    ]);
  });
}

function duplicates(names: string[]): string[] {
  return names.filter((name, index) => names.indexOf(name) !== index);
}

describe.each(helms)('%s', (_helm, binary) => {
  it.each(valueSets)('renders no container with two env entries of one name, with %s', (_name, options) => {
    const found = containers(render({ ...options, helm: binary.major }));
    expect(found.length).toBeGreaterThanOrEqual(3);
    for (const [where, container] of found) expect(duplicates((container.env ?? []).map((e) => e.name)), where).toEqual([]);
  });

  it('fails the render when extraEnv repeats a variable the chart sets in env', () => {
    expect(renderError({ helm: binary.major, set: ['extraEnv[0].name=DATABASE_URL', 'extraEnv[0].value=postgres://elsewhere'] })).toMatch(
      /extraEnv\[0\]\.name DATABASE_URL is already set by the chart/,
    );
  });

  it('fails the render when extraEnv repeats a variable the chart sets in its ConfigMap', () => {
    for (const name of ['NODE_OPTIONS', 'LOG_LEVEL', 'RATE_LIMIT_MAX']) {
      expect(renderError({ helm: binary.major, set: [`extraEnv[0].name=${name}`, 'extraEnv[0].value=x'] })).toMatch(
        new RegExp(`extraEnv\\[0\\]\\.name ${name} is already set by the chart`),
      );
    }
  });

  it('fails the render when extraEnv repeats one of the variables set only with tracing on', () => {
    const tracing = ['otel.enabled=true'];
    expect(() => render({ helm: binary.major, set: [...tracing, 'extraEnv[0].name=TZ', 'extraEnv[0].value=UTC'] })).not.toThrow();
    expect(
      renderError({ helm: binary.major, set: [...tracing, 'extraEnv[0].name=OTEL_RESOURCE_ATTRIBUTES', 'extraEnv[0].value=a=b'] }),
    ).toMatch(/OTEL_RESOURCE_ATTRIBUTES is already set by the chart/);
  });

  it('fails the render when extraEnv gives one name twice', () => {
    expect(
      renderError({
        helm: binary.major,
        set: ['extraEnv[0].name=TZ', 'extraEnv[0].value=UTC', 'extraEnv[1].name=TZ', 'extraEnv[1].value=CET'],
      }),
    ).toMatch(/extraEnv\[1\]\.name TZ repeats an earlier extraEnv entry/);
  });
});

describe('the duplicate check itself', () => {
  it('finds a repeated name', () => {
    expect(duplicates(['A', 'B', 'A'])).toEqual(['A']);
    expect(duplicates(['A', 'B'])).toEqual([]);
  });
});
