// The live dashboard: every 2 s, the last 15 minutes of the charts of charts.json (the Grafana dashboard's
// panels of the same names). Without a configured Prometheus it reads this server's own /metrics (every
// worker summed; hwsim's figures are the answering worker's device) and keeps the history in the page.
// With KEYSTREAM_UI_PROMETHEUS_URL (the page learns it from /ui/config.json) it asks that Prometheus'
// HTTP API for every replica: rates, latencies and ratios summed over the replicas (the whole service's
// load, with the number of replicas said), and per-replica series where one replica's trouble would hide
// in a sum (requests in flight, batch buffer, change-log lag, pool restarts, the hwsim device).
import { useEffect, useState } from "preact/hooks";
import { describe } from "../api";
import {
  CHARTS,
  type Chart,
  type Reading,
  type SeriesSet,
  legendOf,
  localSeries,
  rangeSeries,
  reading,
  replicaCount,
} from "../series";

const INTERVAL_MS = 2000;
const STEP_SECONDS = INTERVAL_MS / 1000;
const WINDOW_SECONDS = 15 * 60;
/** After the first full window, each Prometheus read asks again for this much: the last minute's rates may
 * still change as scrapes arrive. */
const REFRESH_SECONDS = 120;
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
/** After every colour has been used once, the next series repeat them with a dash pattern, so no two of a
 * chart's series (the requests chart easily has more than eight) look the same in the chart or the legend. */
const DASHES = ["", "6 3", "2 2", "8 3 2 3"];

function stroke(index: number): { stroke: string; "stroke-dasharray": string } {
  const dash = DASHES[Math.floor(index / COLORS.length) % DASHES.length] ?? "";
  return { stroke: COLORS[index % COLORS.length] ?? "currentColor", "stroke-dasharray": dash };
}

type History = Record<string, SeriesSet>;

/** `series` with `fresh` points merged in: a series' points from `from` on are replaced, and every point
 * older than the window before `now` is dropped. */
function merged(series: SeriesSet, fresh: [string, [number, number][]][], from: number, now: number): SeriesSet {
  const next: SeriesSet = {};
  const oldest = now - WINDOW_SECONDS;
  for (const [name, points] of Object.entries(series)) {
    const kept = points.filter(([at]) => at >= oldest && at < from);
    if (kept.length > 0) next[name] = kept;
  }
  for (const [name, points] of fresh) {
    next[name] = [...(next[name] ?? []), ...points.filter(([at]) => at >= oldest)];
  }
  return next;
}

