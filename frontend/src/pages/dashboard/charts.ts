// The charts a person watches, kept in localStorage per user, and the series arithmetic
// behind them (buckets from the metrics API with the live samples added). No Vue here.
import type { Schemas } from '../../api/client'
import { celsius, mib, percent, watts, DASH } from '../../format'

export type RangeKey = '1h' | '1d' | '1w'

export interface RangeInfo {
  label: string
  seconds: number
  /** seconds per bucket asked for */
  step_s: number
  /** live samples are drawn at most this often */
  redraw_ms: number
  /** the whole series is asked for again this often */
  refetch_ms: number
}

export const RANGES: Record<RangeKey, RangeInfo> = {
  '1h': { label: '1 h', seconds: 3600, step_s: 15, redraw_ms: 3_000, refetch_ms: 120_000 },
  '1d': { label: '1 day', seconds: 86_400, step_s: 300, redraw_ms: 15_000, refetch_ms: 600_000 },
  '1w': { label: '1 week', seconds: 7 * 86_400, step_s: 1800, redraw_ms: 60_000, refetch_ms: 1_800_000 },
}

export interface ChartSpec {
  /** "gpu" (with gpu_uuid) or "host" */
  kind: 'gpu' | 'host'
  host: string
  gpu_uuid?: string
  metric: string
}

export interface Prefs {
  charts: ChartSpec[]
  range: RangeKey
  layout: 'cards' | 'rows'
  groupBy: 'prefix' | 'status' | 'model' | 'none'
}

export const DEFAULT_PREFS: Prefs = { charts: [], range: '1h', layout: 'cards', groupBy: 'prefix' }

export interface MetricInfo {
  label: string
  format: (v: number | null) => string
  /** fixed y range for percentages */
  max?: number
}

const plain = (v: number | null) => (v == null ? DASH : String(Math.round(v * 100) / 100))
const mhz = (v: number | null) => (v == null ? DASH : `${Math.round(v)} MHz`)

export const GPU_METRICS: Record<string, MetricInfo> = {
  utilization_gpu_percent: { label: 'Utilisation', format: percent, max: 100 },
  utilization_memory_percent: { label: 'Memory bandwidth', format: percent, max: 100 },
  memory_used_mib: { label: 'Memory used', format: mib },
  temperature_c: { label: 'Temperature', format: celsius },
  power_draw_w: { label: 'Power', format: watts },
  fan_speed_percent: { label: 'Fan', format: percent, max: 100 },
  clock_sm_mhz: { label: 'SM clock', format: mhz },
}

export const HOST_METRICS: Record<string, MetricInfo> = {
  cpu_percent: { label: 'CPU', format: percent, max: 100 },
  load_1m: { label: 'Load (1 min)', format: plain },
  memory_used_mib: { label: 'Memory used', format: mib },
}

export function metricInfo(spec: ChartSpec): MetricInfo {
  const table = spec.kind === 'gpu' ? GPU_METRICS : HOST_METRICS
  return table[spec.metric] ?? { label: spec.metric, format: plain }
}

export function chartKey(spec: ChartSpec): string {
  return `${spec.kind}|${spec.host}|${spec.gpu_uuid ?? ''}|${spec.metric}`
}

export function storageKey(username: string | undefined | null): string {
  return `warden.dashboard.${username ?? 'anonymous'}`
}

function validSpec(value: unknown): value is ChartSpec {
  if (!value || typeof value !== 'object') return false
  const v = value as Record<string, unknown>
  if (v.kind !== 'gpu' && v.kind !== 'host') return false
  if (typeof v.host !== 'string' || !v.host || typeof v.metric !== 'string' || !v.metric) return false
  if (v.kind === 'gpu' && (typeof v.gpu_uuid !== 'string' || !v.gpu_uuid)) return false
  return true
}

/** The kept preferences; the defaults for anything missing or broken. */
export function loadPrefs(storage: Pick<Storage, 'getItem'>, username: string | undefined | null): Prefs {
  let raw: unknown
  try {
    raw = JSON.parse(storage.getItem(storageKey(username)) ?? 'null')
  } catch {
    raw = null
  }
  if (!raw || typeof raw !== 'object') return { ...DEFAULT_PREFS, charts: [] }
  const r = raw as Record<string, unknown>
  const seen = new Set<string>()
  const charts: ChartSpec[] = []
  for (const c of Array.isArray(r.charts) ? r.charts : []) {
    if (!validSpec(c)) continue
    const spec: ChartSpec = { kind: c.kind, host: c.host, metric: c.metric }
    if (c.kind === 'gpu') spec.gpu_uuid = c.gpu_uuid
    const key = chartKey(spec)
    if (seen.has(key)) continue
    seen.add(key)
    charts.push(spec)
  }
  return {
    charts,
    range: typeof r.range === 'string' && r.range in RANGES ? (r.range as RangeKey) : DEFAULT_PREFS.range,
    layout: r.layout === 'rows' ? 'rows' : 'cards',
    groupBy: ['prefix', 'status', 'model', 'none'].includes(r.groupBy as string)
      ? (r.groupBy as Prefs['groupBy'])
      : DEFAULT_PREFS.groupBy,
  }
}

export function savePrefs(storage: Pick<Storage, 'setItem'>, username: string | undefined | null, prefs: Prefs): void {
  try {
    storage.setItem(storageKey(username), JSON.stringify(prefs))
  } catch {
    // storage full or forbidden: the arrangement lasts this visit only
  }
}

