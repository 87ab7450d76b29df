-- An auto top-up keeps the saved card it chose (docs/billing.md, "Auto top-up"): every retry of its
-- PaymentIntent under the same idempotency key sends the same request, even if the default card changed.
ALTER TABLE "auto_top_ups" ADD COLUMN "payment_method" text;