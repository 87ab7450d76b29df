-- The delivery worker claims each webhook's earliest pending delivery (its head), one webhook at a time in
-- flight (docs/webhooks.md, Delivery worker): found per webhook through this index. Only pending rows have a
-- next_retry_at; the predicate does not name `status` (a proxy send's final UPDATE changes it, and a column
-- in an index predicate rules out HOT updates).
CREATE INDEX "webhook_deliveries_head_idx" ON "webhook_deliveries" USING btree ("webhook_id","next_retry_at","id") WHERE "webhook_deliveries"."next_retry_at" IS NOT NULL;
