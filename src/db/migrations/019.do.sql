-- Idempotency keys (docs/interfaces.md §11): a status change commits only while its request still
-- holds the key it claimed. The change's statement writes its change id to the key's row, fenced by
-- the claim token and the lease (an UPDATE, so it sees the row's latest version, after any wait);
-- when that matched no row, this raises SQLSTATE P0409 and the whole statement (the flag, the change
-- row, its event) is rolled back. A request without a key passes true.
SET LOCAL lock_timeout = '3s';

CREATE OR REPLACE FUNCTION public.require_idempotency_key(p_held boolean)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT p_held THEN
    RAISE EXCEPTION 'the idempotency key passed to another request' USING ERRCODE = 'P0409';
  END IF;
  RETURN true;
END
$$;
