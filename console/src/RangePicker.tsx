import { useState } from 'react';
import { PRESET_DAYS, type RangeChoice } from './series';

/**
 * The overview's range (docs/console.md "The overview"): the last 7, 30 or 90 days, or two days
 * chosen, both included. A preset applies at once; chosen days apply with "Show".
 */
export function RangePicker({ value, onChange, today }: { value: RangeChoice; onChange: (next: RangeChoice) => void; today: string }) {
  const custom = !('days' in value);
  const [open, setOpen] = useState(custom);
  const [from, setFrom] = useState(custom ? value.from : '');
  const [to, setTo] = useState(custom ? value.to : today);
  const valid = /^\d{4}-\d{2}-\d{2}$/.test(from) && /^\d{4}-\d{2}-\d{2}$/.test(to) && from <= to;
  return (
    <fieldset className="range-picker choices" data-testid="range-picker">
      <legend>Range</legend>
      <div className="presets">
        {PRESET_DAYS.map((days) => {
          const on = !open && 'days' in value && value.days === days;
          return (
            <button
              key={days}
              type="button"
              className={on ? undefined : 'secondary'}
              aria-pressed={on}
              onClick={() => {
                setOpen(false);
                onChange({ days });
              }}
            >
              {days} days
            </button>
          );
        })}
        <button type="button" className={open ? undefined : 'secondary'} aria-pressed={open} onClick={() => setOpen(true)}>
          Custom
        </button>
      </div>
      {open ? (
        <form
          className="custom"
          onSubmit={(e) => {
            e.preventDefault();
            if (valid) onChange({ from, to });
          }}
        >
          <label>
            From
            <input type="date" value={from} max={to || today} onChange={(e) => setFrom(e.target.value)} required />
          </label>
          <label>
            To (included)
            <input type="date" value={to} min={from || undefined} max={today} onChange={(e) => setTo(e.target.value)} required />
          </label>
          <button type="submit" disabled={!valid}>
            Show
          </button>
        </form>
      ) : null}
    </fieldset>
  );
}
