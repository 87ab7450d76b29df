import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { dayLabel } from './series';
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
        { ...axis, label: 'credits', size: 60 },
      ],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      series: [
        { label: 'day', value: (_u, v) => (v == null ? '—' : dayLabel(v, tz)) },
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
              String(idx == null ? s.values.reduce((a, b) => a + b, 0) : (s.values[idx] ?? 0)),
          };
        }),
      ],
    };
    const data: uPlot.AlignedData = [times, ...order.map((i) => cumulative[i]!)];
    const plot = new uPlot(opts, data, el);
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(el.clientWidth, 320), height }));
    resize.observe(el);
    el.dataset.rendered = 'true';
    return () => {
      resize.disconnect();
      plot.destroy();
      delete el.dataset.rendered;
    };
  }, [times, series, height, tz, scheme]);
  return <div ref={box} className="chart" role="img" aria-label={label} data-testid="usage-chart" />;
}
