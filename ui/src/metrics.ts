// A small reader of the Prometheus text format (/metrics) and what the dashboard derives from two readings:
// rates of counters and quantiles of histograms over the interval between them.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Every sample of a text exposition; comments and malformed lines are skipped. */
export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const match = LINE.exec(line);
    if (match === null) continue;
    const labels: Record<string, string> = {};
    for (const label of (match[2] ?? "").matchAll(LABEL)) {
      labels[label[1] ?? ""] = (label[2] ?? "").replace(/\\(.)/g, (_, escaped: string) =>
        escaped === "n" ? "\n" : escaped,
      );
    }
    const value = Number(match[3]);
    if (!Number.isNaN(value)) samples.push({ name: match[1] ?? "", labels, value });
  }
  return samples;
}

/** The sum of `name`'s samples grouped by what `group` makes of their labels. */
export function sumBy(samples: Sample[], name: string, group: (labels: Record<string, string>) => string) {
  const sums = new Map<string, number>();
  for (const sample of samples) {
    if (sample.name !== name) continue;
    const key = group(sample.labels);
    sums.set(key, (sums.get(key) ?? 0) + sample.value);
  }
  return sums;
}

/** Per group, the increase of a counter between two readings divided by the seconds between them. */
export function rates(
  before: Sample[],
  after: Sample[],
  name: string,
  seconds: number,
  group: (labels: Record<string, string>) => string,
): Map<string, number> {
  const start = sumBy(before, name, group);
  const result = new Map<string, number>();
  for (const [key, total] of sumBy(after, name, group)) {
    // A restarted worker resets its counters: a negative increase counts as the new total.
    const increase = total - (start.get(key) ?? 0);
    result.set(key, (increase >= 0 ? increase : total) / seconds);
  }
  return result;
}

/** Per group, the q-quantile (0..1) of a histogram's observations between two readings, interpolated
 * linearly inside the bucket as Prometheus' histogram_quantile does; groups with no observation are left out. */
export function quantiles(
  before: Sample[],
  after: Sample[],
  name: string,
  q: number,
  group: (labels: Record<string, string>) => string,
): Map<string, number> {
  const bucket = `${name}_bucket`;
  const byLe = (labels: Record<string, string>): string => `${group(labels)}\u0000${labels["le"] ?? ""}`;
  const start = sumBy(before, bucket, byLe);
  const counts = new Map<string, [number, number][]>();
  for (const [key, total] of sumBy(after, bucket, byLe)) {
    const [groupKey = "", le = ""] = key.split("\u0000");
    const list = counts.get(groupKey) ?? [];
    list.push([le === "+Inf" ? Infinity : Number(le), Math.max(0, total - (start.get(key) ?? 0))]);
    counts.set(groupKey, list);
  }
  const result = new Map<string, number>();
  for (const [groupKey, list] of counts) {
    list.sort((a, b) => a[0] - b[0]);
    const observed = list[list.length - 1]?.[1] ?? 0;
    if (observed === 0) continue;
    const rank = q * observed;
    let lower = 0;
    let below = 0;
    for (const [upper, cumulative] of list) {
      if (cumulative >= rank) {
        if (upper === Infinity) {
          result.set(groupKey, lower);
        } else {
          const inBucket = cumulative - below;
          result.set(groupKey, inBucket === 0 ? upper : lower + ((upper - lower) * (rank - below)) / inBucket);
        }
        break;
      }
      lower = upper;
      below = cumulative;
    }
  }
  return result;
}
