// The live dashboard: the service's own /metrics read every 2 s, the last 15 minutes kept in the page and
// drawn as small line charts (per-backend crypto throughput and latency, requests/s by route and status
// class, requests in flight, the key cache's hit ratio, backend process pool restarts, the hwsim device's
// job ring and key slots). /metrics sums every worker of this server, but for hwsim, whose simulated
// device each worker has on its own: there it shows the answering worker's.
import { useEffect, useState } from "preact/hooks";
import { describe } from "../api";
import { parseMetrics, quantiles, rates, sumBy, type Sample } from "../metrics";

const INTERVAL_MS = 2000;
const WINDOW_POINTS = (15 * 60 * 1000) / INTERVAL_MS;
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
/** After every colour has been used once, the next series repeat them with a dash pattern, so no two of a
 * chart's series (the requests chart easily has more than eight) look the same in the chart or the legend. */
const DASHES = ["", "6 3", "2 2", "8 3 2 3"];

function stroke(index: number): { stroke: string; "stroke-dasharray": string } {
  const dash = DASHES[Math.floor(index / COLORS.length) % DASHES.length] ?? "";
  return { stroke: COLORS[index % COLORS.length] ?? "currentColor", "stroke-dasharray": dash };
}
const MIB = 1 << 20;

type Point = Record<string, number>;
interface Chart {
  id: string;
  title: string;
  unit: string;
}

const CHARTS: Chart[] = [
  { id: "throughput", title: "Crypto throughput by backend", unit: "MiB/s" },
  { id: "latency", title: "Crypto latency by backend (p50, p99)", unit: "ms" },
  { id: "requests", title: "Requests by route and status class", unit: "req/s" },
  { id: "inflight", title: "Requests in flight", unit: "requests" },
  { id: "cache", title: "Key cache hit ratio", unit: "%" },
  { id: "restarts", title: "Backend process pool restarts", unit: "per min" },
  { id: "hwsim-ring", title: "hwsim job ring occupancy, answering worker", unit: "jobs" },
  { id: "hwsim-slots", title: "hwsim key-slot hit ratio since start, answering worker", unit: "%" },
];

function prefixed(prefix: string, values: Map<string, number>, scale = 1): Point {
  const point: Point = {};
  for (const [key, value] of values) point[`${prefix}${key}`] = value * scale;
  return point;
}

/** One point of every chart from two readings `seconds` apart. */
function derive(before: Sample[], after: Sample[], seconds: number): Record<string, Point> {
  const backend = (labels: Record<string, string>): string => labels["backend"] ?? "?";
  const latency: Point = {};
  for (const [q, label] of [
    [0.5, "p50"],
    [0.99, "p99"],
  ] as const) {
    for (const [key, value] of quantiles(before, after, "keystream_crypto_seconds", q, backend)) {
      latency[`${key} ${label}`] = value * 1000;
    }
  }
  const cache = rates(before, after, "keystream_key_cache_requests_total", seconds, (l) => l["result"] ?? "?");
  const lookups = [...cache.values()].reduce((total, value) => total + value, 0);
  // hwsim's device belongs to one worker and /metrics shows the answering worker's: its totals since start,
  // not rates between two readings that may come from different workers.
  const slotHits = sumBy(after, "keystream_hwsim_key_slot_hits_total", () => "hits").get("hits") ?? 0;
  const slotMisses = sumBy(after, "keystream_hwsim_key_slot_misses_total", () => "misses").get("misses") ?? 0;
  return {
    throughput: prefixed("", rates(before, after, "keystream_crypto_bytes_total", seconds, backend), 1 / MIB),
    latency,
    requests: prefixed(
      "",
      rates(before, after, "keystream_http_request_duration_seconds_count", seconds, (labels) =>
        `${labels["method"] ?? ""} ${labels["route"] ?? ""} ${(labels["status"] ?? "?").charAt(0)}xx`.trim(),
      ),
    ),
    inflight: prefixed("", sumBy(after, "keystream_inflight_requests", () => "in flight")),
    cache: lookups > 0 ? { hits: (100 * (cache.get("hit") ?? 0)) / lookups } : {},
    restarts: prefixed("", rates(before, after, "keystream_backend_pool_restarts_total", seconds, backend), 60),
    "hwsim-ring": {
      ...prefixed("", sumBy(after, "keystream_hwsim_ring_occupancy", () => "now")),
      ...prefixed("", sumBy(after, "keystream_hwsim_ring_occupancy_mean", () => "mean since start")),
    },
    "hwsim-slots": slotHits + slotMisses > 0 ? { hits: (100 * slotHits) / (slotHits + slotMisses) } : {},
  };
}

