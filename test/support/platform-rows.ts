// Moved to src/dev/seed.ts (one seeding module for npm run dev, the tests and the e2e seeder).
// Kept only for test/bench/run.ts until it imports from there; then delete this file.
export { insertAgent, insertCampaigns, insertNetwork } from '../../src/dev/seed.js';
