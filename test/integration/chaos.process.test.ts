// The chaos suite (test/support/chaos.ts) with one Redis server, in its short form.
import { chaosSuite } from '../support/chaos.js';

chaosSuite('single', 20);
