import { describe, expect, it } from 'vitest'
import { bars, csvName, hours, largestFirst, periodProblem, presetPeriod, share, type UsageRow } from './reports'

const row = (key: string, r: Partial<UsageRow>): UsageRow => ({
  key,
  reserved_gpu_hours: 0,
  used_gpu_hours: 0,
  idle_gpu_hours: 0,
  idle_share: null,
  unreserved_gpu_hours: 0,
  violations_caused: 0,
  violations_suffered: 0,
  jobs: 0,
  ...r,
})

describe('presetPeriod', () => {
  const now = new Date('2026-11-24T21:00:00Z')
  it('counts days up to and including today (UTC)', () => {
    expect(presetPeriod('7d', now)).toEqual({ start: '2026-11-18', end: '2026-11-25' })
    expect(presetPeriod('30d', now)).toEqual({ start: '2026-10-26', end: '2026-11-25' })
    expect(presetPeriod('year', now)).toEqual({ start: '2025-11-25', end: '2026-11-25' })
  })
  it('knows months, across a year', () => {
    expect(presetPeriod('this-month', now)).toEqual({ start: '2026-11-01', end: '2026-11-25' })
    expect(presetPeriod('last-month', now)).toEqual({ start: '2026-10-01', end: '2026-11-01' })
    expect(presetPeriod('last-month', new Date('2026-01-10T00:00:00Z'))).toEqual({ start: '2025-12-01', end: '2026-01-01' })
  })
})

describe('periodProblem', () => {
  it('accepts a period of up to 366 days', () => {
    expect(periodProblem('2026-11-01', '2026-12-01')).toBeNull()
    expect(periodProblem('2025-11-30', '2026-12-01')).toBeNull()
  })
  it('says what is wrong', () => {
    expect(periodProblem('', '2026-12-01')).toMatch(/start and an end/)
    expect(periodProblem('2026-12-01', '2026-12-01')).toMatch(/after the start/)
    expect(periodProblem('2025-11-01', '2026-12-01')).toMatch(/366 days/)
    expect(periodProblem('2026-13-01', '2026-12-01')).toMatch(/YYYY-MM-DD/)
  })
})

describe('bars', () => {
  it('splits reserved time into used, idle and unmeasured, scaled to the widest row', () => {
    const [a, b] = bars([
      row('alice', { reserved_gpu_hours: 8, used_gpu_hours: 4, idle_gpu_hours: 2, unreserved_gpu_hours: 2 }),
      row('bob', { reserved_gpu_hours: 5 }),
    ])
    expect(a).toEqual({ key: 'alice', used: 40, idle: 20, unmeasured: 20, unreserved: 20, total: 10 })
    expect(b.unmeasured).toBe(50)
    expect(b.used + b.idle + b.unreserved).toBe(0)
  })
  it('draws nothing when nothing was used', () => {
    expect(bars([row('x', {})])[0]).toMatchObject({ used: 0, idle: 0, unmeasured: 0, unreserved: 0 })
  })
})

describe('formatting', () => {
  it('orders the chart by size and keeps a few', () => {
    const rows = [row('a', { reserved_gpu_hours: 1 }), row('b', { unreserved_gpu_hours: 5 }), row('c', { reserved_gpu_hours: 3 })]
    expect(largestFirst(rows, 2).map((r) => r.key)).toEqual(['b', 'c'])
  })
  it('reads hours, shares and the file name', () => {
    expect(hours(0)).toBe('0')
    expect(hours(0.0007)).toBe('< 0.1')
    expect(hours(1.25)).toBe('1.3')
    expect(hours(1234.4)).toBe('1,234')
    expect(share(null)).toBe('—')
    expect(share(0.254)).toBe('25%')
    expect(csvName('host', '2026-11-01', '2026-12-01')).toBe('warden-usage-host-2026-11-01-2026-12-01.csv')
  })
})
