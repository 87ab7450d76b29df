-- What a dispute's take-back took from open expiring grants (the rest came from credits that never
-- expire): a dispute won gives that part back to the grants, not as credits that never expire
-- (docs/metering.md, Expiring grants).
ALTER TABLE "credit_purchases" ADD COLUMN "dispute_taken_from_grants" bigint DEFAULT 0 NOT NULL;
