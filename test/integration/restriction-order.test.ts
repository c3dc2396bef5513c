// The restriction's final check runs after every other trigger: a platform BEFORE UPDATE trigger
// whose name sorts after ours cannot unpause a restricted agent's campaign behind its back.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testDatabase } from '../support/data.js';

const db = testDatabase();

beforeAll(async () => {
  // A platform trigger named to sort after every trigger of ours: it "resumes" any campaign whose
  // row is touched while paused (a plausible bulk-reactivation helper).
  await db.pool.query(`
    CREATE FUNCTION platform_resume() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN NEW.paused := false; RETURN NEW; END $$`);
  await db.pool.query(`
    CREATE TRIGGER zzzz_platform_resume BEFORE UPDATE ON campaigns
    FOR EACH ROW WHEN (OLD.paused AND NEW.active) EXECUTE FUNCTION platform_resume()`);
});

afterAll(async () => {
  await db.pool.query('DROP TRIGGER IF EXISTS zzzz_platform_resume ON campaigns');
  await db.close();
});

describe('the restriction after a later-sorting platform trigger', () => {
  it('refuses the unpause the platform trigger made (P0001), and allows it once the agent is approved', async () => {
    const networkId = await db.network({ requireAgentApproval: true });
    const agentId = await db.agent(networkId);
    const [campaignId] = await db.campaigns(agentId, 1, { paused: true });
    await db.pool.query('UPDATE agents SET agent_approved = false WHERE agent_id = $1', [agentId]);
    await expect(db.pool.query('UPDATE campaigns SET active = true WHERE campaign_id = $1', [campaignId])).rejects.toMatchObject({
      code: 'P0001',
    });
    const { rows } = await db.pool.query('SELECT paused FROM campaigns WHERE campaign_id = $1', [campaignId]);
    expect(rows[0].paused).toBe(true);

    await db.pool.query('UPDATE agents SET agent_approved = true WHERE agent_id = $1', [agentId]);
    await db.pool.query('UPDATE campaigns SET active = true WHERE campaign_id = $1', [campaignId]);
    const after = await db.pool.query('SELECT paused FROM campaigns WHERE campaign_id = $1', [campaignId]);
    expect(after.rows[0].paused).toBe(false);
  });
});
