import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { allRules, paths, ruleTestFile, runbookAlertSections, runbookAnchors } from './artifacts.js';
import { metricNamesOf } from './promql.js';
import { promtoolRun } from './promtool.js';

const alerts = allRules().filter((rule) => rule.alert);

describe('the alert rule file', () => {
  it('passes promtool check rules', async () => {
    const output = await promtoolRun('check', 'rules', paths.rules);
    expect(output).toContain('SUCCESS');
  });

  it('passes its promtool unit tests', async () => {
    const output = await promtoolRun('test', 'rules', paths.ruleTests);
    expect(output).toContain('SUCCESS');
  });

  it('has the alerts the service needs', () => {
    expect(alerts.map((a) => a.alert).sort()).toEqual(
      [
        'PartnerAgentStatusCampaignsUnsettled',
        'PartnerAgentStatusCircuitBreakerOpen',
        'PartnerAgentStatusDisablePending',
        'PartnerAgentStatusEventsNotRelayed',
        'PartnerAgentStatusEventsRelayHolderMissing',
        'PartnerAgentStatusHigh5xxRatio',
        'PartnerAgentStatusKeyExpiring',
        'PartnerAgentStatusKeyReloadFailing',
        'PartnerAgentStatusLatencyP99High',
        'PartnerAgentStatusLoadShedding',
        'PartnerAgentStatusNoKeysLoaded',
        'PartnerAgentStatusNoPodReady',
        'PartnerAgentStatusPartnerLimited',
        'PartnerAgentStatusPodsNotReady',
        'PartnerAgentStatusRateLimitFailingOpen',
        'PartnerAgentStatusSpendManagementCredentialsRejected',
        'PartnerAgentStatusWebhookDeliveriesBehind',
        'PartnerAgentStatusWebhookDeliveriesDropped',
        'PartnerAgentStatusWebhookEndpointDisabled',
      ].sort(),
    );
  });

  it('gives every alert a severity, a summary, a description and a runbook link', () => {
    const problems: string[] = [];
    for (const rule of alerts) {
      if (!['critical', 'warning', 'info'].includes(rule.labels?.severity ?? '')) problems.push(`${rule.alert}: labels.severity`);
      for (const key of ['summary', 'description', 'runbook_url']) {
        if (!rule.annotations?.[key]?.trim()) problems.push(`${rule.alert}: annotations.${key}`);
      }
    }
    expect(problems, `missing or invalid:\n${problems.join('\n')}`).toEqual([]);
  });

  it("points every runbook_url at the alert's own section of docs/runbook.md", () => {
    const anchors = runbookAnchors();
    const problems: string[] = [];
    for (const rule of alerts) {
      const url = rule.annotations?.runbook_url ?? '';
      const match = /(?:^|\/)docs\/runbook\.md#([\w-]+)$/.exec(url);
      if (!match?.[1]) problems.push(`${rule.alert}: runbook_url "${url}" is not docs/runbook.md#<anchor>`);
      else if (!anchors.has(match[1])) problems.push(`${rule.alert}: no heading in docs/runbook.md has the anchor #${match[1]}`);
      else if (match[1] !== rule.alert?.toLowerCase()) problems.push(`${rule.alert}: links to #${match[1]}, not its own section`);
    }
    expect(problems, problems.join('\n')).toEqual([]);
  });

  it('links within the runbook only to headings that exist', () => {
    const anchors = runbookAnchors();
    const links = [...readFileSync(paths.runbook, 'utf8').matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1] ?? '');
    expect(links.length).toBeGreaterThan(10);
    expect(links.filter((anchor) => !anchors.has(anchor))).toEqual([]);
  });

  it('has a runbook section for every alert and no section for an alert that does not exist', () => {
    expect(runbookAlertSections().sort()).toEqual(alerts.map((a) => a.alert).sort());
  });

  it('unit-tests every alert both firing and not firing', () => {
    const firing = new Set<string>();
    const silent = new Set<string>();
    for (const test of ruleTestFile().tests) {
      for (const check of test.alert_rule_test ?? []) {
        (check.exp_alerts?.length ? firing : silent).add(check.alertname);
      }
    }
    const names = alerts.map((a) => a.alert ?? '');
    const problems = [
      ...names.filter((n) => !firing.has(n)).map((n) => `${n}: no test where it fires`),
      ...names.filter((n) => !silent.has(n)).map((n) => `${n}: no test where it stays silent`),
      ...[...firing, ...silent].filter((n) => !names.includes(n)).map((n) => `${n}: tested but not in the rule file`),
    ];
    expect(problems, problems.join('\n')).toEqual([]);
  });

  it('waits before paging on a sustained condition, except where the expression measures the time itself', () => {
    const instant = alerts.filter((a) => !a.for).map((a) => a.alert);
    expect(instant.sort()).toEqual([
      // the oldest unsettled campaign's age is itself the 5 minutes
      'PartnerAgentStatusCampaignsUnsettled',
      // open for a minute, measured over a window inside the expression (see the rule comment)
      'PartnerAgentStatusCircuitBreakerOpen',
      // the oldest pending disable's age is itself the 5 minutes
      'PartnerAgentStatusDisablePending',
      // the oldest unrelayed event's age is itself the 2 minutes
      'PartnerAgentStatusEventsNotRelayed',
      // credentials rejected do not heal by themselves: any rejection counts
      'PartnerAgentStatusSpendManagementCredentialsRejected',
      // the oldest due delivery's wait is itself the 10 minutes
      'PartnerAgentStatusWebhookDeliveriesBehind',
      // any delivery not made is the event to act on; the 15 minutes of increase() keep it firing
      'PartnerAgentStatusWebhookDeliveriesDropped',
      // one endpoint disabled is the event to act on; the hour of increase() keeps it firing
      'PartnerAgentStatusWebhookEndpointDisabled',
    ]);
  });

  it('reads the durable-disable and limit metrics the service exports for them', () => {
    const read = new Set(alerts.flatMap((a) => metricNamesOf(a.expr)));
    for (const name of [
      'pending_disables_oldest_age_seconds',
      'unsettled_campaigns_oldest_age_seconds',
      'events_oldest_waiting_age_seconds',
      'events_relay_holder',
      'spend_management_auth_failures_total',
      'partner_requests_limited_total',
      'requests_shed_total',
      'rate_limit_store_errors_total',
      'webhook_endpoints_disabled_total',
      'webhook_deliveries_dropped_total',
      'webhook_deliveries_oldest_due_age_seconds',
    ]) {
      expect(read, name).toContain(name);
    }
  });
});
