-- Partner webhooks, bounded (docs/interfaces.md §14): an endpoint's successes in a row, so that the
-- 5-day failing clock is stopped by a recovery (two successes in a row), not by a lone success
-- among failures. A column with a constant default: no table rewrite, a short lock only.
SET LOCAL lock_timeout = '3s';

ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS success_streak integer NOT NULL DEFAULT 0;

-- Signing secrets are stored sealed from now on (AES-256-GCM, `v1:…`, src/events/secret-box.ts);
-- a row written before holds `whsec_…` and is read as it is until the service seals it at start.
-- A previous secret past its overlap is dropped by the sender's pruning.
COMMENT ON COLUMN webhook_endpoints.secret IS 'the signing secret sealed (v1:…), or in clear (whsec_…) until the service seals it';
