-- Auto top-up (docs/billing.md, "Auto top-up"): the refund of a pack or a top-up takes credits back
-- without asking for a new top-up (the take-back marks its statement with a transaction-local setting).
CREATE OR REPLACE FUNCTION credit_balances_auto_top_up() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  after_available bigint;
  before_available bigint;
  asked uuid;
BEGIN
  -- A refund's take-back spends purchased credits but is not a deduction: it asks for nothing.
  IF current_setting('creditgate.no_auto_top_up', true) = 'on' THEN
    RETURN NEW;
  END IF;
  IF NEW.monthly_allocation IS NULL
     OR NOT (NEW.monthly_used > OLD.monthly_used OR NEW.purchased_balance < OLD.purchased_balance OR NEW.reserved > OLD.reserved) THEN
    RETURN NEW;
  END IF;
  after_available := GREATEST(0, NEW.monthly_allocation - NEW.monthly_used) + NEW.purchased_balance - NEW.reserved;
  IF after_available >= NEW.auto_top_up_below THEN
    RETURN NEW;
  END IF;
  before_available := CASE WHEN OLD.monthly_allocation IS NULL THEN NULL
                           ELSE GREATEST(0, OLD.monthly_allocation - OLD.monthly_used) + OLD.purchased_balance - OLD.reserved END;
  IF before_available IS NULL OR before_available >= NEW.auto_top_up_below
     OR (NEW.auto_top_up_due_at IS NOT NULL AND NEW.updated_at >= NEW.auto_top_up_due_at) THEN
    INSERT INTO auto_top_ups (organization_id, deployment_id, status, requested_at, next_attempt_at)
    VALUES (NEW.organization_id, NEW.deployment_id, 'requested', NEW.updated_at, NEW.updated_at)
    ON CONFLICT DO NOTHING
    RETURNING id INTO asked;
    IF asked IS NOT NULL THEN
      NEW.auto_top_up_due_at := NULL;
    END IF;
  END IF;
  RETURN NEW;
END;
$$;
