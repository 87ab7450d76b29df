-- The seed's credit cost list (SPEC §3, §11): a fresh instance has exactly these ten actions.
INSERT INTO "credit_costs" ("action", "credits", "description") VALUES
  ('task_basic', 1, NULL),
  ('task_advanced', 3, NULL),
  ('crew_execute', 5, NULL),
  ('rag_query', 2, NULL),
  ('rag_ingest', 2, NULL),
  ('generate', 3, NULL),
  ('tao_trace', 1, NULL),
  ('tao_evaluate', 3, NULL),
  ('tao_analytics', 2, NULL),
  ('platform_basic', 1, NULL)
ON CONFLICT ("action") DO NOTHING;
--> statement-breakpoint
-- The ledger is append-only: corrections are new rows, never edits.
CREATE OR REPLACE FUNCTION credit_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'credit_ledger is append-only';
END;
$$;
--> statement-breakpoint
CREATE TRIGGER credit_ledger_no_update_delete
  BEFORE UPDATE OR DELETE ON "credit_ledger"
  FOR EACH ROW EXECUTE FUNCTION credit_ledger_append_only();
