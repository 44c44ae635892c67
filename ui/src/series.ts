// The dashboard's charts (charts.json: each one a Grafana panel's queries, and how the same series come from
// this server's /metrics) and the two ways of reading them: two readings of /metrics, or Prometheus' HTTP API.
import spec from "./charts.json";
import { parseMetrics, quantiles, rates, type Sample } from "./metrics";

export type Labels = Record<string, string>;

/** How one query's series come from two readings of /metrics (see charts.json). */
export interface Local {
  kind: "rate" | "quantile" | "value" | "rate_share" | "age" | "total_share";
  metric: string;
  by?: string[];
  q?: number;
  times?: number;
  label?: string;
  value?: string;
  others?: string[];
}

export interface Query {
  expr: string;
  legend: string;
  local?: Local;
}

export interface Chart {
  id: string;
  title: string;
  unit: string;
  /** Multiplies every value (bytes to MiB, seconds to ms, a ratio to %). */
  scale: number;
  /** "sum": a Prometheus series adds up every replica; "instance": one series per replica. */
  across: "sum" | "instance";
  grafana: string;
  queries: Query[];
}

export const CHARTS = spec.charts as Chart[];
export const REPLICAS_QUERY = (spec.replicas.queries[0] as Query).expr;

/** Series name to [Unix seconds, value] points, oldest first. */
export type SeriesSet = Record<string, [number, number][]>;

/** A legend template (`{{backend}} p99`) filled with a series' labels, as Grafana's legendFormat is. */
export function legendOf(template: string, labels: Labels): string {
  return template.replace(/\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}/g, (_, name: string) => labels[name] ?? "").trim();
}

/** A Grafana panel's expression as the console sends it: every backend, and a 1 m rate window. */
export function concrete(expr: string): string {
  return expr.replaceAll("$backend", ".*").replaceAll("$__rate_interval", "1m");
}

/** One reading of /metrics: its samples (each labelled with this server as `instance`), when it was taken
 * (the browser's clock) and the server's clock then (its Date header, else the browser's). */
export interface Reading {
  samples: Sample[];
  at: number;
  serverNow: number;
}

export function reading(text: string, instance: string, serverDate: string | null): Reading {
  const samples = parseMetrics(text).map((sample) => ({ ...sample, labels: { ...sample.labels, instance } }));
  const at = Date.now() / 1000;
  const parsed = serverDate === null ? Number.NaN : Date.parse(serverDate) / 1000;
  return { samples, at, serverNow: Number.isNaN(parsed) ? at : parsed };
}

function groupBy(by: string[] = []): (labels: Labels) => string {
  return (labels) => JSON.stringify(by.map((name) => labels[name] ?? ""));
}

function labelsOf(by: string[] = [], key: string): Labels {
  const values = JSON.parse(key) as string[];
  return Object.fromEntries(by.map((name, index) => [name, values[index] ?? ""]));
}

function sumOf(samples: Sample[], names: string[], group: (labels: Labels) => string): Map<string, number> {
  const sums = new Map<string, number>();
  for (const sample of samples) {
    if (!names.includes(sample.name)) continue;
    const key = group(sample.labels);
    sums.set(key, (sums.get(key) ?? 0) + sample.value);
  }
  return sums;
}

/** A query's series (labels and value) from two readings, as its Prometheus expression would give them. */
export function localSeries(local: Local, before: Reading, after: Reading): [Labels, number][] {
  const seconds = Math.max(after.at - before.at, 1e-3);
  const group = groupBy(local.by);
  let values: Map<string, number>;
  switch (local.kind) {
    case "rate":
      values = rates(before.samples, after.samples, local.metric, seconds, group);
      for (const [key, value] of values) values.set(key, value * (local.times ?? 1));
      break;
    case "quantile":
      values = quantiles(before.samples, after.samples, local.metric, local.q ?? 0.5, group);
      break;
    case "value":
      values = sumOf(after.samples, [local.metric], group);
      break;
    case "age":
      // A timestamp gauge read against the server's clock, as Prometheus' time() - metric is.
      values = new Map();
      for (const [key, at] of sumOf(after.samples, [local.metric], group)) {
        values.set(key, Math.max(0, after.serverNow - at));
      }
      break;
    case "rate_share": {
      const byLabel = (labels: Labels): string => (labels[local.label ?? ""] === local.value ? "share" : "rest");
      const parts = rates(before.samples, after.samples, local.metric, seconds, byLabel);
      const total = (parts.get("share") ?? 0) + (parts.get("rest") ?? 0);
      values = total > 0 ? new Map([[group({}), (parts.get("share") ?? 0) / total]]) : new Map();
      break;
    }
    case "total_share": {
      const part = sumOf(after.samples, [local.metric], group);
      const whole = sumOf(after.samples, [local.metric, ...(local.others ?? [])], group);
      values = new Map();
      for (const [key, total] of whole) if (total > 0) values.set(key, (part.get(key) ?? 0) / total);
      break;
    }
  }
  return [...values].map(([key, value]) => [labelsOf(local.by, key), value]);
}

/** An answer of Prometheus' HTTP API that was not a success, in its own words. */
export class PrometheusError extends Error {}

interface PrometheusAnswer<T> {
  status: "success" | "error";
  error?: string;
  data?: { resultType: string; result: T };
}

async function ask<T>(base: string, path: string, params: Record<string, string>): Promise<T> {
  const url = `${base}${path}?${new URLSearchParams(params).toString()}`;
  let response: Response;
  try {
    response = await fetch(url, { credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer" });
  } catch {
    throw new PrometheusError(`cannot reach Prometheus at ${base}`);
  }
  let body: PrometheusAnswer<T>;
  try {
    body = (await response.json()) as PrometheusAnswer<T>;
  } catch {
    throw new PrometheusError(`Prometheus at ${base} answered ${response.status} without its JSON`);
  }
  if (body.status !== "success" || body.data === undefined) {
    throw new PrometheusError(`Prometheus at ${base}: ${body.error ?? `HTTP ${response.status}`}`);
  }
  return body.data.result;
}

/** Every series of `expr` over [start, end] every `step` seconds (query_range), named by `legend`. */
export async function rangeSeries(
  base: string,
  query: Query,
  start: number,
  end: number,
  step: number,
): Promise<[string, [number, number][]][]> {
  const result = await ask<{ metric: Labels; values: [number, string][] }[]>(base, "/api/v1/query_range", {
    query: concrete(query.expr),
    start: start.toFixed(3),
    end: end.toFixed(3),
    step: String(step),
  });
  return result.map((series) => [
    legendOf(query.legend, series.metric),
    series.values.map(([at, value]) => [at, Number(value)] as [number, number]).filter(([, v]) => Number.isFinite(v)),
  ]);
}

/** The replicas Prometheus scrapes right now (the Grafana dashboard's "Replicas reporting"). */
export async function replicaCount(base: string): Promise<number> {
  const result = await ask<{ value: [number, string] }[]>(base, "/api/v1/query", { query: REPLICAS_QUERY });
  return result.length === 0 ? 0 : Number(result[0]?.value[1] ?? 0);
}
