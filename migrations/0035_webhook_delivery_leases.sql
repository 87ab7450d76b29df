-- The delivery worker gives a webhook no delivery while any of its deliveries is under a live lease
-- (docs/webhooks.md, Delivery worker): found per webhook through this index of the leased rows, a few at
-- any time (a claim sets leased_until, the attempt's record clears it).
CREATE INDEX "webhook_deliveries_leased_idx" ON "webhook_deliveries" USING btree ("webhook_id") WHERE "webhook_deliveries"."leased_until" IS NOT NULL;
