// The chaos suite (test/support/chaos.ts) with every replica reaching PostgreSQL through a PgBouncer
// 1.18 in transaction mode (DATABASE_POOLER=transaction, four server connections shared by all), in
// its short form.
import { chaosSuite } from '../support/chaos.js';

chaosSuite('single', 15, 'pooler');