export function addChart(charts: readonly ChartSpec[], spec: ChartSpec): ChartSpec[] {
  const key = chartKey(spec)
  return charts.some((c) => chartKey(c) === key) ? [...charts] : [...charts, spec]
}

export function removeChart(charts: readonly ChartSpec[], key: string): ChartSpec[] {
  return charts.filter((c) => chartKey(c) !== key)
}

/** The chart moved by `delta` places (-1 up, +1 down); unchanged at the ends. */
export function moveChart(charts: readonly ChartSpec[], key: string, delta: number): ChartSpec[] {
  const from = charts.findIndex((c) => chartKey(c) === key)
  const to = from + delta
  if (from < 0 || to < 0 || to >= charts.length) return [...charts]
  const out = [...charts]
  const [item] = out.splice(from, 1)
  out.splice(to, 0, item)
  return out
}

// --- series ---------------------------------------------------------------------------------

/** The window asked for: `seconds` back from now, its start aligned to the step. */
export function windowOf(range: RangeKey, now: number): { start: number; end: number; step_s: number } {
  const { seconds, step_s } = RANGES[range]
  const stepMs = step_s * 1000
  const end = Math.ceil(now / stepMs) * stepMs
  return { start: end - seconds * 1000, end, step_s }
}

/**
 * Column data for uPlot: x in seconds, the bucket averages, with null where a bucket has no
 * data (so the line breaks at a gap instead of pretending).
 */
export class SeriesData {
  xs: number[] = []
  avg: (number | null)[] = []
  private sum = 0
  private count = 0

  constructor(
    readonly startMs: number,
    readonly stepS: number,
  ) {}

  static fromBuckets(buckets: readonly Schemas['SeriesBucket'][], startMs: number, endMs: number, stepS: number): SeriesData {
    const data = new SeriesData(startMs, stepS)
    const stepMs = stepS * 1000
    const byIndex = new Map<number, Schemas['SeriesBucket']>()
    for (const b of buckets) byIndex.set(Math.round((Date.parse(b.start) - startMs) / stepMs), b)
    const n = Math.floor((endMs - startMs) / stepMs)
    let lastWithData = -1
    for (const i of byIndex.keys()) if (i < n) lastWithData = Math.max(lastWithData, i)
    for (let i = 0; i <= lastWithData; i++) {
      const b = byIndex.get(i)
      data.xs.push((startMs + i * stepMs) / 1000)
      data.avg.push(b && b.count > 0 ? b.avg : null)
    }
    if (lastWithData >= 0) {
      const b = byIndex.get(lastWithData)!
      data.sum = (b.avg ?? 0) * b.count
      data.count = b.avg == null ? 0 : b.count
    }
    return data
  }

  /** A live sample: into its bucket (the last one, or a new one, with nulls for a gap). */
  add(atMs: number, value: number | null): boolean {
    if (value == null || !Number.isFinite(value)) return false
    const stepMs = this.stepS * 1000
    const index = Math.floor((atMs - this.startMs) / stepMs)
    if (index < 0) return false
    const x = (this.startMs + index * stepMs) / 1000
    const last = this.xs.length ? this.xs[this.xs.length - 1] : null
    if (last !== null && x < last) return false // late sample for an older bucket: ignore
    if (last !== null && x === last) {
      this.sum += value
      this.count += 1
      this.avg[this.avg.length - 1] = this.sum / this.count
      return true
    }
    if (last !== null) {
      for (let t = last + this.stepS; t < x; t += this.stepS) {
        this.xs.push(t)
        this.avg.push(null)
      }
    }
    this.xs.push(x)
    this.avg.push(value)
    this.sum = value
    this.count = 1
    return true
  }

  /** Drop what fell out of the window's left edge. */
  trim(windowStartMs: number): void {
    const cut = windowStartMs / 1000
    let i = 0
    while (i < this.xs.length && this.xs[i] < cut) i++
    if (i) {
      this.xs.splice(0, i)
      this.avg.splice(0, i)
    }
  }

  get latest(): number | null {
    for (let i = this.avg.length - 1; i >= 0; i--) if (this.avg[i] != null) return this.avg[i]
    return null
  }
}

// --- live samples to the charts -------------------------------------------------------------

export interface LiveSample {
  host: string
  sampled_at: string
  gpus?: readonly { uuid: string; [figure: string]: unknown }[]
  [figure: string]: unknown
}

/** host.sampled events, handed to the charts that watch that host (a Map lookup per event). */
export class LiveFeed {
  private subs = new Map<string, Set<(sample: LiveSample) => void>>()

  on(host: string, fn: (sample: LiveSample) => void): () => void {
    let set = this.subs.get(host)
    if (!set) this.subs.set(host, (set = new Set()))
    set.add(fn)
    return () => {
      set!.delete(fn)
      if (!set!.size) this.subs.delete(host)
    }
  }

  emit(sample: LiveSample): void {
    const set = this.subs.get(sample.host)
    if (set) for (const fn of set) fn(sample)
  }
}

/** The figure a chart watches, from one host.sampled payload (null when not in it). */
export function valueOf(spec: ChartSpec, sample: LiveSample): number | null {
  let source: Record<string, unknown> | undefined = sample
  if (spec.kind === 'gpu') source = sample.gpus?.find((g) => g.uuid === spec.gpu_uuid)
  const v = source?.[spec.metric]
  return typeof v === 'number' && Number.isFinite(v) ? v : null
}

/** Something a chart can be of, for the "Chart of" choice. */
export interface Target {
  value: string
  label: string
  kind: 'gpu' | 'host'
  host: string
  gpu_uuid?: string
}
