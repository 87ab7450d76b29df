-- Budgets on AI calls (docs/budgets.md, AI calls): an AI hold names the budget windows it was counted in;
-- the '' row of a '*' budget's window counts the budget events written for it (at most 100 per window).
ALTER TABLE "ai_reservations" ADD COLUMN "budget_windows" uuid[];--> statement-breakpoint
ALTER TABLE "budget_windows" ADD COLUMN "events_sent" integer DEFAULT 0 NOT NULL;