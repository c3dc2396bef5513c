// The chaos suite (test/support/chaos.ts) with a Redis Cluster (REDIS_CLUSTER=true: three primaries
// with a replica each; a primary killed and slots moved during the chaos), in its short form.
import { chaosSuite } from '../support/chaos.js';

chaosSuite('cluster', 15);
