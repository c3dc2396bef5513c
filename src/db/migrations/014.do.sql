-- Idempotency keys stored hashed, and counted per network (docs/interfaces.md §11). Only the
-- service's own tables: a short lock_timeout keeps this file out of any lock queue.
SET LOCAL lock_timeout = '3s';

-- idempotency_key now holds 'sha256:' and the lowercase hex SHA-256 of "<network_id>\n<key>",
-- never the partner's value (which could be anything, a credential sent by mistake included). The
-- rows written before (at most 24 hours' worth) are hashed here the same way; a row that already has
-- that form is left as it is, so the file may run again. (A partner's own value of that very form is
-- not a secret of anyone's; the service hashes it like any other when it is sent.)
UPDATE idempotency_keys
   SET idempotency_key = 'sha256:' || encode(sha256(convert_to(network_id::text || E'\n' || idempotency_key, 'UTF8')), 'hex')
 WHERE idempotency_key !~ '^sha256:[0-9a-f]{64}$';

-- The keys each network holds (rows not yet purged), for IDEMPOTENCY_KEYS_PER_NETWORK: raised by the
-- claim that inserts a key, lowered by the statements that delete keys. recounted_at: when an exact
-- count last replaced it (done before any 429, at most once a minute per network).
CREATE TABLE IF NOT EXISTS idempotency_key_counts (
  network_id uuid PRIMARY KEY,
  live integer NOT NULL,
  recounted_at timestamptz NOT NULL DEFAULT '-infinity'
);

INSERT INTO idempotency_key_counts (network_id, live)
SELECT network_id, count(*) FROM idempotency_keys GROUP BY network_id
ON CONFLICT (network_id) DO NOTHING;
