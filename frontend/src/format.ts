// Numbers and times as people read them. A figure a GPU does not report is null: shown as "—".

export const DASH = '—'

export function percent(value: number | null | undefined): string {
  return value == null ? DASH : `${Math.round(value)}%`
}

export function mib(value: number | null | undefined): string {
  if (value == null) return DASH
  return value >= 1024 ? `${(value / 1024).toFixed(1)} GiB` : `${Math.round(value)} MiB`
}

export function watts(value: number | null | undefined): string {
  return value == null ? DASH : `${Math.round(value)} W`
}

// A MIG instance's index is 1000 × (its GPU's index + 1) + its number on that GPU (MIG Dev):
// instance 1 of GPU 0 is index 1001, written "GPU 0/mig1" (`host:0/mig1` in the CLI).
export const MIG_INDEX_BASE = 1000

/** "GPU 3", or "GPU 0/mig1" for a MIG instance. */
export function gpuName(index: number | null | undefined): string {
  if (index == null) return 'GPU'
  if (index < MIG_INDEX_BASE) return `GPU ${index}`
  return `GPU ${Math.floor(index / MIG_INDEX_BASE) - 1}/mig${index % MIG_INDEX_BASE}`
}

/** The indexes of a host's GPUs that are split into MIG instances (not bookable whole). */
export function splitGpus(indexes: Iterable<number>): Set<number> {
  const split = new Set<number>()
  for (const index of indexes) if (index >= MIG_INDEX_BASE) split.add(Math.floor(index / MIG_INDEX_BASE) - 1)
  return split
}

/** Where a GPU sorts among its host's: a GPU's MIG instances right after it. */
export function gpuOrder(index: number | null | undefined): number {
  if (index == null) return 0
  if (index < MIG_INDEX_BASE) return index * MIG_INDEX_BASE
  return (Math.floor(index / MIG_INDEX_BASE) - 1) * MIG_INDEX_BASE + (index % MIG_INDEX_BASE) + 1
}

export function celsius(value: number | null | undefined): string {
  return value == null ? DASH : `${Math.round(value)} °C`
}

// Every time on every page is written one way: this browser's locale (its 12- or 24-hour
// clock, its order of day and month), in the browser's own time zone.
const TIME: Intl.DateTimeFormatOptions = { hour: '2-digit', minute: '2-digit' }

/** "14:05" (or "02:05 PM"): a time of day as the browser's locale writes it. */
export function timeOfDay(t: Date, seconds = false): string {
  return t.toLocaleTimeString(undefined, seconds ? { ...TIME, second: '2-digit' } : TIME)
}

/** A time of day given as minutes after midnight (the calendar's axis and drags). */
export function minutesOfDay(minutes: number): string {
  const m = Math.round(minutes)
  return timeOfDay(new Date(2000, 0, 1, Math.floor(m / 60), m % 60))
}

/** "Fri 27 Nov 2026, 14:05": a whole date and time, without seconds. */
export function dateTime(t: Date | string, withYear = true): string {
  const d = typeof t === 'string' ? new Date(t) : t
  return d.toLocaleString(undefined, {
    weekday: 'short', day: 'numeric', month: 'short', ...(withYear ? { year: 'numeric' } : {}), ...TIME,
  })
}

/** "14:05", or "Tue 14:05" when not today, or "3 Dec 14:05" when not this week. */
export function when(iso: string | null | undefined, now: Date = new Date()): string {
  if (!iso) return DASH
  const t = new Date(iso)
  const time = timeOfDay(t)
  if (t.toDateString() === now.toDateString()) return time
  const days = Math.abs(t.getTime() - now.getTime()) / 86_400_000
  if (days < 6) return `${t.toLocaleDateString(undefined, { weekday: 'short' })} ${time}`
  return `${t.toLocaleDateString(undefined, { day: 'numeric', month: 'short' })} ${time}`
}

/** "host" for 1, "hosts" for any other count: `${n} ${plural(n, 'host')}`. */
export function plural(n: number, one: string, many = `${one}s`): string {
  return n === 1 ? one : many
}

/** "45 s", "12 min", "3 h 05 min", "2 d 4 h". */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds))
  if (s < 60) return `${s} s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m} min`
  const h = Math.floor(m / 60)
  if (h < 48) return `${h} h ${String(m % 60).padStart(2, '0')} min`
  return `${Math.floor(h / 24)} d ${h % 24} h`
}

/** A Date as the value of <input type="datetime-local"> (local time, minutes). */
export function toLocalInput(date: Date): string {
  const pad = (n: number) => String(n).padStart(2, '0')
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`
}

/** The value of <input type="datetime-local"> as an ISO time with this browser's offset. */
export function fromLocalInput(value: string): string {
  return new Date(value).toISOString()
}