function LineChart({ chart, series, now, caption }: { chart: Chart; series: SeriesSet; now: number; caption: string }) {
  const names = Object.keys(series).sort();
  const top = Math.max(1e-9, ...names.flatMap((name) => (series[name] ?? []).map(([, value]) => value)));
  const width = 560;
  const height = 160;
  const x = (at: number): number => 40 + ((width - 50) * (at - (now - WINDOW_SECONDS))) / WINDOW_SECONDS;
  const y = (value: number): number => height - 20 - ((height - 30) * value) / top;
  return (
    <figure class="chart" id={`chart-${chart.id}`}>
      <figcaption>
        {chart.title} ({chart.unit}){caption}
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
            points={(series[name] ?? []).map(([at, value]) => `${x(at).toFixed(1)},${y(value).toFixed(1)}`).join(" ")}
          />
        ))}
      </svg>
      <table class="legend">
        <tbody>
          {names.map((name, index) => {
            const points = series[name] ?? [];
            const latest = points[points.length - 1];
            return (
              <tr data-series={name}>
                <td>
                  <svg width="24" height="12" aria-hidden="true">
                    <line x1="0" y1="6" x2="24" y2="6" stroke-width="3" {...stroke(index)} />
                  </svg>
                </td>
                <td>{name}</td>
                <td class="value">{latest === undefined ? "–" : latest[1].toPrecision(3)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </figure>
  );
}

/** Where the dashboard reads: `null` until /ui/config.json answers, then a Prometheus URL or "" for /metrics. */
function usePrometheusUrl(): [string | null, string | null] {
  const [url, setUrl] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    fetch("config.json", { credentials: "omit", cache: "no-store" })
      .then(async (response) => {
        if (!response.ok) throw new Error(`config.json answered ${response.status}`);
        const config = (await response.json()) as { prometheus_url?: unknown };
        setUrl(typeof config.prometheus_url === "string" ? config.prometheus_url : "");
      })
      .catch((caught: unknown) => setError(describe(caught)));
  }, []);
  return [url, error];
}

export function DashboardView() {
  const [prometheus, configError] = usePrometheusUrl();
  const [history, setHistory] = useState<History>({});
  const [now, setNow] = useState(Date.now() / 1000);
  const [replicas, setReplicas] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    if (prometheus === null) return undefined;
    let stopped = false;
    let previous: Reading | null = null;
    let filled = false;
    const fromMetrics = async (): Promise<void> => {
      const response = await fetch("/metrics", { credentials: "omit", cache: "no-store" });
      if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
      const current = reading(await response.text(), window.location.host, response.headers.get("date"));
      const before = previous;
      previous = current;
      if (before === null || stopped) return;
      setNow(current.at);
      setHistory((old) => {
        const next: History = {};
        for (const chart of CHARTS) {
          const fresh: [string, [number, number][]][] = [];
          for (const query of chart.queries) {
            if (query.local === undefined) continue;
            for (const [labels, value] of localSeries(query.local, before, current)) {
              fresh.push([legendOf(query.legend, labels), [[current.at, value * chart.scale]]]);
            }
          }
          next[chart.id] = merged(old[chart.id] ?? {}, fresh, current.at, current.at);
        }
        return next;
      });
    };
    const fromPrometheus = async (): Promise<void> => {
      const end = Math.floor(Date.now() / 1000 / STEP_SECONDS) * STEP_SECONDS;
      const start = end - (filled ? REFRESH_SECONDS : WINDOW_SECONDS);
      const answers = await Promise.all(
        CHARTS.map(async (chart) => {
          const fresh = (
            await Promise.all(chart.queries.map((query) => rangeSeries(prometheus, query, start, end, STEP_SECONDS)))
          ).flat();
          return [chart, fresh] as const;
        }),
      );
      const count = await replicaCount(prometheus);
      if (stopped) return;
      filled = true;
      setNow(end);
      setReplicas(count);
      setHistory((old) => {
        const next: History = {};
        for (const [chart, fresh] of answers) {
          const scaled = fresh.map(
            ([name, points]) => [name, points.map(([at, v]) => [at, v * chart.scale])] as [string, [number, number][]],
          );
          next[chart.id] = merged(old[chart.id] ?? {}, scaled, start, end);
        }
        return next;
      });
    };
    let busy = false;
    const read = async (): Promise<void> => {
      if (busy) return; // a slow Prometheus: skip a beat rather than pile requests up
      busy = true;
      try {
        await (prometheus === "" ? fromMetrics() : fromPrometheus());
        if (!stopped) setError(null);
      } catch (caught) {
        if (!stopped) setError(describe(caught));
      } finally {
        busy = false;
      }
    };
    void read();
    const timer = window.setInterval(() => void read(), INTERVAL_MS);
    return () => {
      stopped = true;
      window.clearInterval(timer);
    };
  }, [prometheus]);
  const replicaText = replicas === null ? "…" : `${replicas} replica${replicas === 1 ? "" : "s"}`;
  const caption = (chart: Chart): string =>
    prometheus ? (chart.across === "sum" ? `, sum of ${replicaText}` : ", per replica") : "";
  return (
    <section>
      <h1>Dashboard</h1>
      {prometheus ? (
        <p class="hint" id="dashboard-source">
          Prometheus at {prometheus}: <span id="replicas">{replicaText}</span> reporting, read every 2 s; the last
          15 minutes.
        </p>
      ) : (
        <p class="hint" id="dashboard-source">
          This server's /metrics (every worker), read every 2 s; the last 15 minutes.
        </p>
      )}
      {configError !== null && <p role="alert">{configError}</p>}
      {error !== null && <p role="alert">{error}</p>}
      <div class="charts">
        {CHARTS.map((chart) => (
          <LineChart chart={chart} series={history[chart.id] ?? {}} now={now} caption={caption(chart)} />
        ))}
      </div>
    </section>
  );
}
