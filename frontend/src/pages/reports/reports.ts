// The reports page's pure logic: periods, the figures a bar shows, how numbers read.

export type Grouping = 'user' | 'group' | 'host' | 'gpu_model'
export type Preset = '7d' | '30d' | 'this-month' | 'last-month' | 'year' | 'custom'

export interface UsageRow {
  key: string
  reserved_gpu_hours: number
  used_gpu_hours: number
  idle_gpu_hours: number
  idle_share: number | null
  unreserved_gpu_hours: number
  violations_caused: number
  violations_suffered: number
  jobs: number
}

export const GROUPINGS: { value: Grouping; label: string }[] = [
  { value: 'user', label: 'User' },
  { value: 'group', label: 'Group' },
  { value: 'host', label: 'Host' },
  { value: 'gpu_model', label: 'GPU model' },
]

export const PRESETS: { value: Preset; label: string }[] = [
  { value: '7d', label: 'Last 7 days' },
  { value: '30d', label: 'Last 30 days' },
  { value: 'this-month', label: 'This month' },
  { value: 'last-month', label: 'Last month' },
  { value: 'year', label: 'Last 365 days' },
  { value: 'custom', label: 'Custom' },
]

const DAY_MS = 86_400_000

/** `YYYY-MM-DD` of a date, in UTC (the API reads a bare date as midnight UTC). */
export function isoDay(date: Date): string {
  return date.toISOString().slice(0, 10)
}

/** [start, end) of a preset as API dates; `end` is tomorrow (UTC) for periods up to now. */
export function presetPeriod(preset: Exclude<Preset, 'custom'>, now: Date): { start: string; end: string } {
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate())
  const tomorrow = new Date(today + DAY_MS)
  const monthStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1))
  switch (preset) {
    case '7d':
      return { start: isoDay(new Date(today - 6 * DAY_MS)), end: isoDay(tomorrow) }
    case '30d':
      return { start: isoDay(new Date(today - 29 * DAY_MS)), end: isoDay(tomorrow) }
    case 'this-month':
      return { start: isoDay(monthStart), end: isoDay(tomorrow) }
    case 'last-month':
      return {
        start: isoDay(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1))),
        end: isoDay(monthStart),
      }
    case 'year':
      return { start: isoDay(new Date(today - 364 * DAY_MS)), end: isoDay(tomorrow) }
  }
}

/** A problem with a custom period, in words (null: fine); the API says the same with 422. */
export function periodProblem(start: string, end: string): string | null {
  if (!start || !end) return 'Pick a start and an end.'
  const from = Date.parse(`${start}T00:00:00Z`)
  const to = Date.parse(`${end}T00:00:00Z`)
  if (Number.isNaN(from) || Number.isNaN(to)) return 'Dates are YYYY-MM-DD.'
  if (to <= from) return 'The end must be after the start.'
  if (to - from > 366 * DAY_MS) return 'A report covers at most 366 days.'
  return null
}

/** One bar of the chart: used, idle and not measured reserved hours, and unreserved use, as
 * percentages of the widest bar (reserved + unreserved of the largest row). */
export interface Bar {
  key: string
  used: number
  idle: number
  unmeasured: number
  unreserved: number
  total: number
}

export function bars(rows: UsageRow[]): Bar[] {
  const widest = Math.max(0, ...rows.map((r) => r.reserved_gpu_hours + r.unreserved_gpu_hours))
  const pct = (hours: number) => (widest > 0 ? (100 * Math.max(0, hours)) / widest : 0)
  return rows.map((r) => {
    const unmeasured = r.reserved_gpu_hours - r.used_gpu_hours - r.idle_gpu_hours
    return {
      key: r.key,
      used: pct(r.used_gpu_hours),
      idle: pct(r.idle_gpu_hours),
      unmeasured: pct(unmeasured),
      unreserved: pct(r.unreserved_gpu_hours),
      total: r.reserved_gpu_hours + r.unreserved_gpu_hours,
    }
  })
}

/** The rows, largest reserved + unreserved first (the table keeps the API's order). */
export function largestFirst(rows: UsageRow[], limit = 20): UsageRow[] {
  return [...rows]
    .sort((a, b) => b.reserved_gpu_hours + b.unreserved_gpu_hours - (a.reserved_gpu_hours + a.unreserved_gpu_hours))
    .slice(0, limit)
}

export function hours(value: number): string {
  if (value === 0) return '0'
  if (value > 0 && value < 0.05) return '< 0.1' // a few minutes: not nothing
  if (value < 10) return value.toFixed(1)
  return Math.round(value).toLocaleString('en-US')
}

export function share(value: number | null): string {
  return value == null ? '—' : `${Math.round(value * 100)}%`
}

/** The file name the CSV is saved under. */
export function csvName(by: Grouping, start: string, end: string): string {
  return `warden-usage-${by}-${start}-${end}.csv`
}
