// Pure geometry of the week calendar: days, wall-clock minutes, drag snapping, block placement.
// A day column spans 24 h linearly, 00:00 at its top and 24:00 at its bottom (wall clock, so a
// DST day still reads 00:00-24:00).
import { gpuName } from '../../format'

export const DAY_MINUTES = 24 * 60
export const SNAP_MINUTES = 30
const MS_MINUTE = 60_000

const pad = (n: number) => String(n).padStart(2, '0')

/** "YYYY-MM-DD" of a Date in local time. */
export function dateKey(date: Date): string {
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`
}

/** Local midnight of "YYYY-MM-DD"; null when it is not such a date. */
export function parseDateKey(key: string | null | undefined): Date | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(key ?? '')
  if (!m) return null
  const d = new Date(Number(m[1]), Number(m[2]) - 1, Number(m[3]))
  return Number.isNaN(d.getTime()) || dateKey(d) !== key ? null : d
}

/** Local midnight of the same day. */
export function startOfDay(date: Date): Date {
  return new Date(date.getFullYear(), date.getMonth(), date.getDate())
}

/** Local midnight `n` days later (wall clock: a DST day is still one day). */
export function addDays(date: Date, n: number): Date {
  return new Date(date.getFullYear(), date.getMonth(), date.getDate() + n)
}

/** Monday 00:00 (local) of the week holding `date`. */
export function startOfWeek(date: Date): Date {
  const day = startOfDay(date)
  const offset = (day.getDay() + 6) % 7 // Monday = 0
  return addDays(day, -offset)
}

/** The 7 days (local midnights) from Monday. */
export function weekDays(monday: Date): Date[] {
  return Array.from({ length: 7 }, (_, i) => addDays(monday, i))
}

/** The instant at `minutes` after local midnight of `day` (wall clock; 1440 = next midnight). */
export function atMinutes(day: Date, minutes: number): Date {
  return new Date(day.getFullYear(), day.getMonth(), day.getDate(), 0, minutes)
}

/** Wall-clock minutes of `t` within `day`, clipped to 0..1440. */
export function minutesInDay(t: Date, day: Date): number {
  const next = addDays(day, 1)
  if (t.getTime() <= day.getTime()) return 0
  if (t.getTime() >= next.getTime()) return DAY_MINUTES
  return t.getHours() * 60 + t.getMinutes() + t.getSeconds() / 60
}

/** Minutes since 00:00 for a y offset (px) in a column `height` px tall, clamped. */
export function yToMinutes(y: number, height: number): number {
  if (height <= 0) return 0
  return Math.min(DAY_MINUTES, Math.max(0, (y / height) * DAY_MINUTES))
}

export function minutesToY(minutes: number, height: number): number {
  return (minutes / DAY_MINUTES) * height
}

/**
 * The snapped range a drag from y0 to y1 (either direction) selects: the start rounds down, the
 * end up, to `snap` minutes, at least one snap long, inside the day.
 */
export function dragRange(
  y0: number,
  y1: number,
  height: number,
  snap = SNAP_MINUTES,
): { start: number; end: number } {
  const a = yToMinutes(Math.min(y0, y1), height)
  const b = yToMinutes(Math.max(y0, y1), height)
  let start = Math.floor(a / snap) * snap
  let end = Math.ceil(b / snap) * snap
  if (end - start < snap) end = start + snap
  if (end > DAY_MINUTES) {
    end = DAY_MINUTES
    start = Math.min(start, end - snap)
  }
  return { start, end }
}

/** Where an interval sits in a day column, in percent of its height; null when not on that day. */
export function blockPlacement(
  start: Date,
  end: Date,
  day: Date,
): { top: number; height: number; clippedTop: boolean; clippedBottom: boolean } | null {
  const dayStart = day.getTime()
  const dayEnd = addDays(day, 1).getTime()
  if (end.getTime() <= dayStart || start.getTime() >= dayEnd) return null
  const a = minutesInDay(start, day)
  const b = minutesInDay(end, day)
  return {
    top: (a / DAY_MINUTES) * 100,
    height: (Math.max(b - a, 0) / DAY_MINUTES) * 100,
    clippedTop: start.getTime() < dayStart,
    clippedBottom: end.getTime() > dayEnd,
  }
}

/** How much of a day column is past at `now`, in percent of its height (shaded). */
export function pastPercent(day: Date, now: Date): number {
  if (addDays(day, 1).getTime() <= now.getTime()) return 100
  if (day.getTime() > now.getTime()) return 0
  return (minutesInDay(now, day) / DAY_MINUTES) * 100
}

/**
 * Where the grid opens, in px from its top: with the now-line a third of the way down the
 * `viewPx` tall view when today is shown, else at 08:00.
 */
export function openingScrollTop(showsToday: boolean, now: Date, hourPx: number, viewPx: number): number {
  const columnPx = hourPx * 24
  const target = showsToday ? ((now.getHours() * 60 + now.getMinutes()) / 60) * hourPx - viewPx / 3 : 8 * hourPx
  return Math.round(Math.max(0, Math.min(columnPx - viewPx, target)))
}

/** Runs of slots with a state, e.g. the overview's, as [start, end) minute spans within `day`. */
export function blockedSpans(
  runs: { first: number; count: number; state: string }[],
  gridStart: Date,
  slotMinutes: number,
  day: Date,
  state = 'not_allowed',
): { top: number; height: number }[] {
  const out: { top: number; height: number }[] = []
  for (const run of runs) {
    if (run.state !== state) continue
    const s = new Date(gridStart.getTime() + run.first * slotMinutes * MS_MINUTE)
    const e = new Date(gridStart.getTime() + (run.first + run.count) * slotMinutes * MS_MINUTE)
    const p = blockPlacement(s, e, day)
    if (p && p.height > 0) out.push({ top: p.top, height: p.height })
  }
  return out
}

/** Two intervals overlap (half-open). */
export function overlaps(aStart: Date, aEnd: Date, bStart: Date, bEnd: Date): boolean {
  return aStart.getTime() < bEnd.getTime() && bStart.getTime() < aEnd.getTime()
}

/** "sim-001 GPU 0". */
export function gpuLabel(gpu: { host: string; index: number | null | undefined }): string {
  return `${gpu.host} ${gpuName(gpu.index)}`
}


/** The `gpus` query value as a list of uuids (comma-separated, blanks dropped, no repeats). */
export function parseGpuQuery(value: unknown): string[] {
  const raw = Array.isArray(value) ? value.join(',') : typeof value === 'string' ? value : ''
  return [...new Set(raw.split(',').map((s) => s.trim()).filter(Boolean))]
}
