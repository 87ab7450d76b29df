/** A growable list of latency samples (milliseconds, full hrtime precision). */
export class Samples {
  private values = new Float64Array(1 << 16);
  private size = 0;

  push(value: number): void {
    if (this.size === this.values.length) {
      const grown = new Float64Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.size++] = value;
  }

  get count(): number {
    return this.size;
  }

  summary(): LatencySummary {
    const sorted = this.values.slice(0, this.size).sort();
    let sum = 0;
    for (const v of sorted) sum += v;
    return {
      mean: round(this.size ? sum / this.size : 0),
      p50: round(percentile(sorted, 50)),
      p90: round(percentile(sorted, 90)),
      p99: round(percentile(sorted, 99)),
      p999: round(percentile(sorted, 99.9)),
      max: round(sorted.length ? sorted[sorted.length - 1]! : 0),
    };
  }
}

export interface LatencySummary {
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
}

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

export const round = (value: number, digits = 2): number => {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
};
