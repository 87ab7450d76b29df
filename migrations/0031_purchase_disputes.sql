ALTER TABLE "credit_purchases" ADD COLUMN "dispute_id" text;--> statement-breakpoint
ALTER TABLE "credit_purchases" ADD COLUMN "dispute_share" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "credit_purchases" ADD COLUMN "dispute_taken_back" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "credit_purchases" ADD COLUMN "dispute_reinstated" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "credit_purchases" ADD CONSTRAINT "credit_purchases_dispute_bound" CHECK ("credit_purchases"."dispute_taken_back" >= 0 AND "credit_purchases"."dispute_taken_back" <= "credit_purchases"."dispute_share"
        AND "credit_purchases"."refund_share" + CASE WHEN "credit_purchases"."dispute_reinstated" THEN 0 ELSE "credit_purchases"."dispute_share" END <= "credit_purchases"."credits");