import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { dayLabel, fmtCompact, fmtNumber } from './series';
import { useScheme } from './theme';

export interface StackSeries {
  name: string;
  values: number[];
}

/**
 * Colours of the stacked series, distinguishable for common colour-vision deficiencies (Okabe–Ito).
 * Black is drawn in the theme's text colour, so it stays visible on the dark theme.
 */
export const PALETTE = ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#D55E00', '#F0E442', '#000000', '#999999', '#7f3c8d', '#11a579'];

/**
 * Bars per time bucket, one stacked segment per series (uPlot, canvas). uPlot does not stack by itself:
 * each drawn series is the running sum, drawn largest first so the smaller ones cover its base; the
 * legend and the table show each series' own value. `times` are bucket starts in seconds.
 *
 * Hovering a day, or moving through the days with the arrow keys (Home, End) once the chart has focus,
 * shows a tooltip at the cursor: the day, its total and each series' value (docs/console.md "The
 * overview"). Numbers on the axis and in the legend are grouped, compact from 10,000.
 */
export function StackedBars({
  times,
  series,
  height = 260,
  label,
  tz = 'UTC',
}: { times: number[]; series: StackSeries[]; height?: number; label: string; tz?: string }) {
  const box = useRef<HTMLDivElement>(null);
  // The canvas does not follow CSS: it is drawn again, in the theme's colours, when the theme changes.
  const scheme = useScheme();
  // biome-ignore lint/correctness/useExhaustiveDependencies: the scheme is read through the CSS variables, not by name
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const css = getComputedStyle(el);
    const ink = css.getPropertyValue('--fg').trim() || '#1a1d24';
    const grid = css.getPropertyValue('--chart-grid').trim() || 'rgba(0, 0, 0, 0.08)';
    const palette = PALETTE.map((c) => (c === '#000000' ? ink : c));
    const axis = { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const cumulative: number[][] = [];
    let running = times.map(() => 0);
    for (const s of series) {
      running = running.map((v, i) => v + (s.values[i] ?? 0));
      cumulative.push(running);
    }
    const order = series.map((_, i) => series.length - 1 - i); // top of the stack first
    const bars = uPlot.paths.bars?.({ size: [0.8, 48], align: 0 });
    const opts: uPlot.Options = {
      width: Math.max(el.clientWidth, 320),
      height,
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [
        { ...axis, space: 60 },
        { ...axis, label: 'credits', size: 60, values: (_u, splits) => splits.map((v) => fmtCompact(v)) },
      ],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      hooks: { setCursor: [(u) => showTip(u, u.cursor.idx)] },
      series: [
        // The day is in the tooltip; its legend entry is hidden (extra.css).
        { label: 'day', value: () => '' },
        ...order.map((i) => {
          const s = series[i]!;
          const colour = palette[i % palette.length]!;
          return {
            label: s.name,
            fill: colour,
            stroke: colour,
            width: 0,
            ...(bars ? { paths: bars } : {}),
            points: { show: false },
            // Under the cursor: that day's value; elsewhere: the series' total over the range.
            value: (_u: uPlot, _v: number | null, _si: number, idx: number | null) =>
              fmtCompact(idx == null ? s.values.reduce((a, b) => a + b, 0) : (s.values[idx] ?? 0)),
          };
        }),
      ],
    };
    const tip = document.createElement('div');
    tip.className = 'chart-tip';
    tip.dataset.testid = 'chart-tooltip';
    tip.hidden = true;
    const showTip = (u: uPlot, idx: number | null | undefined) => {
      const t = idx == null ? undefined : times[idx];
      if (idx == null || t === undefined || (u.cursor.left ?? -1) < 0) {
        tip.hidden = true;
        return;
      }
      const day = document.createElement('strong');
      day.textContent = dayLabel(t, tz);
      const total = document.createElement('div');
      total.append('Total: ');
      const sum = document.createElement('span');
      sum.dataset.testid = 'tip-total';
      sum.textContent = fmtNumber(series.reduce((n, x) => n + (x.values[idx] ?? 0), 0));
      total.append(sum);
      const rows = series.map((x, i) => {
        const row = document.createElement('div');
        row.className = 'chart-tip-row';
        row.dataset.testid = 'tip-series';
        const swatch = document.createElement('span');
        swatch.className = 'chart-tip-swatch';
        swatch.style.background = palette[i % palette.length]!;
        const name = document.createElement('span');
        name.className = 'chart-tip-name';
        name.textContent = x.name;
        const value = document.createElement('span');
        value.className = 'chart-tip-value';
        value.textContent = fmtNumber(x.values[idx] ?? 0);
        row.append(swatch, name, value);
        return row;
      });
      tip.replaceChildren(day, total, ...rows);
      tip.dataset.key = new Date(t * 1000).toISOString();
      tip.hidden = false;
      // At the cursor, kept inside the plot: to its left past the middle, clamped at the top and bottom.
      const left = u.cursor.left ?? 0;
      const width = u.over.clientWidth;
      const x = left > width / 2 ? left - tip.offsetWidth - 12 : left + 12;
      tip.style.left = `${Math.max(0, Math.min(x, width - tip.offsetWidth))}px`;
      const top = Math.min(u.cursor.top ?? 0, u.over.clientHeight - tip.offsetHeight);
      tip.style.top = `${Math.max(0, top)}px`;
    };
    const data: uPlot.AlignedData = [times, ...order.map((i) => cumulative[i]!)];
    const plot = new uPlot(opts, data, el);
    plot.over.append(tip);
    // The keyboard moves the cursor from day to day.
    const key = (e: KeyboardEvent) => {
      if (times.length === 0) return;
      const at = plot.cursor.idx ?? -1;
      const next =
        e.key === 'ArrowLeft' ? Math.max(0, at < 0 ? times.length - 1 : at - 1)
        : e.key === 'ArrowRight' ? Math.min(times.length - 1, at + 1)
        : e.key === 'Home' ? 0
        : e.key === 'End' ? times.length - 1
        : e.key === 'Escape' ? -1
        : null;
      if (next === null) return;
      e.preventDefault();
      if (next < 0) plot.setCursor({ left: -10, top: -10 });
      else plot.setCursor({ left: plot.valToPos(times[next]!, 'x'), top: plot.over.clientHeight / 3 });
    };
    const blur = () => plot.setCursor({ left: -10, top: -10 });
    el.addEventListener('keydown', key);
    el.addEventListener('blur', blur);
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(el.clientWidth, 320), height }));
    resize.observe(el);
    el.dataset.rendered = 'true';
    return () => {
      resize.disconnect();
      el.removeEventListener('keydown', key);
      el.removeEventListener('blur', blur);
      plot.destroy();
      delete el.dataset.rendered;
    };
  }, [times, series, height, tz, scheme]);
  return (
    // biome-ignore lint/a11y/noNoninteractiveTabindex: the arrow keys move the chart's cursor from day to day
    <div ref={box} className="chart" role="img" aria-label={`${label}. Arrow keys show each day's values.`} tabIndex={0} data-testid="usage-chart" />
  );
}
