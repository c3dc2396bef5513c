// Images pinned by digest in the chart (issue 18, item 7): image.digest gives repository@digest to
// every container that runs the service's image, and the test pods' tag may carry the digest
// Renovate's helm-values manager writes into it. Under both Helm majors.
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { IJob } from 'kubernetes-models/batch/v1';
import type { IPod } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { findAll, findOne, helms, type RenderOptions, render, renderError } from './chart.js';

const digest = `sha256:${'ab12'.repeat(16)}`;

describe.each(helms)('%s', (_helm, binary) => {
  const as = (options: RenderOptions): RenderOptions => ({ ...options, helm: binary.major });
  const serviceImages = (options: RenderOptions): string[] => {
    const objects = render(as(options));
    return [
      ...findOne<IDeployment>(objects, 'Deployment').spec!.template.spec!.containers.map((c) => c.image!),
      ...findAll<IJob>(objects, 'Job').flatMap((job) => job.spec!.template.spec!.containers.map((c) => c.image!)),
    ];
  };

  it('runs the service and the migration Job as repository:tag without a digest', () => {
    expect(serviceImages({})).toEqual(['ghcr.io/example/partner-agent-status:0.1.0', 'ghcr.io/example/partner-agent-status:0.1.0']);
  });

  it('runs both as repository@digest when image.digest is set, the tag left to the version label', () => {
    const options = { set: ['image.tag=1.2.3', `image.digest=${digest}`] };
    expect(serviceImages(options)).toEqual([
      `ghcr.io/example/partner-agent-status@${digest}`,
      `ghcr.io/example/partner-agent-status@${digest}`,
    ]);
    expect(findOne<IDeployment>(render(as(options)), 'Deployment').metadata?.labels?.['app.kubernetes.io/version']).toBe('1.2.3');
  });

  it('refuses a digest that is not sha256:<64 hex digits>', () => {
    expect(renderError(as({ set: ['image.digest=sha256:abc'] }))).toContain("values don't meet the specifications of the schema(s)");
  });

  it('keeps a digest Renovate pinned into the test image tag', () => {
    const pods = findAll<IPod>(render(as({ set: [`tests.image.tag=8.12.1@${digest}`] })), 'Pod');
    expect(pods.length).toBeGreaterThan(0);
    for (const pod of pods) expect(pod.spec?.containers[0]?.image).toBe(`curlimages/curl:8.12.1@${digest}`);
  });
});
