// The database's connection budget (docs/interfaces.md §13, "A connection budget"): each pod opens
// at most database.maxConnections (DATABASE_MAX_CONNECTIONS), and the render fails when the most
// pods the release can run, times that, plus the migration job's connection, exceeds
// database.connectionBudget.
import type { IConfigMap } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { findAll, helms, render, renderError } from './chart.js';

const environment = (set: string[] = []) =>
  Object.assign({}, ...findAll<IConfigMap>(render({ set }), 'ConfigMap').map((configMap) => configMap.data ?? {})) as Record<
    string,
    string
  >;

describe('the connections of one pod', () => {
  it('are DATABASE_MAX_CONNECTIONS, 17 by default, and DATABASE_POOL_SIZE is no longer set', () => {
    expect(environment()).toMatchObject({ DATABASE_MAX_CONNECTIONS: '17' });
    expect(environment()).not.toHaveProperty('DATABASE_POOL_SIZE');
    expect(environment(['database.maxConnections=8'])).toMatchObject({ DATABASE_MAX_CONNECTIONS: '8' });
  });
});

describe.each(helms)('the database connection budget (%s)', (_name, binary) => {
  const at = (set: string[]) => ({ helm: binary.major, set });

  it('renders when the most pods times the per-pod maximum plus the migration job fit, exactly at the budget included', () => {
    // replicaCount 2 (the default): 2 x 17 + 1 = 35.
    expect(() => render(at(['database.connectionBudget=35']))).not.toThrow();
    // With the HPA: maxReplicas counts, not replicaCount. 10 x 17 + 1 = 171.
    expect(() => render(at(['autoscaling.enabled=true', 'autoscaling.maxReplicas=10', 'database.connectionBudget=171']))).not.toThrow();
    // Without the migration hook, its connection is not counted: 10 x 17 = 170.
    expect(() =>
      render(at(['autoscaling.enabled=true', 'autoscaling.maxReplicas=10', 'migrations.enabled=false', 'database.connectionBudget=170'])),
    ).not.toThrow();
  });

  it('refuses to render when they do not fit, naming the arithmetic', () => {
    expect(renderError(at(['database.connectionBudget=34']))).toContain(
      'database.connectionBudget (34) is too small: 2 pods (replicaCount) x database.maxConnections (17) + 1 for the migration job = 35 connections',
    );
    expect(renderError(at(['autoscaling.enabled=true', 'autoscaling.maxReplicas=10', 'database.connectionBudget=170']))).toContain(
      'database.connectionBudget (170) is too small: 10 pods (autoscaling.maxReplicas) x database.maxConnections (17) + 1 for the migration job = 171 connections',
    );
    // The default budget (100) does not hold the default HPA's ten pods of 17 connections.
    expect(renderError(at(['autoscaling.enabled=true']))).toMatch(/database\.connectionBudget \(100\) is too small/);
    // Fewer connections per pod make it fit: 10 x 9 + 1 = 91.
    expect(() => render(at(['autoscaling.enabled=true', 'database.maxConnections=9']))).not.toThrow();
  });

  it('refuses the replaced database.poolSize, saying which maxConnections keeps the same pools', () => {
    expect(renderError(at(['database.poolSize=25']))).toContain(
      'database.poolSize is replaced by database.maxConnections, the connections of a pod in all its pools together (the request pool had poolSize, the other pools 7 more): remove database.poolSize and set database.maxConnections: 32',
    );
  });
});
