import { describe, expect, it } from 'vitest'
import {
  DEFAULT_PREFS,
  LiveFeed,
  SeriesData,
  addChart,
  chartKey,
  loadPrefs,
  moveChart,
  removeChart,
  savePrefs,
  storageKey,
  valueOf,
  windowOf,
  type ChartSpec,
} from './charts'

function memoryStorage() {
  const map = new Map<string, string>()
  return {
    getItem: (k: string) => map.get(k) ?? null,
    setItem: (k: string, v: string) => void map.set(k, v),
    map,
  }
}

const a: ChartSpec = { kind: 'gpu', host: 'h1', gpu_uuid: 'G1', metric: 'utilization_gpu_percent' }
const b: ChartSpec = { kind: 'host', host: 'h1', metric: 'cpu_percent' }
const c: ChartSpec = { kind: 'gpu', host: 'h2', gpu_uuid: 'G2', metric: 'temperature_c' }

describe('the arrangement', () => {
  it('is kept per user', () => {
    const storage = memoryStorage()
    savePrefs(storage, 'alice', { ...DEFAULT_PREFS, charts: [a, b], range: '1d', layout: 'rows' })
    expect(storage.map.has('warden.dashboard.alice')).toBe(true)
    expect(storageKey('bob')).toBe('warden.dashboard.bob')
    const alice = loadPrefs(storage, 'alice')
    expect(alice.charts).toEqual([a, b])
    expect(alice.range).toBe('1d')
    expect(alice.layout).toBe('rows')
    expect(loadPrefs(storage, 'bob')).toEqual(DEFAULT_PREFS)
  })

  it('survives broken or foreign data', () => {
    const storage = memoryStorage()
    storage.setItem('warden.dashboard.x', '{not json')
    expect(loadPrefs(storage, 'x')).toEqual(DEFAULT_PREFS)
    storage.setItem(
      'warden.dashboard.x',
      JSON.stringify({ charts: [a, a, { kind: 'gpu', host: 'h' }, 3, b], range: '1y', layout: 'x', groupBy: 'status' }),
    )
    const prefs = loadPrefs(storage, 'x')
    expect(prefs.charts).toEqual([a, b])
    expect(prefs.range).toBe('1h')
    expect(prefs.layout).toBe('cards')
    expect(prefs.groupBy).toBe('status')
  })

  it('adds once, removes, and moves up and down', () => {
    let charts = addChart([], a)
    charts = addChart(charts, b)
    charts = addChart(charts, a)
    expect(charts).toEqual([a, b])
    charts = addChart(charts, c)
    expect(moveChart(charts, chartKey(c), -1)).toEqual([a, c, b])
    expect(moveChart(charts, chartKey(a), -1)).toEqual([a, b, c])
    expect(moveChart(charts, chartKey(a), 1)).toEqual([b, a, c])
    expect(moveChart(charts, chartKey(c), 1)).toEqual([a, b, c])
    expect(removeChart(charts, chartKey(b))).toEqual([a, c])
  })
})

describe('series', () => {
  const start = Date.parse('2026-01-05T10:00:00Z')

  it('asks for a window aligned to the step', () => {
    const w = windowOf('1h', start + 7_000)
    expect(w.end).toBe(start + 15_000)
    expect(w.end - w.start).toBe(3_600_000)
    expect(w.step_s).toBe(15)
  })

  it('puts buckets on a regular grid with null for the gaps', () => {
    const at = (s: number) => new Date(start + s * 1000).toISOString()
    const data = SeriesData.fromBuckets(
      [
        { start: at(0), min: 1, avg: 2, max: 3, count: 2 },
        { start: at(30), min: 5, avg: 6, max: 7, count: 1 },
      ],
      start,
      start + 60_000,
      15,
    )
    expect(data.xs).toEqual([0, 15, 30].map((s) => (start + s * 1000) / 1000))
    expect(data.avg).toEqual([2, null, 6])
    expect(data.latest).toBe(6)
  })

  it('adds live samples to the last bucket, or to new ones', () => {
    const data = SeriesData.fromBuckets([{ start: new Date(start).toISOString(), min: 10, avg: 10, max: 10, count: 1 }], start, start + 60_000, 15)
    expect(data.add(start + 5_000, 20)).toBe(true)
    expect(data.avg).toEqual([15])
    expect(data.add(start + 46_000, 40)).toBe(true) // bucket 3: a gap at 1 and 2
    expect(data.avg).toEqual([15, null, null, 40])
    expect(data.add(start + 1_000, 99)).toBe(false) // late
    expect(data.add(start + 47_000, null)).toBe(false)
    data.trim(start + 20_000)
    expect(data.xs[0]).toBe((start + 30_000) / 1000)
  })

  it('an empty answer starts from the first live sample', () => {
    const data = SeriesData.fromBuckets([], start, start + 60_000, 15)
    expect(data.latest).toBeNull()
    data.add(start + 16_000, 3)
    expect(data.xs).toEqual([(start + 15_000) / 1000])
  })
})

describe('the live feed', () => {
  it('hands a host sample to the charts of that host only', () => {
    const feed = new LiveFeed()
    const got: number[] = []
    const off = feed.on('h1', (s) => got.push(valueOf(a, s) ?? -1))
    feed.on('h2', () => got.push(-99))
    feed.emit({ host: 'h1', sampled_at: 'x', gpus: [{ uuid: 'G0', utilization_gpu_percent: 1 }, { uuid: 'G1', utilization_gpu_percent: 42 }] })
    off()
    feed.emit({ host: 'h1', sampled_at: 'x', gpus: [] })
    expect(got).toEqual([42])
    expect(valueOf(b, { host: 'h1', sampled_at: 'x', cpu_percent: 12 })).toBe(12)
    expect(valueOf(b, { host: 'h1', sampled_at: 'x', cpu_percent: null })).toBeNull()
  })
})
