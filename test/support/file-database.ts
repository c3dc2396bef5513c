// Set-up file of the integration project (vitest.config.ts): gives the test file a database of its
// own, a copy of the run's migrated one, and drops it after the file. Its URL is databaseUrl().
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, inject } from 'vitest';

const adminUrl = inject('databaseAdminUrl');
const template = inject('databaseTemplate');
const name = `${template}_${randomBytes(4).toString('hex')}`;

async function onAdmin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

// Copies made at the same moment by other files can briefly hold the template: try again.
for (let attempt = 1; ; attempt += 1) {
  try {
    await onAdmin((client) => client.query(`CREATE DATABASE ${name} TEMPLATE ${template}`));
    break;
  } catch (error) {
    if ((error as { code?: string }).code !== '55006' || attempt >= 50) throw error;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
const url = new URL(adminUrl);
url.pathname = `/${name}`;
process.env.TEST_FILE_DATABASE_URL = url.toString();

afterAll(async () => {
  await onAdmin((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
});