function LineChart({ chart, points }: { chart: Chart; points: Point[] }) {
  const names = [...new Set(points.flatMap((point) => Object.keys(point)))].sort();
  const top = Math.max(1e-9, ...points.flatMap((point) => Object.values(point)));
  const width = 560;
  const height = 160;
  const x = (index: number): number => 40 + ((width - 50) * index) / Math.max(1, WINDOW_POINTS - 1);
  const y = (value: number): number => height - 20 - ((height - 30) * value) / top;
  const offset = WINDOW_POINTS - points.length;
  const latest = points[points.length - 1] ?? {};
  return (
    <figure class="chart" id={`chart-${chart.id}`}>
      <figcaption>
        {chart.title} ({chart.unit})
      </figcaption>
      <svg viewBox={`0 0 ${width} ${height}`} width={width} height={height} role="img" aria-label={chart.title}>
        <line x1="40" y1={height - 20} x2={width - 10} y2={height - 20} stroke="currentColor" />
        <line x1="40" y1="10" x2="40" y2={height - 20} stroke="currentColor" />
        <text x="36" y="14" text-anchor="end" font-size="10" fill="currentColor">
          {top.toPrecision(3)}
        </text>
        <text x="36" y={height - 20} text-anchor="end" font-size="10" fill="currentColor">
          0
        </text>
        <text x="40" y={height - 6} font-size="10" fill="currentColor">
          −15 min
        </text>
        <text x={width - 10} y={height - 6} text-anchor="end" font-size="10" fill="currentColor">
          now
        </text>
        {names.map((name, index) => (
          <polyline
            fill="none"
            {...stroke(index)}
            stroke-width="1.5"
            points={points
              .map((point, at) => (point[name] === undefined ? "" : `${x(offset + at)},${y(point[name] ?? 0)}`))
              .filter((pair) => pair !== "")
              .join(" ")}
          />
        ))}
      </svg>
      <table class="legend">
        <tbody>
          {names.map((name, index) => (
            <tr data-series={name}>
              <td>
                <svg width="24" height="12" aria-hidden="true">
                  <line x1="0" y1="6" x2="24" y2="6" stroke-width="3" {...stroke(index)} />
                </svg>
              </td>
              <td>{name}</td>
              <td class="value">{latest[name] === undefined ? "–" : (latest[name] ?? 0).toPrecision(3)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </figure>
  );
}

export function DashboardView() {
  const [history, setHistory] = useState<Record<string, Point[]>>({});
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let previous: { samples: Sample[]; at: number } | null = null;
    let stopped = false;
    const read = async (): Promise<void> => {
      try {
        const response = await fetch("/metrics", { credentials: "omit", cache: "no-store" });
        if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
        const samples = parseMetrics(await response.text());
        const at = performance.now();
        if (previous !== null && !stopped) {
          const points = derive(previous.samples, samples, (at - previous.at) / 1000);
          setHistory((old) => {
            const next: Record<string, Point[]> = {};
            for (const chart of CHARTS) {
              next[chart.id] = [...(old[chart.id] ?? []), points[chart.id] ?? {}].slice(-WINDOW_POINTS);
            }
            return next;
          });
        }
        previous = { samples, at };
        setError(null);
      } catch (caught) {
        setError(describe(caught));
      }
    };
    void read();
    const timer = window.setInterval(() => void read(), INTERVAL_MS);
    return () => {
      stopped = true;
      window.clearInterval(timer);
    };
  }, []);
  return (
    <section>
      <h1>Dashboard</h1>
      <p class="hint">This server's /metrics (every worker), read every 2 s; the last 15 minutes.</p>
      {error !== null && <p role="alert">{error}</p>}
      <div class="charts">
        {CHARTS.map((chart) => (
          <LineChart chart={chart} points={history[chart.id] ?? []} />
        ))}
      </div>
    </section>
  );
}
